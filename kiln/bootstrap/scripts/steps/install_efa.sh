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

# Print the EFA software on this node: the installer's version, "present" for a loaded EFA module that no installer
# version names (an image's minimal install), or nothing.
efa_on_node() {
  local version
  version="$(efa_installed_version)"
  if [[ -n "$version" ]]; then
    printf '%s\n' "$version"
  elif [[ -d "$(root_path /sys/module/efa)" ]]; then
    printf 'present\n'
  fi
}

install_efa() {
  local want="${KILN_EFA_INSTALLER_VERSION:-}" have work
  if ((KILN_EFA_COUNT == 0)); then
    skip "${KILN_INSTANCE_TYPE} has no EFA interfaces"
    return 0
  fi
  if [[ -n "${KILN_IMAGE_EFA_INSTALLER:-}" ]]; then
    adopt_component "EFA software" "$(efa_on_node)" "$KILN_IMAGE_EFA_INSTALLER"
    return 0
  fi
  [[ -n "$want" ]] || die "software.efa_installer is not pinned and the ${KILN_IMAGE_TITLE} ships no EFA software"
  have="$(efa_installed_version)"
  if [[ -n "$have" ]] && version_at_least "$have" "$want"; then
    # An older installer over a newer one would downgrade libfabric and the plugin under running software.
    skip "EFA installer ${have} is installed (${want} or newer): kept"
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
