# shellcheck shell=bash
# The package manager's part of the library on Debian and Ubuntu: apt and dpkg. pkg-dnf.sh defines the same
# functions for dnf; detect_os sources the node's one. Sourced, never run.

# Print the lock files apt and dpkg hold while they work, one a line.
package_lock_files() {
  printf '%s\n' /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock
}

# Print the version dpkg has installed of package $1; false when it has none.
installed_package_version() {
  local have
  have="$(dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null)" || return 1
  [[ "$have" == "install ok installed "* ]] || return 1
  printf '%s\n' "${have#install ok installed }"
}

# Install packages $@ with apt-get, retrying; the package index is fetched first, once a boot.
install_with_package_manager() {
  # Under /run, so an index fetched when the image was baked is never taken as fresh.
  if [[ ! -f "$(root_path /run/kiln/apt-updated)" ]]; then
    retry "$KILN_RETRY_ATTEMPTS" apt_get update
    mkdir -p "$(root_path /run/kiln)"
    touch "$(root_path /run/kiln/apt-updated)"
  fi
  retry "$KILN_RETRY_ATTEMPTS" apt_get install --no-install-recommends "$@"
}

# Forget that the package index is fresh, after adding a repository: the next install fetches it again.
refresh_package_index() {
  rm -f "$(root_path /run/kiln/apt-updated)"
}

# Install repository $1: its key (fingerprint $3, in GnuPG home $2) as a keyring of its own, and its apt source
# (bundle.env's KILN_REPO_<NAME>_APT_SOURCE) signed by that keyring only.
write_repository() {
  local name="$1" home="$2" fingerprint="$3" apt_source keyring
  apt_source="$(bundle_value REPO "$name" APT_SOURCE)"
  keyring="/etc/apt/keyrings/kiln-${name}.gpg"
  gpg --batch --homedir "$home" --export "$fingerprint" | write_file "$(root_path "$keyring")"
  write_file "$(root_path "/etc/apt/sources.list.d/kiln-${name}.list")" <<<"deb [signed-by=${keyring}] ${apt_source}"
}

# Install the headers and tools that DKMS kernel modules (NVIDIA, Neuron) build with.
install_kernel_build_packages() {
  local kernel
  kernel="$(uname -r)"
  ensure_packages "linux-headers-${kernel}" dkms gcc make
}

# Print apt's spelling of package $1 at version $2: name=version.
pinned_package() {
  printf '%s=%s\n' "$1" "$2"
}

# Install what python3 -m venv needs: Debian and Ubuntu ship the venv module apart from Python.
ensure_venv_packages() {
  ensure_packages python3-venv
}
