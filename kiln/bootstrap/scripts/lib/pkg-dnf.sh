# shellcheck shell=bash
# The package manager's part of the library on Amazon Linux: dnf and rpm. pkg-apt.sh defines the same functions
# for apt; detect_os sources the node's one. Sourced, never run.

# Print the lock files dnf and rpm hold while they work, one a line.
package_lock_files() {
  printf '%s\n' /var/lib/rpm/.rpm.lock /var/cache/dnf/metadata_lock.pid /var/lib/dnf/rpmdb_lock.pid
}

# Print the VERSION-RELEASE rpm has installed of package $1; false when it has none.
installed_package_version() {
  rpm -q --qf '%{VERSION}-%{RELEASE}' "$1" 2>/dev/null
}

# Install packages $@ with dnf, retrying (dnf refreshes its own metadata).
install_with_package_manager() {
  retry "$KILN_RETRY_ATTEMPTS" dnf -y -q install "$@"
}

# Fetch the repositories' metadata again, after adding a repository.
refresh_package_index() {
  retry "$KILN_RETRY_ATTEMPTS" dnf -y -q makecache
}

# Install repository $1: its key (fingerprint $3, in GnuPG home $2) armored under /etc/pki/rpm-gpg, and a repo file
# for bundle.env's KILN_REPO_<NAME>_BASEURL that checks every package against that key.
write_repository() {
  local name="$1" home="$2" fingerprint="$3" baseurl keyring
  baseurl="$(bundle_value REPO "$name" BASEURL)"
  keyring="/etc/pki/rpm-gpg/RPM-GPG-KEY-kiln-${name}"
  gpg --batch --homedir "$home" --armor --export "$fingerprint" | write_file "$(root_path "$keyring")"
  write_file "$(root_path "/etc/yum.repos.d/kiln-${name}.repo")" <<REPO
[kiln-${name}]
name=kiln: ${name}
baseurl=${baseurl}
enabled=1
gpgcheck=1
gpgkey=file://${keyring}
REPO
}

# Install the headers and tools that DKMS kernel modules (NVIDIA, Neuron) build with, for the running kernel. Amazon
# Linux 2023 names its kernel packages per kernel series (kernel for 6.1, kernel6.12 for 6.12, ...): bundle.env's
# KILN_KERNEL_PACKAGES holds series=stem pairs from kiln's platform data.
install_kernel_build_packages() {
  local kernel minor series pair stem=""
  kernel="$(uname -r)"
  minor="${kernel#*.}"
  series="${kernel%%.*}.${minor%%.*}"
  for pair in ${KILN_KERNEL_PACKAGES:-}; do
    [[ "${pair%%=*}" != "$series" ]] || stem="${pair#*=}"
  done
  [[ -n "$stem" ]] ||
    die "kernel ${kernel}: kiln's platform data names no Amazon Linux 2023 headers package for its series" \
      "(known: ${KILN_KERNEL_PACKAGES:-none}); a DKMS module cannot build without them"
  ensure_packages "${stem}-devel-${kernel}" "${stem}-headers-${kernel}" dkms gcc make
}

# Print dnf's spelling of package $1 at version $2: name-version.
pinned_package() {
  printf '%s-%s\n' "$1" "$2"
}

# Install what python3 -m venv needs: Amazon Linux's python3 has the venv module.
ensure_venv_packages() {
  ensure_packages python3
}
