# shellcheck shell=bash
# Docker or containerd, plus the NVIDIA container toolkit on GPU nodes from NVIDIA's signed repository,
# pinned by version (enroot's GPU hook needs its nvidia-container-cli too).

install_nvidia_container_toolkit() {
  local want="$1" name have
  local -a packages=(nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1)
  local -a pinned=()
  if package_installed nvidia-container-toolkit "$want"; then
    skip "NVIDIA container toolkit ${want} is installed"
    return 0
  fi
  have="$(package_version nvidia-container-toolkit)"
  if [[ -n "$have" ]] && version_at_least "$have" "$want"; then
    # An image's newer toolkit stays: kiln never downgrades it (apt refuses a downgrade under -y; dnf makes one).
    skip "NVIDIA container toolkit ${have}: the image's, newer than kiln's ${want}; adopted (kiln installs none)"
    return 0
  fi
  add_signed_repository nvidia-container-toolkit
  for name in "${packages[@]}"; do
    pinned+=("$(pinned_package "$name" "${want}-1")")
  done
  install_packages "${pinned[@]}"
  nvidia-ctk runtime configure --runtime="$KILN_CONTAINER_RUNTIME"
  restart_if_active "$KILN_CONTAINER_RUNTIME"
}

install_container_runtime() {
  local package
  if [[ "${KILN_CONTAINERS:-0}" != 1 ]]; then
    skip "containers are off for this cluster"
    return 0
  fi
  if [[ "$KILN_CONTAINER_RUNTIME" == docker ]]; then
    package=docker.io
    if [[ "$KILN_PKG" == dnf ]]; then
      package=docker
    fi
  else
    package=containerd
  fi
  if command -v "$KILN_CONTAINER_RUNTIME" >/dev/null 2>&1 || package_installed "$package"; then
    skip "${KILN_CONTAINER_RUNTIME} is installed"
  else
    install_packages "$package"
    systemctl enable "$KILN_CONTAINER_RUNTIME"
  fi
  if ((KILN_GPU_COUNT > 0)) && [[ -n "${KILN_IMAGE_NVIDIA_CONTAINER_TOOLKIT:-}" ]]; then
    adopt_component "NVIDIA container toolkit" "$(package_version nvidia-container-toolkit)" \
      "$KILN_IMAGE_NVIDIA_CONTAINER_TOOLKIT"
  elif ((KILN_GPU_COUNT > 0)) && [[ -n "${KILN_NVIDIA_CONTAINER_TOOLKIT_VERSION:-}" ]]; then
    install_nvidia_container_toolkit "$KILN_NVIDIA_CONTAINER_TOOLKIT_VERSION"
  fi
}
