# shellcheck shell=bash
# Lustre client for FSx: AWS's apt repository on Ubuntu, the distribution's package on AL2023.

install_lustre_client() {
  local kernel keyring
  if [[ "${KILN_LUSTRE:-0}" != 1 ]]; then
    skip "the cluster has no FSx for Lustre"
    return 0
  fi
  kernel="$(uname -r)"
  if [[ "$KILN_PKG" == dnf ]]; then
    if package_installed lustre-client; then
      skip "lustre-client is installed"
      return 0
    fi
    install_packages lustre-client
    return 0
  fi
  if package_installed "lustre-client-modules-${kernel}"; then
    skip "Lustre client modules for ${kernel} are installed"
    return 0
  fi
  fetch_artifact fsx-lustre-client-key
  keyring="/etc/apt/keyrings/fsx-lustre-client.asc"
  install -D -m 0644 "$KILN_FETCHED" "$(root_path "$keyring")"
  write_file "$(root_path /etc/apt/sources.list.d/fsx-lustre-client.list)" < <(
    printf 'deb [signed-by=%s] https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu %s main\n' \
      "$keyring" "$(os_codename)"
  )
  refresh_package_index
  # The -aws meta package keeps the modules in step with kernel updates.
  install_packages "lustre-client-modules-${kernel}" lustre-client-modules-aws
}
