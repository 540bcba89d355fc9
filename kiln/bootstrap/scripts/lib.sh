# shellcheck shell=bash
# Shared helpers of kiln's node bootstrap: logging, timing, retries, package locks,
# check-then-act helpers, OS detection and the failure trap. Sourced, never run.
#
# Every path goes through root_path, so KILN_ROOT (default /) moves the whole
# bootstrap under a private prefix: the local cluster and the test harness use that.
# Every command is looked up in PATH; KILN_BIN_DIR, when set, goes first. KILN_OS_RELEASE names
# the os-release of the system that packages go to (default: the one under KILN_ROOT).

KILN_ROOT="${KILN_ROOT:-/}"
KILN_RETRY_ATTEMPTS="${KILN_RETRY_ATTEMPTS:-5}"
KILN_RETRY_DELAY_SECONDS="${KILN_RETRY_DELAY_SECONDS:-5}"
KILN_RETRY_MAX_DELAY_SECONDS="${KILN_RETRY_MAX_DELAY_SECONDS:-60}"
KILN_LOCK_TIMEOUT_SECONDS="${KILN_LOCK_TIMEOUT_SECONDS:-600}"
KILN_LOCK_POLL_SECONDS="${KILN_LOCK_POLL_SECONDS:-5}"
# How long a HyperPod controller waits for the slurm.conf its platform's agent writes.
KILN_SLURM_CONF_TIMEOUT_SECONDS="${KILN_SLURM_CONF_TIMEOUT_SECONDS:-600}"
# How long a node waits for its image to mount local NVMe (HyperPod's dlami-nvme service).
KILN_PLATFORM_SCRATCH_TIMEOUT_SECONDS="${KILN_PLATFORM_SCRATCH_TIMEOUT_SECONDS:-300}"
# Where sources are built, under the node's root; each build removes its own directory when it is done.
KILN_BUILD_DIR="${KILN_BUILD_DIR:-/var/cache/kiln/build}"
KILN_STEP=""
KILN_CHANGED=0
# What to do when a baked image lacks something or holds another version of it.
KILN_REBUILD_IMAGE="rebuild the image: kiln ami build --spec SPEC"
if [[ -n "${KILN_BIN_DIR:-}" ]]; then
  PATH="${KILN_BIN_DIR}:${PATH}"
fi

# Print the path of absolute path $1 under KILN_ROOT.
root_path() {
  printf '%s%s\n' "${KILN_ROOT%/}" "$1"
}

KILN_LOG="${KILN_LOG:-$(root_path /var/log/kiln/bootstrap.log)}"
KILN_STATE_DIR="$(root_path /var/lib/kiln)"
KILN_CACHE_DIR="$(root_path /var/cache/kiln/downloads)"

# Open the log and keep a handle on the console, so step output can go to the log only.
kiln_init_logging() {
  mkdir -p "${KILN_LOG%/*}"
  touch "$KILN_LOG"
  chmod 0640 "$KILN_LOG"
  exec {KILN_CONSOLE_FD}>&2
}

# Log a timestamped line to the console and to the log file.
log() {
  local stamp line
  stamp="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  line="${stamp} [${KILN_STEP:-kiln}] $*"
  printf '%s\n' "$line" >>"$KILN_LOG"
  printf '%s\n' "$line" >&"${KILN_CONSOLE_FD:-2}"
}

# Log why the current step has nothing to do.
skip() {
  log "skip: $*"
}

# Log an error and end the bootstrap; the exit trap names the step and the log.
die() {
  log "error: $*"
  exit 1
}

# Record where a command failed, for the exit trap.
kiln_on_error() {
  KILN_FAILED_LINE="$1"
  KILN_FAILED_COMMAND="$2"
}

# On a failed exit, say which step failed, with which code, and where the log is.
kiln_on_exit() {
  local status=$?
  if ((status != 0)); then
    local where="${KILN_STEP:-bootstrap}"
    local message="FAILED: step ${where} exited with code ${status}"
    if [[ -n "${KILN_FAILED_COMMAND:-}" ]]; then
      message+=" at line ${KILN_FAILED_LINE:-?} (${KILN_FAILED_COMMAND})"
    fi
    message+="; full log: ${KILN_LOG}"
    printf '%s\n' "$message" >>"$KILN_LOG" 2>/dev/null || true
    printf '%s\n' "$message" >&"${KILN_CONSOLE_FD:-2}"
  fi
  return "$status"
}

kiln_install_traps() {
  set -E
  trap 'kiln_on_error "$LINENO" "$BASH_COMMAND"' ERR
  trap kiln_on_exit EXIT
}

