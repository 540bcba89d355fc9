# shellcheck shell=bash
# Lustre client for FSx: AWS's signed apt repository on Ubuntu, the distribution's package on AL2023.

# Print "present" when the Lustre client for kernel $1 is installed.
lustre_client_on_node() {
  if [[ "$KILN_PKG" == dnf ]] && package_installed lustre-client; then
    printf 'present\n'
  elif [[ "$KILN_PKG" == apt ]] && package_installed "lustre-client-modules-$1"; then
    printf 'present\n'
  fi
  return 0
}

install_lustre_client() {
  local kernel
  if [[ "${KILN_LUSTRE:-0}" != 1 ]]; then
    skip "the cluster has no FSx for Lustre"
    return 0
  fi
  kernel="$(uname -r)"
  if [[ -n "${KILN_IMAGE_LUSTRE_CLIENT:-}" ]]; then
    adopt_component "Lustre client" "$(lustre_client_on_node "$kernel")" "$KILN_IMAGE_LUSTRE_CLIENT"
    return 0
  fi
  if [[ "$KILN_PKG" == dnf ]]; then
    ensure_packages lustre-client
    return 0
  fi
  if package_installed "lustre-client-modules-${kernel}"; then
    skip "Lustre client modules for ${kernel} are installed"
    return 0
  fi
  add_signed_repository fsx-lustre
  # The -aws meta package keeps the modules in step with kernel updates.
  install_packages "lustre-client-modules-${kernel}" lustre-client-modules-aws
}
