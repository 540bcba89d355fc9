# shellcheck shell=bash source-path=SCRIPTDIR
# The core of kiln's node bootstrap library: its settings, paths under KILN_ROOT, the log, the failure trap,
# the step runner, retries, OS detection and the node's services. Sourced by lib.sh, never run.
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
# shellcheck disable=SC2034 # set by write_file and ensure_line, read by the steps
KILN_CHANGED=0
# What to do when a baked image lacks something or holds another version of it.
# shellcheck disable=SC2034 # read by the other parts
KILN_REBUILD_IMAGE="rebuild the image: kiln ami build --spec SPEC"
if [[ -n "${KILN_BIN_DIR:-}" ]]; then
  PATH="${KILN_BIN_DIR}:${PATH}"
fi

# Print the path of absolute path $1 under KILN_ROOT.
root_path() {
  printf '%s%s\n' "${KILN_ROOT%/}" "$1"
}

KILN_LOG="${KILN_LOG:-$(root_path /var/log/kiln/bootstrap.log)}"
# shellcheck disable=SC2034 # read by the other parts
KILN_STATE_DIR="$(root_path /var/lib/kiln)"
# shellcheck disable=SC2034 # read by the other parts
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

# Set KILN_OS (ubuntu2204|ubuntu2404|al2023|debian12) and KILN_PKG (apt|dnf) from os-release, then load the
# package manager's functions (lib/pkg-$KILN_PKG.sh).
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
  # The package manager's part of the library: pkg-apt.sh and pkg-dnf.sh define the same functions.
  # shellcheck source=pkg-apt.sh disable=SC2153 # KILN_LIB_DIR: lib.sh sets it
  source "${KILN_LIB_DIR}/pkg-${KILN_PKG}.sh"
}

# True when version $1 is $2 or newer (dotted versions, compared numerically part by part).
version_at_least() {
  [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" == "$2" ]]
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

# Enable unit $1: (re)start it when $2 is 1 (a file of it changed), start it when it does not run.
activate_unit() {
  local unit="$1" changed="$2"
  if ((changed == 1)); then
    systemctl daemon-reload
    systemctl enable "$unit"
    systemctl restart "$unit" || die "${unit} did not start: journalctl -u ${unit}"
  elif ! service_active "$unit"; then
    systemctl enable --now "$unit" || die "${unit} did not start: journalctl -u ${unit}"
  fi
}

# Restart unit $1 if it runs, so it picks up new configuration.
restart_if_active() {
  if service_active "$1"; then
    log "restarting $1"
    systemctl restart "$1"
  fi
}
