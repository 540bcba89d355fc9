# shellcheck shell=bash
# NVIDIA data center driver (open kernel modules, DKMS) and its persistence daemon from NVIDIA's signed CUDA
# repository, every package held at the pinned driver version; on NVSwitch types also fabric manager, whose
# version must equal the driver's or the GPUs stay unusable, and on NVLink 5 NVSwitch types (HGX B200/B300)
# the NVLink subnet manager that fabric manager starts.

# Print the loaded driver's version, or nothing when no NVIDIA kernel module is loaded.
loaded_nvidia_driver() {
  local module
  module="$(root_path /sys/module/nvidia/version)"
  if [[ -r "$module" ]]; then
    cat "$module"
  fi
}

# Print the driver on this node: the loaded one's version, else the installed kernel module's (an image built on a
# machine without GPUs has one it never loaded), else the one kiln recorded.
nvidia_driver_version() {
  local version
  version="$(loaded_nvidia_driver)"
  if [[ -z "$version" ]]; then
    version="$(modinfo -F version nvidia 2>/dev/null || true)"
  fi
  if [[ -z "$version" ]]; then
    version="$(installed_version nvidia-driver)"
  fi
  if [[ -n "$version" ]]; then
    printf '%s\n' "$version"
  fi
}

# Print the fabric manager package of driver branch $1: NVIDIA dropped the branch from the name in 580.
fabric_manager_package() {
  if (($1 >= 580)); then
    printf 'nvidia-fabricmanager\n'
  elif [[ "$KILN_PKG" == apt ]]; then
    printf 'nvidia-fabricmanager-%s\n' "$1"
  else
    printf 'nvidia-fabric-manager\n'
  fi
}

# Print the packages (pinned to driver version $1) this node needs from the CUDA repository, one a line.
nvidia_driver_packages() {
  local want="$1" branch="${1%%.*}"
  if [[ "$KILN_PKG" == apt ]]; then
    # The driver's packages (-0ubuntu1) follow the preferences pin; fabric manager is -1 in NVIDIA's repository.
    printf '%s\n' "nvidia-driver-${branch}-open"
    if ((KILN_NVSWITCH == 1)); then
      printf '%s=%s-1\n' "$(fabric_manager_package "$branch")" "$want"
    fi
  else
    printf '%s\n' "nvidia-open-${want}" "kmod-nvidia-open-dkms-${want}" "nvidia-persistenced-${want}"
    if ((KILN_NVSWITCH == 1)); then
      printf '%s-%s\n' "$(fabric_manager_package "$branch")" "$want"
    fi
  fi
  if ((KILN_NVLSM == 1)); then
    # NVLSM is versioned by date, not by driver: the signed repository's current one.
    printf 'nvlsm\n'
  fi
}

# Adopt the loaded driver $1 where kiln expected $2 (the image's record, branch:VERSION, or the pinned version): what
# kiln expected is a release note's or the spec's word, the minimum is NVIDIA's (KILN_NVIDIA_DRIVER_MINIMUM, the least
# driver of the CUDA kiln's stack runs), so a loaded driver at or above the minimum stays, and only one below it stops
# the node.
adopt_loaded_driver() {
  local loaded="$1" expected="$2" floor
  if ! version_at_least "$loaded" "$KILN_NVIDIA_DRIVER_MINIMUM"; then
    die "NVIDIA driver ${loaded} is loaded: older than ${KILN_NVIDIA_DRIVER_MINIMUM}, the least driver CUDA 12 and its NCCL run on; boot an image with a newer driver, or bake one (compute.image.bake)"
  fi
  floor="${expected#branch:}"
  if [[ "$expected" == branch:* ]] && version_at_least "${loaded%%.*}" "${floor%%.*}"; then
    adopt_component "NVIDIA driver" "$loaded" "$expected"
  elif [[ "$expected" == branch:* ]]; then
    skip "NVIDIA driver ${loaded}: adopted from the ${KILN_IMAGE_TITLE} (kiln installs none); kiln's data records ${floor}, and the loaded one meets CUDA's minimum ${KILN_NVIDIA_DRIVER_MINIMUM}"
  else
    skip "NVIDIA driver ${loaded}: loaded, adopted in place of the pinned ${expected} (kiln installs none at boot; a bake replaces it); it meets CUDA's minimum ${KILN_NVIDIA_DRIVER_MINIMUM}"
  fi
}

install_nvidia_driver() {
  local want="${KILN_NVIDIA_DRIVER_VERSION:-}" have loaded fabric_manager
  if ((KILN_GPU_COUNT == 0)); then
    skip "no NVIDIA GPUs on ${KILN_INSTANCE_TYPE}"
    return 0
  fi
  have="$(nvidia_driver_version)"
  loaded="$(loaded_nvidia_driver)"
  if [[ -n "${KILN_IMAGE_NVIDIA_DRIVER:-}" && -n "$loaded" ]]; then
    adopt_loaded_driver "$loaded" "$KILN_IMAGE_NVIDIA_DRIVER"
    return 0
  elif [[ -n "${KILN_IMAGE_NVIDIA_DRIVER:-}" ]]; then
    adopt_component "NVIDIA driver" "$have" "$KILN_IMAGE_NVIDIA_DRIVER"
    return 0
  fi
  [[ -n "$want" ]] || die "software.nvidia_driver is not pinned and the ${KILN_IMAGE_TITLE} ships no driver"
  fabric_manager="$(fabric_manager_package "${want%%.*}")"
  if [[ "$have" == "$want" ]] && { ((KILN_NVSWITCH == 0)) || package_installed "$fabric_manager" "$want"; }; then
    skip "NVIDIA driver ${want} is installed"
    return 0
  fi
  if [[ -n "$loaded" && "$loaded" != "$want" && "${KILN_PHASE:-}" != bake ]]; then
    # The new module would only load after a reboot, which a node cannot take in the middle of its setup.
    adopt_loaded_driver "$loaded" "$want"
    return 0
  fi
  if [[ "$have" != "$(installed_version nvidia-driver)" ]]; then
    guard_replacement nvidia_driver "NVIDIA driver" "$have" "$want"
  fi
  log "installing NVIDIA driver ${want} (found: ${have:-none})"
  install_kernel_build_packages
  add_signed_repository cuda
  if [[ "$KILN_PKG" == apt ]]; then
    pin_apt_versions nvidia-driver "*nvidia* libnvidia-* libxnvctrl*" "${want}-*"
  fi
  local -a packages
  mapfile -t packages < <(nvidia_driver_packages "$want")
  install_packages "${packages[@]}"
  record_installed nvidia-driver "$want"
}
