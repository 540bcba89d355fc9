# shellcheck shell=bash
# Docker or containerd, plus the NVIDIA container toolkit on GPU nodes, pinned by version.

install_nvidia_container_toolkit() {
  local want="$1" keyring
  local -a packages=(nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1)
  local -a pinned=()
  if package_installed nvidia-container-toolkit "$want"; then
    skip "NVIDIA container toolkit ${want} is installed"
    return 0
  fi
  fetch_artifact nvidia-container-toolkit-key
  if [[ "$KILN_PKG" == apt ]]; then
    keyring=/etc/apt/keyrings/nvidia-container-toolkit.asc
    install -D -m 0644 "$KILN_FETCHED" "$(root_path "$keyring")"
    # $(ARCH) is apt's own variable, expanded by apt, not by the shell.
    # shellcheck disable=SC2016
    write_file "$(root_path /etc/apt/sources.list.d/nvidia-container-toolkit.list)" < <(
      printf 'deb [signed-by=%s] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n' "$keyring"
    )
    local name
    for name in "${packages[@]}"; do
      pinned+=("${name}=${want}-1")
    done
  else
    install -D -m 0644 "$KILN_FETCHED" "$(root_path /etc/pki/rpm-gpg/RPM-GPG-KEY-NVIDIA-CONTAINER-TOOLKIT)"
    write_file "$(root_path /etc/yum.repos.d/nvidia-container-toolkit.repo)" <<'REPO'
[nvidia-container-toolkit]
name=NVIDIA container toolkit
baseurl=https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch
enabled=1
gpgcheck=1
repo_gpgcheck=1
gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-NVIDIA-CONTAINER-TOOLKIT
REPO
    local name
    for name in "${packages[@]}"; do
      pinned+=("${name}-${want}")
    done
  fi
  refresh_package_index
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
  if ((KILN_GPU_COUNT > 0)) && [[ -n "${KILN_NVIDIA_CONTAINER_TOOLKIT_VERSION:-}" ]]; then
    install_nvidia_container_toolkit "$KILN_NVIDIA_CONTAINER_TOOLKIT_VERSION"
  fi
}
