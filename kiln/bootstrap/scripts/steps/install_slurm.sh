# shellcheck shell=bash
# Slurm from the distribution's packages, where the backend supplies no Slurm (the local
# cluster). Only missing packages are installed; daemons are not configured here.

install_slurm() {
  if [[ "${KILN_SLURM_SOURCE:-backend}" != distro ]]; then
    skip "Slurm comes with the ${KILN_TARGET} image"
    return 0
  fi
  [[ "$KILN_PKG" == apt ]] || die "Slurm from distribution packages needs Debian or Ubuntu, found ${KILN_OS}"
  ensure_packages slurmctld slurmd slurm-client
}
