# shellcheck shell=bash
# Check-then-act file helpers: directories, lines and whole files written only when they differ, placeholders,
# the version each install step recorded, and vendors' version files. Sourced by lib.sh, never run.

# Create directory $1 (a path under KILN_ROOT already) with mode $2 if it is missing.
ensure_dir() {
  if [[ ! -d "$1" ]]; then
    mkdir -p "$1"
    chmod "${2:-0755}" "$1"
  fi
}

# Where units that run a step at every boot run the bundle from: a root-owned copy in kiln's own directory, whatever
# place the platform unpacked the bundle in (HyperPod documents no place for its lifecycle scripts, and a directory
# under /tmp is emptied at boot and open to other users before it is).
KILN_BOOT_BUNDLE=/opt/kiln/boot-bundle

# Keep the bundle at KILN_BOOT_BUNDLE: copied whole (it is small), owned by root and writable by root alone, renamed
# into place, and copied again only when it differs from the running bundle.
keep_boot_bundle() {
  local target staging
  target="$(root_path "$KILN_BOOT_BUNDLE")"
  if [[ "$KILN_BUNDLE_DIR" -ef "$target" ]] || diff -r -q "$KILN_BUNDLE_DIR" "$target" >/dev/null 2>&1; then
    return 0
  fi
  ensure_dir "${target%/*}" 0755
  staging="${target}.kiln-new"
  rm -rf "$staging"
  cp -a "$KILN_BUNDLE_DIR" "$staging"
  chown -R 0:0 "$staging"
  chmod -R go-w "$staging"
  rm -rf "$target"
  mv "$staging" "$target"
  log "bundle for the boot units kept at ${KILN_BOOT_BUNDLE}"
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