# Run step function $1 with its output in the log, timing it; an install step then records its marker. With more
# arguments, run that command as step $1 instead (the log and the exit trap name it the same way). A user step
# (user_NAME) runs the user's script through run_user_step, which records its own marker.
run_step() {
  local name="$1" started
  shift
  KILN_STEP="$name"
  started="$SECONDS"
  log "start"
  if (($# > 0)); then
    "$@" >>"$KILN_LOG" 2>&1
  elif [[ "$name" == user_* ]]; then
    run_user_step "$name" >>"$KILN_LOG" 2>&1
  else
    "$name" >>"$KILN_LOG" 2>&1
    if is_install_step "$name"; then
      record_image_step "$name" >>"$KILN_LOG" 2>&1
    fi
  fi
  log "done in $((SECONDS - started))s"
  KILN_STEP=""
}

# Run a command up to $1 times, backing off exponentially; return its last status.
retry() {
  local attempts="$1" attempt=1 delay="$KILN_RETRY_DELAY_SECONDS" status
  shift
  while true; do
    "$@" && return 0
    status=$?
    if ((attempt >= attempts)); then
      log "gave up after ${attempts} attempts (exit ${status}): $*"
      return "$status"
    fi
    log "attempt ${attempt}/${attempts} failed (exit ${status}), retrying in ${delay}s: $*"
    sleep "$delay"
    attempt=$((attempt + 1))
    delay=$((delay * 2))
    if ((delay > KILN_RETRY_MAX_DELAY_SECONDS)); then
      delay="$KILN_RETRY_MAX_DELAY_SECONDS"
    fi
  done
}

# Set KILN_OS (ubuntu2204|ubuntu2404|al2023|debian12) and KILN_PKG (apt|dnf) from os-release.
detect_os() {
  local file key value id="" version=""
  file="${KILN_OS_RELEASE:-$(root_path /etc/os-release)}"
  [[ -r "$file" ]] || die "cannot read ${file}: unknown operating system"
  while IFS='=' read -r key value; do
    value="${value%\"}"
    value="${value#\"}"
    case "$key" in
      ID) id="$value" ;;
      VERSION_ID) version="$value" ;;
    esac
  done <"$file"
  case "${id}:${version}" in
    ubuntu:22.04) KILN_OS=ubuntu2204 KILN_PKG=apt ;;
    ubuntu:24.04) KILN_OS=ubuntu2404 KILN_PKG=apt ;;
    amzn:2023) KILN_OS=al2023 KILN_PKG=dnf ;;
    debian:12) KILN_OS=debian12 KILN_PKG=apt ;;
    *) die "unsupported operating system ${id} ${version}: kiln supports Ubuntu 22.04/24.04, Amazon Linux 2023, Debian 12" ;;
  esac
  export KILN_OS KILN_PKG
}

# True while another process holds the apt/dpkg or dnf/rpm locks (cloud-init, unattended-upgrades).
package_manager_busy() {
  local lock
  local -a locks
  if [[ "$KILN_PKG" == apt ]]; then
    locks=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock)
  else
    locks=(/var/lib/rpm/.rpm.lock /var/cache/dnf/metadata_lock.pid /var/lib/dnf/rpmdb_lock.pid)
  fi
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
  if [[ "$KILN_PKG" == apt ]]; then
    have="$(dpkg-query -W -f='${Status} ${Version}' "$name" 2>/dev/null)" || return 1
    [[ "$have" == "install ok installed "* ]] || return 1
    have="${have#install ok installed }"
  else
    have="$(rpm -q --qf '%{VERSION}-%{RELEASE}' "$name" 2>/dev/null)" || return 1
  fi
  if [[ "$want" == *"*" ]]; then
    [[ "$have" == "${want%"*"}"* ]]
  else
    [[ -z "$want" || "$have" == "$want" || "$have" == "$want"-* ]]
  fi
}

apt_get() {
  DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout="$KILN_LOCK_TIMEOUT_SECONDS" \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}

# Print the installed version of package $1, or nothing when it is not installed.
package_version() {
  local have
  if [[ "$KILN_PKG" == apt ]]; then
    have="$(dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null)" || return 0
    [[ "$have" == "install ok installed "* ]] && printf '%s\n' "${have#install ok installed }"
  else
    rpm -q --qf '%{VERSION}-%{RELEASE}' "$1" 2>/dev/null || true
  fi
  return 0
}

# True when version $1 is $2 or newer (dotted versions, compared numerically part by part).
version_at_least() {
  [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" == "$2" ]]
}

# Adopt component $1 ("NVIDIA driver") from the image, which ships it per kiln's platform data: $2 is the node's
# copy (a version, "present", or nothing when it has none) and $3 what the data records (KILN_IMAGE_<COMPONENT>: a
# version, "branch:VERSION", or "present"). A missing or older copy ends the bootstrap: kiln never installs a
# second copy of what the image owns at boot.
adopt_component() {
  local what="$1" have="$2" recorded="$3" floor
  if [[ -z "$have" ]]; then
    die "${what}: the ${KILN_IMAGE_TITLE} ships it (kiln's platform data), but this node has none; boot that image, or bake ${what} into your own (compute.image.bake)"
  fi
  case "$recorded" in
    present) ;;
    branch:*)
      floor="${recorded#branch:}"
      if ! version_at_least "${have%%.*}" "${floor%%.*}"; then
        die "${what} ${have}: older than the ${floor%%.*} branch the ${KILN_IMAGE_TITLE} ships (${floor}); kiln does not replace the image's ${what} at boot"
      fi ;;
    *)
      if ! version_at_least "$have" "$recorded"; then
        die "${what} ${have}: older than the ${recorded} the ${KILN_IMAGE_TITLE} ships; kiln does not replace the image's ${what} at boot"
      fi ;;
  esac
  skip "${what} ${have}: adopted from the ${KILN_IMAGE_TITLE} (kiln installs none)"
}

