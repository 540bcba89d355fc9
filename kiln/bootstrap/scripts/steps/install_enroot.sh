# shellcheck shell=bash
# enroot, with the +caps package for unprivileged use: the container runtime pyxis runs
# Slurm jobs in (`srun --container-image`).

install_enroot() {
  local want="${KILN_ENROOT_VERSION:-}" main caps
  if [[ "${KILN_CONTAINERS:-0}" != 1 ]]; then
    skip "enroot is not part of this bundle"
    return 0
  fi
  if [[ -n "${KILN_IMAGE_ENROOT:-}" ]]; then
    adopt_component enroot "$(package_version enroot)" "$KILN_IMAGE_ENROOT"
    return 0
  fi
  if [[ -z "$want" ]]; then
    skip "enroot is not part of this bundle"
    return 0
  fi
  if package_installed enroot "$want"; then
    skip "enroot ${want} is installed"
    return 0
  fi
  guard_replacement enroot enroot "$(package_version enroot)" "$want"
  fetch_artifact "enroot-${KILN_PACKAGE_FORMAT}"
  main="$KILN_FETCHED"
  fetch_artifact "enroot-caps-${KILN_PACKAGE_FORMAT}"
  caps="$KILN_FETCHED"
  install_packages "$main" "$caps"
  record_installed enroot "$want"
}
