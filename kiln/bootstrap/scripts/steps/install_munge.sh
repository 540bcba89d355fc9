# shellcheck shell=bash
# munge from the distribution's packages, where the backend supplies no Slurm (the local
# cluster). Installed only when missing; the key is not made here.

install_munge() {
  if [[ "${KILN_SLURM_SOURCE:-backend}" != distro ]]; then
    skip "munge comes with the ${KILN_TARGET} image"
    return 0
  fi
  ensure_packages munge
}
