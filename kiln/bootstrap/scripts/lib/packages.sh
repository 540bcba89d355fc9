# shellcheck shell=bash
# Packages through the node's package manager: its locks, what is installed, installs with retries, and vendor
# repositories signed by a pinned key. What differs between apt and dnf is in pkg-apt.sh and pkg-dnf.sh, which
# detect_os loads. Sourced by lib.sh, never run.

# True while another process holds the package manager's locks (cloud-init, unattended-upgrades).
package_manager_busy() {
  local lock
  local -a locks
  mapfile -t locks < <(package_lock_files)
  for lock in "${locks[@]}"; do
    lock="$(root_path "$lock")"
    if [[ -e "$lock" ]] && fuser "$lock" >/dev/null 2>&1; then
      return 0
    fi
  done
  return 1
}

# Wait, bounded, until no other process holds the package manager's locks.
wait_for_package_locks() {
  local deadline=$((SECONDS + KILN_LOCK_TIMEOUT_SECONDS))
  while package_manager_busy; do
    if ((SECONDS >= deadline)); then
      log "package manager still locked after ${KILN_LOCK_TIMEOUT_SECONDS}s"
      return 1
    fi
    log "package manager is locked by another process; waiting"
    sleep "$KILN_LOCK_POLL_SECONDS"
  done
}

# True when package $1 is installed; with $2, only when that version is ($2 may end in * to match any suffix).
package_installed() {
  local name="$1" want="${2:-}" have
  have="$(installed_package_version "$name")" || return 1
  if [[ "$want" == *"*" ]]; then
    [[ "$have" == "${want%"*"}"* ]]
  else
    [[ -z "$want" || "$have" == "$want" || "$have" == "$want"-* ]]
  fi
}

# apt-get as kiln runs it, for pkg-apt.sh and the apt branches of the steps: a function, so retry names it.
apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout="$KILN_LOCK_TIMEOUT_SECONDS" \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}

# Print the installed version of package $1, or nothing when it is not installed.
package_version() {
  installed_package_version "$1" || true
}

# Install packages (name, name=version, or a local file) through apt or dnf, with lock waiting and retries.
install_packages() {
  refuse_when_baked "packages $*"
  wait_for_package_locks
  install_with_package_manager "$@"
}

# Install only the packages of the list that are missing.
ensure_packages() {
  local name
  local -a missing=()
  for name in "$@"; do
    package_installed "$name" || missing+=("$name")
  done
  if ((${#missing[@]} > 0)); then
    log "installing ${missing[*]}"
    install_packages "${missing[@]}"
  else
    skip "already installed: $*"
  fi
}

# Hold every package whose name matches a glob of $2 (space-separated) at version $3 (apt: a glob such as
# 570.172.08-*), in preferences file kiln-$1, so dependencies resolve to the pinned release too. apt only:
# dnf takes name-version for each package.
pin_apt_versions() {
  write_file "$(root_path "/etc/apt/preferences.d/kiln-$1")" <<PIN
Package: $2
Pin: version $3
Pin-Priority: 1001
PIN
}

# Add vendor package repository $1 (KILN_REPO_<NAME>_* in bundle.env) to apt or dnf. Its signing key is
# downloaded and accepted only when it carries the fingerprint kiln pins; then only that key is installed,
# so the package manager checks every package of the repository against it.
add_signed_repository() {
  local name="$1" key_url fingerprint home found
  key_url="$(bundle_value REPO "$name" KEY_URL)"
  fingerprint="$(bundle_value REPO "$name" FINGERPRINT)"
  [[ -n "$key_url" && -n "$fingerprint" ]] || die "repository ${name} is not part of this bundle (no key URL for it in bundle.env)"
  # Under /run: one boot adds each repository once, however many steps use it.
  if [[ -f "$(root_path "/run/kiln/repository-${name}")" ]]; then
    return 0
  fi
  refuse_when_baked "repository ${name}"
  command -v gpg >/dev/null || die "gpg is needed to check the ${name} repository key and is not installed"
  home="$(mktemp -d)"
  log "fetching the ${name} repository key from ${key_url}"
  if ! retry "$KILN_RETRY_ATTEMPTS" download "$key_url" "${home}/key"; then
    rm -rf "$home"
    die "download of the ${name} repository key failed: ${key_url}"
  fi
  if ! gpg --batch --quiet --homedir "$home" --import "${home}/key" >>"$KILN_LOG" 2>&1; then
    rm -rf "$home"
    die "repository ${name}: ${key_url} is not an OpenPGP key; refusing the repository"
  fi
  found="$(primary_fingerprints "$home")"
  if ! grep -qxF "$fingerprint" <<<"$found"; then
    rm -rf "$home"
    die "repository ${name}: the key at ${key_url} has fingerprint ${found//$'\n'/ } but kiln pins ${fingerprint}; refusing the repository"
  fi
  log "repository ${name}: key fingerprint ${fingerprint} matches the pin"
  write_repository "$name" "$home" "$fingerprint"
  rm -rf "$home"
  refresh_package_index
  mkdir -p "$(root_path /run/kiln)"
  touch "$(root_path "/run/kiln/repository-${name}")"
}