# Let install step of component $1 ($2 in words) put version $4 on a node that has $3 (nothing: none) only where
# nothing is there, it is the same version, or a bake replaces it (software.replace): a node keeps what its image
# ships, and a boot never swaps it.
guard_replacement() {
  local component="$1" what="$2" have="$3" want="$4"
  if [[ -z "$have" || "$have" == "$want" ]]; then
    return 0
  fi
  if [[ "${KILN_PHASE:-}" == bake && " ${KILN_REPLACE:-} " == *" ${component} "* ]]; then
    log "replacing the image's ${what} ${have} with ${want} (software.replace names ${component})"
    return 0
  fi
  die "the image has ${what} ${have}: kiln does not install ${want} over it; pin software.${component}: ${have} to adopt it, or replace it in a bake (software.replace: [${component}])"
}

# Install packages (name, name=version, or a local file) through apt or dnf, with lock waiting and retries.
install_packages() {
  refuse_when_baked "packages $*"
  wait_for_package_locks
  if [[ "$KILN_PKG" == apt ]]; then
    # Under /run, so an index fetched when the image was baked is never taken as fresh.
    if [[ ! -f "$(root_path /run/kiln/apt-updated)" ]]; then
      retry "$KILN_RETRY_ATTEMPTS" apt_get update
      mkdir -p "$(root_path /run/kiln)"
      touch "$(root_path /run/kiln/apt-updated)"
    fi
    retry "$KILN_RETRY_ATTEMPTS" apt_get install --no-install-recommends "$@"
  else
    retry "$KILN_RETRY_ATTEMPTS" dnf -y -q install "$@"
  fi
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

# Print the version that step $1 recorded as installed, or nothing.
installed_version() {
  local marker="${KILN_STATE_DIR}/installed/$1"
  if [[ -r "$marker" ]]; then
    cat "$marker"
  fi
}

record_installed() {
  mkdir -p "${KILN_STATE_DIR}/installed"
  printf '%s\n' "$2" >"${KILN_STATE_DIR}/installed/$1"
}

# True when step $1 already installed version $2.
already_installed() {
  local have
  have="$(installed_version "$1")"
  [[ -n "$2" && "$have" == "$2" ]]
}

# Create directory $1 (a path under KILN_ROOT already) with mode $2 if it is missing.
ensure_dir() {
  if [[ ! -d "$1" ]]; then
    mkdir -p "$1"
    chmod "${2:-0755}" "$1"
  fi
}

# Append line $2 to file $1 unless the file already has it.
ensure_line() {
  mkdir -p "${1%/*}"
  touch "$1"
  KILN_CHANGED=0
  if ! grep -qxF -- "$2" "$1"; then
    printf '%s\n' "$2" >>"$1"
    KILN_CHANGED=1
    log "added to ${1}: ${2}"
  fi
}

# Write stdin to file $1 (mode $2) only when the content differs; KILN_CHANGED tells whether it did.
write_file() {
  local target="$1" mode="${2:-0644}" staged
  mkdir -p "${target%/*}"
  staged="${target}.kiln-new"
  cat >"$staged"
  if [[ -f "$target" ]] && cmp -s "$staged" "$target"; then
    rm -f "$staged"
    KILN_CHANGED=0
  else
    chmod "$mode" "$staged"
    mv -f "$staged" "$target"
    # shellcheck disable=SC2034 # read by the steps
    KILN_CHANGED=1
    log "wrote ${target}"
  fi
}

# Install kiln's node wheel from the bundle into kiln's venv (/opt/kiln/venv), creating the venv when missing;
# --no-deps --no-index: no network and no CDK dependency. Sets KILN_VENV to the venv's path.
install_kiln_wheel() {
  local wheel
  wheel="${KILN_BUNDLE_DIR}/launcher/${KILN_LAUNCHER_WHEEL}"
  [[ -r "$wheel" ]] || die "kiln's node wheel ${wheel} is missing from the bundle"
  KILN_VENV="$(root_path /opt/kiln/venv)"
  if [[ ! -x "${KILN_VENV}/bin/python" ]]; then
    if [[ "$KILN_PKG" == apt ]]; then
      ensure_packages python3-venv
    else
      ensure_packages python3
    fi
    "${KILN_PYTHON:-python3}" -m venv "$KILN_VENV"
  fi
  "${KILN_VENV}/bin/python" -m pip install --quiet --no-deps --no-index --force-reinstall "$wheel"
}

# True when the bundle asks for exporter $1 (install_exporters and configure_exporters share it).
exporter_wanted() {
  [[ " ${KILN_EXPORTERS:-} " == *" $1 "* ]]
}

# True when the image was baked: install steps ran at image build, configure must not download.
is_baked() {
  [[ "${KILN_BAKED:-0}" == 1 || -f "$(root_path /etc/kiln/baked)" ]]
}

# End the bootstrap when a baked image, outside its own bake, is asked to fetch $1: such a node downloads
# nothing, so what it lacks belongs in the image.
refuse_when_baked() {
  if is_baked && [[ "${KILN_PHASE:-}" != bake ]]; then
    die "$1: this image is baked, so the bootstrap downloads nothing; ${KILN_REBUILD_IMAGE}"
  fi
}

sha256_matches() {
  local got _
  read -r got _ < <(sha256sum "$1")
  [[ "$got" == "$2" ]]
}

# True when file $1 has npm integrity $2 (sha512-BASE64: the base64 of the file's raw sha512, as the npm registry
# publishes it in dist.integrity): the base64 is decoded to hex and held against sha512sum's.
integrity_matches() {
  local want got _
  [[ "$2" == sha512-* ]] || return 1
  want="$(printf '%s' "${2#sha512-}" | base64 -d 2>/dev/null | od -An -v -tx1 | tr -d ' \n')"
  ((${#want} == 128)) || return 1
  read -r got _ < <(sha512sum "$1")
  [[ "$got" == "$want" ]]
}

# True when file $1 matches the digest of its kind: npm integrity $2 when set, else sha256 $3.
digest_matches() {
  if [[ -n "$2" ]]; then
    integrity_matches "$1" "$2"
  else
    sha256_matches "$1" "$3"
  fi
}

# Download URL $1 to file $2.
download() {
  refuse_when_baked "download of $1"
  curl -fsSL --connect-timeout 10 --max-time 1800 -o "$2" "$1"
}

# Check that file $1 carries its publisher's detached signature $2 by the key at URL $3 whose primary fingerprint is
# $4 (kiln's pin): the key is accepted only with that fingerprint, and the signature only when gpg reports it valid
# for that primary key.
signature_matches() {
  local file="$1" signature="$2" key_url="$3" fingerprint="$4" home status
  command -v gpg >/dev/null || die "gpg is needed to check ${file##*/}'s signature and is not installed"
  home="$(mktemp -d)"
  if ! retry "$KILN_RETRY_ATTEMPTS" download "$key_url" "${home}/key" ||
    ! gpg --batch --quiet --homedir "$home" --import "${home}/key" >>"$KILN_LOG" 2>&1; then
    rm -rf "$home"
    log "the signing key at ${key_url} could not be fetched or read"
    return 1
  fi
  if ! primary_fingerprints "$home" | grep -qxF "$fingerprint"; then
    rm -rf "$home"
    log "the key at ${key_url} is not the one kiln pins (${fingerprint})"
    return 1
  fi
  # VALIDSIG's last field is the signing key's primary fingerprint (gpg's DETAILS).
  status="$(gpg --batch --homedir "$home" --status-fd 1 --verify "$signature" "$file" 2>>"$KILN_LOG" |
    awk '$1 == "[GNUPG:]" && $2 == "VALIDSIG" { print $NF }')"
  rm -rf "$home"
  [[ "$status" == "$fingerprint" ]]
}

# Print bundle.env's value FIELD $3 of the artifact or repository $2 (KIND $1: ARTIFACT or REPO): the variable
# KILN_<KIND>_<NAME>_<FIELD>, '' where unset.
bundle_value() {
  local var="KILN_${1}_${2^^}_${3}"
  var="${var//-/_}"
  printf '%s' "${!var:-}"
}

# Check out git artifact $1 at the commit bundle.env pins for it, with the submodules its build needs, into a fresh
# build directory, and set KILN_FETCHED to it. Any other commit is refused: its id names every file of the tree and
# the commit of every submodule, so nothing else needs a digest.
fetch_source() {
  local name="$1" url commit version submodules dest head submodule
  url="$(bundle_value ARTIFACT "$name" URL)"
  commit="$(bundle_value ARTIFACT "$name" COMMIT)"
  version="$(bundle_value ARTIFACT "$name" VERSION)"
  submodules="$(bundle_value ARTIFACT "$name" SUBMODULES)"
  [[ -n "$url" ]] || die "source ${name} is not part of this bundle (no URL for it in bundle.env)"
  [[ -n "$commit" ]] || die "source ${name} ${version} (${url}) has no pinned commit; refusing to build it unverified"
  refuse_when_baked "source ${name} ${version}"
  ensure_packages git
  dest="$(root_path "${KILN_BUILD_DIR}")/${name}-${version}"
  rm -rf "$dest"
  mkdir -p "$dest"
  log "fetching ${name} ${version} at commit ${commit} from ${url}"
  git -C "$dest" init -q
  retry "$KILN_RETRY_ATTEMPTS" git -C "$dest" fetch -q --depth 1 "$url" "$commit" || die "fetch of ${name} ${commit} failed: ${url}"
  git -C "$dest" checkout -q --detach FETCH_HEAD
  head="$(git -C "$dest" rev-parse HEAD)"
  if [[ "$head" != "$commit" ]]; then
    rm -rf "$dest"
    die "source ${name} ${version}: got commit ${head}, expected ${commit}; refusing to build ${url}"
  fi
  for submodule in $submodules; do
    # At the commit the verified tree records for it.
    retry "$KILN_RETRY_ATTEMPTS" git -C "$dest" submodule update -q --init --depth 1 -- "$submodule" ||
      die "fetch of ${name}'s submodule ${submodule} failed"
  done
  # shellcheck disable=SC2034 # read by the steps
  KILN_FETCHED="$dest"
}

# Download artifact $1 (pinned in bundle.env) into the cache, verified by its sha256 or, for an npm tarball, its
# integrity; sets KILN_FETCHED to its path.
fetch_artifact() {
  local name="$1" url sha version dest key_url fingerprint url_var integrity digest kind
  url_var="KILN_ARTIFACT_${name^^}_URL"
  url_var="${url_var//-/_}"
  url="$(bundle_value ARTIFACT "$name" URL)"
  sha="$(bundle_value ARTIFACT "$name" SHA256)"
  version="$(bundle_value ARTIFACT "$name" VERSION)"
  key_url="$(bundle_value ARTIFACT "$name" SIGNATURE_KEY_URL)"
  fingerprint="$(bundle_value ARTIFACT "$name" SIGNATURE_FINGERPRINT)"
  integrity="$(bundle_value ARTIFACT "$name" INTEGRITY)"
  [[ -n "$url" ]] || die "artifact ${name} is not part of this bundle (no ${url_var})"
  if [[ -n "$fingerprint" ]]; then
    fetch_signed_artifact "$name" "$version" "$url" "$key_url" "$fingerprint"
    return 0
  fi
  if [[ -z "$sha" && -z "$integrity" ]]; then
    die "artifact ${name} ${version} (${url}) has no sha256: lock it with \`kiln bootstrap lock --spec SPEC\` and deploy again; refusing to download it unverified"
  fi
  refuse_when_baked "artifact ${name} ${version}"
  # One directory per artifact keeps the upstream file name, which dpkg and rpm users expect.
  ensure_dir "$KILN_CACHE_DIR" 0700
  ensure_dir "${KILN_CACHE_DIR}/${name}-${version}" 0700
  dest="${KILN_CACHE_DIR}/${name}-${version}/${url##*/}"
  digest="${integrity:-$sha}" kind=sha256
  if [[ -n "$integrity" ]]; then
    kind="npm integrity"
  fi
  if [[ -f "$dest" ]] && digest_matches "$dest" "$integrity" "$sha"; then
    log "using cached ${name} ${version}"
  else
    log "downloading ${name} ${version} from ${url}"
    rm -f "${dest}.part"
    retry "$KILN_RETRY_ATTEMPTS" download "$url" "${dest}.part" || die "download of ${name} failed: ${url}"
    if ! digest_matches "${dest}.part" "$integrity" "$sha"; then
      rm -f "${dest}.part"
      die "artifact ${name} ${version}: ${kind} mismatch (expected ${digest}); refusing to use ${url}"
    fi
    mv -f "${dest}.part" "$dest"
  fi
  # shellcheck disable=SC2034 # read by the steps
  KILN_FETCHED="$dest"
}

# Download signed artifact $1 at version $2 from URL $3 with its signature ($3.sig), checked by the key at $4 with
# primary fingerprint $5; sets KILN_FETCHED to its path. A cached copy is checked again.
fetch_signed_artifact() {
  local name="$1" version="$2" url="$3" key_url="$4" fingerprint="$5" dest
  refuse_when_baked "artifact ${name} ${version}"
  ensure_dir "$KILN_CACHE_DIR" 0700
  ensure_dir "${KILN_CACHE_DIR}/${name}-${version}" 0700
  dest="${KILN_CACHE_DIR}/${name}-${version}/${url##*/}"
  if [[ ! -f "$dest" || ! -f "${dest}.sig" ]]; then
    log "downloading ${name} ${version} from ${url} and its signature"
    rm -f "${dest}.part" "${dest}.sig"
    retry "$KILN_RETRY_ATTEMPTS" download "$url" "${dest}.part" || die "download of ${name} failed: ${url}"
    retry "$KILN_RETRY_ATTEMPTS" download "${url}.sig" "${dest}.sig" || die "download of ${name}'s signature failed: ${url}.sig"
    mv -f "${dest}.part" "$dest"
  fi
  if ! signature_matches "$dest" "${dest}.sig" "$key_url" "$fingerprint"; then
    rm -f "$dest" "${dest}.sig"
    die "artifact ${name} ${version}: no valid signature by the key kiln pins (${fingerprint}); refusing to use ${url}"
  fi
  log "${name} ${version}: signature by ${fingerprint} verified"
  # shellcheck disable=SC2034 # read by the steps
  KILN_FETCHED="$dest"
}

# Print the fingerprint of every primary key in GnuPG home $1, one a line.
primary_fingerprints() {
  gpg --batch --homedir "$1" --with-colons --list-keys 2>/dev/null |
    awk -F: '$1 == "pub" { primary = 1; next } $1 == "fpr" && primary { print $10; primary = 0 }'
}

# Add vendor package repository $1 (KILN_REPO_<NAME>_* in bundle.env) to apt or dnf. Its signing key is
# downloaded and accepted only when it carries the fingerprint kiln pins; then only that key is installed,
# so the package manager checks every package of the repository against it.
add_signed_repository() {
  local name="$1" key_url fingerprint apt_source baseurl home found keyring
  key_url="$(bundle_value REPO "$name" KEY_URL)"
  fingerprint="$(bundle_value REPO "$name" FINGERPRINT)"
  apt_source="$(bundle_value REPO "$name" APT_SOURCE)"
  baseurl="$(bundle_value REPO "$name" BASEURL)"
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
  if [[ "$KILN_PKG" == apt ]]; then
    keyring="/etc/apt/keyrings/kiln-${name}.gpg"
    gpg --batch --homedir "$home" --export "$fingerprint" | write_file "$(root_path "$keyring")"
    write_file "$(root_path "/etc/apt/sources.list.d/kiln-${name}.list")" <<<"deb [signed-by=${keyring}] ${apt_source}"
  else
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
  fi
  rm -rf "$home"
  refresh_package_index
  mkdir -p "$(root_path /run/kiln)"
  touch "$(root_path "/run/kiln/repository-${name}")"
}

# Install the headers and tools that DKMS kernel modules (NVIDIA, Neuron) build with.
install_kernel_build_packages() {
  local kernel
  kernel="$(uname -r)"
  if [[ "$KILN_PKG" == apt ]]; then
    ensure_packages "linux-headers-${kernel}" dkms gcc make
  else
    ensure_packages "kernel-devel-${kernel}" "kernel-headers-${kernel}" dkms gcc make
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

# Print the package manager's spelling of package $1 at version $2: name=version (apt), name-version (dnf).
pinned_package() {
  if [[ "$KILN_PKG" == apt ]]; then
    printf '%s=%s\n' "$1" "$2"
  else
    printf '%s-%s\n' "$1" "$2"
  fi
}

# Print the value of an IMDSv2 metadata path (token first; IMDSv1 is never used).
imds() {
  local token
  token="$(curl -fsS -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' \
    --connect-timeout 2 http://169.254.169.254/latest/api/token)"
  curl -fsS -H "X-aws-ec2-metadata-token: ${token}" --connect-timeout 2 \
    "http://169.254.169.254/latest/meta-data/$1"
}

# True when systemd unit $1 is running.
service_active() {
  systemctl is-active --quiet "$1" 2>/dev/null
}

# Restart unit $1 if it runs, so it picks up new configuration.
restart_if_active() {
  if service_active "$1"; then
    log "restarting $1"
    systemctl restart "$1"
  fi
}

# Forget that the package index is fresh, after adding a repository.
refresh_package_index() {
  rm -f "$(root_path /run/kiln/apt-updated)"
  if [[ "$KILN_PKG" == dnf ]]; then
    retry "$KILN_RETRY_ATTEMPTS" dnf -y -q makecache
  fi
}

# Print the Ubuntu release codename that apt repositories use.
os_codename() {
  case "$KILN_OS" in
    ubuntu2204) printf 'jammy\n' ;;
    ubuntu2404) printf 'noble\n' ;;
    debian12) printf 'bookworm\n' ;;
    *) die "no apt codename for ${KILN_OS}" ;;
  esac
}

# Split line $2 of a KILN_NAME='value' file ($1 says where: FILE:NUMBER) into KILN_ENV_KEY and KILN_ENV_VALUE,
# outer quotes off; false for a blank or comment line, the end of the bootstrap for any other shape.
parse_env_line() {
  local where="$1" line="$2"
  if [[ -z "$line" || "$line" == \#* ]]; then
    return 1
  fi
  if [[ ! "$line" =~ ^(KILN_[A-Z0-9_]+)=(.*)$ ]]; then
    die "${where}: expected KILN_NAME='value', got: ${line}"
  fi
  KILN_ENV_KEY="${BASH_REMATCH[1]}"
  KILN_ENV_VALUE="${BASH_REMATCH[2]}"
  if [[ "$KILN_ENV_VALUE" == \'*\' && ${#KILN_ENV_VALUE} -ge 2 ]]; then
    KILN_ENV_VALUE="${KILN_ENV_VALUE:1:${#KILN_ENV_VALUE}-2}"
  fi
}

# Export the KILN_NAME='value' lines of file $1; nothing in the file is executed.
load_env_file() {
  local file="$1" line number=0
  [[ -r "$file" ]] || die "cannot read ${file}"
  while IFS= read -r line || [[ -n "$line" ]]; do
    number=$((number + 1))
    if parse_env_line "${file}:${number}" "$line"; then
      export "${KILN_ENV_KEY}=${KILN_ENV_VALUE}"
    fi
  done <"$file"
}

# Print the value that KILN_NAME='value' file $1 gives variable $2; false when it gives none. Sets nothing else.
env_file_value() {
  local file="$1" name="$2" line number=0
  while IFS= read -r line || [[ -n "$line" ]]; do
    number=$((number + 1))
    if parse_env_line "${file}:${number}" "$line" && [[ "$KILN_ENV_KEY" == "$name" ]]; then
      printf '%s\n' "$KILN_ENV_VALUE"
      return 0
    fi
  done <"$file"
  return 1
}

# Print the value of NAME=value (or NAME="value") in a vendor's version file $1 for name $2, or nothing; no line of
# the file is executed.
version_file_value() {
  local file="$1" name="$2" line value
  [[ -r "$file" ]] || return 0
  while IFS= read -r line || [[ -n "$line" ]]; do
    if [[ "$line" == "${name}="* ]]; then
      value="${line#*=}"
      value="${value%\"}" && value="${value#\"}"
      value="${value%\'}" && value="${value#\'}"
      printf '%s\n' "$value"
      return 0
    fi
  done <"$file"
}

# Print VERSION-RELEASE from a vendor's version file $1 (keys $2 and $3), or nothing when it has no version.
version_file_release() {
  local version release
  version="$(version_file_value "$1" "$2")"
  release="$(version_file_value "$1" "$3")"
  if [[ -n "$version" ]]; then
    printf '%s\n' "${version}${release:+-${release}}"
  fi
}

# Put component $1 ($2 in words) on the node from a vendor installer that must be on the image before the node
# joins its cluster: adopt the image's copy when KILN_IMAGE_<COMPONENT> ($3) says it ships one; else, in a bake
# only, unpack artifact $5 at version $4, run its DIRECTORY/installer.sh -y ($6) and check the version the
# installer records in file $7 (keys $8 and $9).
install_with_vendor_installer() {
  local component="$1" what="$2" image="$3" want="$4" artifact="$5" directory="$6" file have work
  file="$(root_path "$7")"
  have="$(version_file_release "$file" "$8" "$9")"
  if [[ -n "$image" ]]; then
    adopt_component "$what" "$have" "$image"
    return 0
  fi
  [[ -n "$want" ]] || die "software.${component} is not pinned and the ${KILN_IMAGE_TITLE} has no ${what}"
  if [[ "$have" == "$want" ]]; then
    skip "${what} ${want} is installed"
    return 0
  fi
  guard_replacement "$component" "$what" "$have" "$want"
  if [[ "${KILN_PHASE:-}" != bake ]]; then
    # A node joins its cluster before its user data runs: what it joins with must already be on the image.
    die "${what} must be on the image before the node registers: bake it (compute.image.bake)"
  fi
  fetch_artifact "$artifact"
  work="$(root_path "/var/cache/kiln/build/${artifact}")"
  rm -rf "$work"
  mkdir -p "$work"
  tar -xzf "$KILN_FETCHED" -C "$work"
  wait_for_package_locks
  (cd "${work}/${directory}" && ./installer.sh -y)
  rm -rf "$work"
  have="$(version_file_release "$file" "$8" "$9")"
  [[ "$have" == "$want" ]] || die "${what} installer ${want} left version '${have}' in ${7}"
  record_installed "$artifact" "$want"
}

# Replace the @KILN_...@ placeholders of stdin with deploy-time values; unknown ones are an error.
fill_placeholders() {
  local line name
  while IFS= read -r line || [[ -n "$line" ]]; do
    while [[ "$line" =~ @(KILN_[A-Z0-9_]+)@ ]]; do
      name="${BASH_REMATCH[1]}"
      if [[ "$name" == KILN_ROOT ]]; then
        line="${line//@KILN_ROOT@/${KILN_ROOT%/}}"
        continue
      fi
      [[ -n "${!name:-}" ]] || die "placeholder @${name}@ has no value (set ${name} in cluster.env)"
      line="${line//@${name}@/${!name}}"
    done
    printf '%s\n' "$line"
  done
}

# The image manifest: each install step that ran leaves a marker, /etc/kiln/image/STEP.env, holding the values of
# its pins (the bundle.env variables KILN_PINS_<STEP> names) it installed with. A baked image's boot checks them
# against its own bundle, and kiln-launch check compares them with /etc/kiln/bundle-pins.env.

# True when $1 is an install step of this bundle.
is_install_step() {
  [[ " ${KILN_INSTALL_STEPS} " == *" $1 "* ]]
}

# Print the bundle.env variable that lists install step $1's pins: KILN_PINS_<STEP>.
pins_variable() {
  printf 'KILN_PINS_%s\n' "${1^^}"
}

# Print the pins of install step $1, space-separated.
step_pins() {
  local variable
  variable="$(pins_variable "$1")"
  printf '%s\n' "${!variable-}"
}

# Print the path of install step $1's marker.
image_marker() {
  printf '%s/%s.env\n' "$(root_path /etc/kiln/image)" "$1"
}

# Print VARIABLE='value' for each variable named in $@, with its value in this bundle.
pinned_values() {
  local variable
  for variable in "$@"; do
    printf "%s='%s'\n" "$variable" "${!variable-}"
  done
}

# Write install step $1's marker: it ran, with these values of its pins. A step that skipped gets one too.
record_image_step() {
  local -a pins
  read -ra pins <<<"$(step_pins "$1")"
  pinned_values "${pins[@]}" | write_file "$(image_marker "$1")" 0644
}

# Check that the image holds install step $1 as this bundle installs it: its marker exists and records this
# bundle's value of every pin, on an image baked (if sealed) for this target.
verify_image_step() {
  local step="$1" marker variable have baked_for
  local -a pins
  if [[ -f "$(root_path /etc/kiln/baked)" ]]; then
    baked_for="$(<"$(root_path /etc/kiln/baked)")"
    if [[ "$baked_for" != "$KILN_TARGET" ]]; then
      die "this image was baked for target ${baked_for}, but this bundle is for ${KILN_TARGET}; ${KILN_REBUILD_IMAGE}"
    fi
  fi
  marker="$(image_marker "$step")"
  [[ -f "$marker" ]] || die "the image has no marker ${marker}: install step ${step} did not run when it was baked; ${KILN_REBUILD_IMAGE}"
  read -ra pins <<<"$(step_pins "$step")"
  for variable in "${pins[@]}"; do
    have="$(env_file_value "$marker" "$variable")" ||
      die "${marker} records no ${variable}: the image was baked from another bundle; ${KILN_REBUILD_IMAGE}"
    if [[ "$have" != "${!variable-}" ]]; then
      die "${variable}: the image has '${have}', this bundle wants '${!variable-}' (install step ${step}); ${KILN_REBUILD_IMAGE}"
    fi
  done
  log "the image matches this bundle: ${pins[*]:-no pins}"
}

# Write what this bundle wants of the image, for kiln-launch check: its install steps, their pins and values. A user
# step for other roles never runs on this node, so the node owes it no marker.
write_bundle_pins() {
  local step variable
  local -a pins steps=()
  local -A seen=()
  for step in $KILN_INSTALL_STEPS; do
    if [[ "$step" != user_* ]] || user_step_here "$step"; then
      steps+=("$step")
    fi
  done
  {
    printf "KILN_INSTALL_STEPS='%s'\n" "${steps[*]}"
    for step in "${steps[@]}"; do
      pinned_values "$(pins_variable "$step")"
      read -ra pins <<<"$(step_pins "$step")"
      for variable in "${pins[@]}"; do
        if [[ -z "${seen[$variable]:-}" ]]; then
          seen[$variable]=1
          pinned_values "$variable"
        fi
      done
    done
  } | write_file "$(root_path /etc/kiln/bundle-pins.env)" 0644
}

# Mark the image baked for this target and drop the downloads cache: the image carries no installer files.
mark_image_baked() {
  write_file "$(root_path /etc/kiln/baked)" 0644 <<<"$KILN_TARGET"
  if [[ -d "$KILN_CACHE_DIR" ]]; then
    rm -rf "$KILN_CACHE_DIR"
    log "removed ${KILN_CACHE_DIR}"
  fi
  log "image sealed for ${KILN_TARGET}: nodes booted from it run configure steps only and download nothing"
}

# Seal a baked image: every install step of this bundle has its marker, matching, then the image is marked baked.
seal_image() {
  local step
  log "sealing the image: checking every install step's marker against this bundle"
  for step in $KILN_INSTALL_STEPS; do
    run_step "$step" verify_image_step "$step"
  done
  run_step seal_image mark_image_baked
}

# The user's own steps (spec bootstrap.steps): step user_NAME runs the bundle's script user-steps/NAME, whose sha256,
# phase and node roles bundle.env records (KILN_USER_STEP_NAME_SHA256, _PHASE, _ROLES). An install step's pin is its
# sha256: its marker records the script it ran, and a baked image whose marker differs is refused.

# True when user step $1 (user_NAME) runs on this node: its roles name the node's role.
user_step_here() {
  local roles
  roles="$(bundle_value USER_STEP "${1#user_}" ROLES)"
  [[ " ${roles} " == *" ${KILN_NODE_ROLE:-} "* ]]
}

# Print node roles $@ as the spec names them (compute for worker), space-separated.
spec_roles() {
  local role
  local -a words=()
  for role in "$@"; do
    if [[ "$role" == worker ]]; then
      words+=(compute)
    else
      words+=("$role")
    fi
  done
  printf '%s\n' "${words[*]}"
}

# Run user step $1 (user_NAME): check the script against its sha256, skip it on a node of another role (an image build
# runs every install step: the image serves every role) and an install step whose marker records this script, else run
# it as root from the node's root directory with stdin closed, its output in the log, and record an install step's
# marker. The script sees the node's environment (bundle.env and cluster.env, exported) and KILN_ROLE (controller, login
# or compute; empty in an image build), KILN_PHASE, KILN_BUNDLE_DIR and KILN_USER_STEP (its name).
run_user_step() {
  local step="$1" name script sha phase roles marker role="" status=0
  name="${step#user_}"
  script="${KILN_BUNDLE_DIR}/user-steps/${name}"
  sha="$(bundle_value USER_STEP "$name" SHA256)"
  phase="$(bundle_value USER_STEP "$name" PHASE)"
  roles="$(bundle_value USER_STEP "$name" ROLES)"
  [[ -n "$sha" && -n "$phase" ]] || die "user step ${name} is not part of this bundle (bundle.env has no KILN_USER_STEP_${name^^}_SHA256)"
  [[ -f "$script" ]] || die "user step ${name}: ${script} is missing from the bundle"
  if ! sha256_matches "$script" "$sha"; then
    die "user step ${name}: ${script} is not the script this bundle was rendered with (bundle.env records sha256 ${sha}); refusing to run it"
  fi
  if [[ "$phase" == install && "${KILN_PHASE:-}" == bake ]]; then
    log "image build: runs for every role of the step (${roles}), as the image serves them all"
  elif ! user_step_here "$step"; then
    # shellcheck disable=SC2086 # one word per role
    skip "user step ${name} runs on $(spec_roles $roles) nodes; this node is $(spec_roles "$KILN_NODE_ROLE")"
    return 0
  else
    role="$(spec_roles "$KILN_NODE_ROLE")"
  fi
  marker="$(image_marker "$step")"
  if [[ "$phase" == install && -f "$marker" ]] &&
    [[ "$(env_file_value "$marker" "KILN_USER_STEP_${name^^}_SHA256" || true)" == "$sha" ]]; then
    skip "user step ${name} already ran with this script (sha256 ${sha}, ${marker})"
    return 0
  fi
  # A zip (an image build's, HyperPod's lifecycle scripts) may drop the executable bit; the digest is of the content.
  [[ -x "$script" ]] || chmod 0755 "$script"
  log "running ${script} (sha256 ${sha}) as $(id -un); its output follows"
  (
    cd "$(root_path /)"
    umask 0022
    export KILN_ROLE="$role" KILN_USER_STEP="$name"
    exec "$script"
  ) </dev/null || status=$?
  if ((status != 0)); then
    die "user step ${name} (bootstrap.steps): ${script##*/} exited with code ${status}; its output is above in ${KILN_LOG}"
  fi
  if [[ "$phase" == install ]]; then
    record_image_step "$step"
  fi
}
