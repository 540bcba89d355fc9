# shellcheck shell=bash
# NVIDIA driver from its pinned runfile, plus fabric manager on NVSwitch types
# (whose version must equal the driver's, or the GPUs stay unusable).

# Print the loaded driver's version, else the one kiln recorded.
nvidia_driver_version() {
  local module
  module="$(root_path /sys/module/nvidia/version)"
  if [[ -r "$module" ]]; then
    cat "$module"
  else
    installed_version nvidia-driver
  fi
}

install_kernel_build_packages() {
  local kernel
  kernel="$(uname -r)"
  if [[ "$KILN_PKG" == apt ]]; then
    ensure_packages "linux-headers-${kernel}" dkms gcc make
  else
    ensure_packages "kernel-devel-${kernel}" "kernel-headers-${kernel}" gcc make
  fi
}

install_fabric_manager() {
  local version="$1" branch="${1%%.*}"
  if already_installed fabric-manager "$version"; then
    skip "fabric manager ${version} is installed"
    return 0
  fi
  if [[ "$KILN_PKG" == apt ]]; then
    fetch_artifact cuda-keyring
    install_packages "$KILN_FETCHED"
    refresh_package_index
    install_packages "nvidia-fabricmanager-${branch}=${version}-1"
  else
    fetch_artifact cuda-rpm-key
    install -D -m 0644 "$KILN_FETCHED" "$(root_path /etc/pki/rpm-gpg/RPM-GPG-KEY-NVIDIA-CUDA)"
    write_file "$(root_path /etc/yum.repos.d/kiln-cuda.repo)" <<REPO
[kiln-cuda]
name=NVIDIA CUDA (fabric manager)
baseurl=https://developer.download.nvidia.com/compute/cuda/repos/amzn2023/${KILN_REPO_ARCH}
enabled=1
gpgcheck=1
gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-NVIDIA-CUDA
REPO
    refresh_package_index
    install_packages "nvidia-fabric-manager-${version}"
  fi
  systemctl enable nvidia-fabricmanager
  record_installed fabric-manager "$version"
}

install_nvidia_driver() {
  local want="${KILN_NVIDIA_DRIVER_VERSION:-}" have
  if ((KILN_GPU_COUNT == 0)); then
    skip "no NVIDIA GPUs on ${KILN_INSTANCE_TYPE}"
    return 0
  fi
  if [[ -z "$want" ]]; then
    skip "software.nvidia_driver is not pinned: keeping the image's driver"
    return 0
  fi
  have="$(nvidia_driver_version)"
  if [[ "$have" == "$want" ]]; then
    skip "NVIDIA driver ${want} is installed"
  else
    log "installing NVIDIA driver ${want} (found: ${have:-none})"
    install_kernel_build_packages
    fetch_artifact nvidia-driver
    local -a flags=(--silent --no-questions --ui=none)
    # DKMS rebuilds the module on kernel updates; AL2023 has no dkms package.
    if [[ "$KILN_PKG" == apt ]]; then
      flags+=(--dkms)
    fi
    sh "$KILN_FETCHED" "${flags[@]}"
    record_installed nvidia-driver "$want"
  fi
  if ((KILN_NVSWITCH == 1)); then
    install_fabric_manager "$want"
  fi
}
