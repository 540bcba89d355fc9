# shellcheck shell=bash
# EFA installer (kernel module, libfabric, Open MPI, aws-ofi-nccl), pinned by version and sha256.

# Print the installed EFA installer version, from the file the installer leaves, else kiln's record.
efa_installed_version() {
  local file line
  file="$(root_path /opt/amazon/efa_installed_packages)"
  if [[ -r "$file" ]]; then
    while IFS= read -r line; do
      if [[ "$line" == "# EFA installer version: "* ]]; then
        printf '%s\n' "${line##*: }"
        return 0
      fi
    done <"$file"
  fi
  installed_version efa-installer
}

install_efa() {
  local want="${KILN_EFA_INSTALLER_VERSION:-}" have work
  if ((KILN_EFA_COUNT == 0)); then
    skip "${KILN_INSTANCE_TYPE} has no EFA interfaces"
    return 0
  fi
  if [[ -z "$want" ]]; then
    skip "software.efa_installer is not pinned: keeping the image's EFA software"
    return 0
  fi
  have="$(efa_installed_version)"
  if [[ "$have" == "$want" ]]; then
    skip "EFA installer ${want} is installed"
    return 0
  fi
  log "installing EFA installer ${want} (found: ${have:-none})"
  fetch_artifact efa-installer
  work="$(root_path /var/cache/kiln/build/efa)"
  rm -rf "$work"
  mkdir -p "$work"
  tar -xzf "$KILN_FETCHED" -C "$work"
  # The installer runs apt/dnf itself, so it races cloud-init for the locks too.
  wait_for_package_locks
  (cd "${work}/aws-efa-installer" && ./efa_installer.sh -y)
  rm -rf "$work"
  record_installed efa-installer "$want"
}
