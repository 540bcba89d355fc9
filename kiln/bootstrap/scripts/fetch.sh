#!/usr/bin/env bash
# First thing a cloud node runs: write cluster.env, fetch kiln's bootstrap bundle from S3, run it.
# Usage: fetch.sh BUNDLE_S3_URL ENTRY_POINT [--role ROLE] [KILN_NAME=VALUE ...]
#    or: fetch.sh --manifest FILE [--role ROLE]
# The KILN_NAME=VALUE pairs carry deploy-time values (FSx DNS name, region, ...) that CloudFormation
# fills in; they become /etc/kiln/cluster.env, which the bundle's first step reads and checks.
# A manifest (JSON, what resolve-bootstrap.sh read from the cluster's SSM parameter) carries the same:
# {"bundle": {"url", "entry_point", "sha256"}, "env": {KILN_NAME: VALUE}}. With a sha256 (of the bundle's
# content listing, kiln.bootstrap.fetch.bundle_digest), the zip is checked against it before it is unpacked.
set -euo pipefail

usage() {
  printf 'usage: %s BUNDLE_S3_URL ENTRY_POINT [--role ROLE] [KILN_NAME=VALUE ...]\n' "$0" >&2
  printf '   or: %s --manifest FILE [--role ROLE]\n' "$0" >&2
  exit 2
}

bundle_url=""
entry_point=""
digest=""
role=""
pairs=()
if [[ "${1:-}" == --manifest ]]; then
  [[ -r "${2:-}" ]] || usage
  manifest="$2"
  shift 2
  # Each field NUL-terminated: bundle URL, entry point, digest ('' when none), then NAME=VALUE pairs.
  fields=()
  while IFS= read -r -d '' field; do
    fields+=("$field")
  done < <(
    python3 - "$manifest" <<'PY'
import json
import sys

with open(sys.argv[1]) as handle:
    manifest = json.load(handle)
bundle = manifest["bundle"]
fields = [bundle["url"], bundle["entry_point"], bundle.get("sha256", "")]
fields += [f"{name}={value}" for name, value in sorted(manifest.get("env", {}).items())]
sys.stdout.write("".join(f"{field}\0" for field in fields))
PY
  )
  ((${#fields[@]} >= 3)) || {
    printf 'fetch.sh: %s is not a bootstrap manifest\n' "$manifest" >&2
    exit 2
  }
  bundle_url="${fields[0]}"
  entry_point="${fields[1]}"
  digest="${fields[2]}"
  pairs=("${fields[@]:3}")
  for pair in "${pairs[@]}"; do
    [[ "$pair" == KILN_[A-Z_]*=* ]] || usage
  done
  while (($# > 0)); do
    case "$1" in
      --role)
        role="${2:-}"
        [[ -n "$role" ]] || usage
        shift 2
        ;;
      *) usage ;;
    esac
  done
else
  (($# >= 2)) || usage
  bundle_url="$1"
  entry_point="$2"
  shift 2
  while (($# > 0)); do
    case "$1" in
      --role)
        role="${2:-}"
        [[ -n "$role" ]] || usage
        shift 2
        ;;
      KILN_[A-Z_]*=*)
        pairs+=("$1")
        shift
        ;;
      *) usage ;;
    esac
  done
fi
[[ "$bundle_url" == s3://* ]] || {
  printf 'fetch.sh: bundle URL must be s3://bucket/key (got %s)\n' "$bundle_url" >&2
  exit 2
}
[[ -n "$entry_point" && "$entry_point" != /* && "$entry_point" != *..* ]] || {
  printf 'fetch.sh: entry point must be a relative path inside the bundle (got %s)\n' "$entry_point" >&2
  exit 2
}
[[ -z "$digest" || "$digest" =~ ^[0-9a-f]{64}$ ]] || {
  printf 'fetch.sh: sha256 must be 64 lowercase hex digits (got %s)\n' "$digest" >&2
  exit 2
}

root="${KILN_ROOT:-/}"
root="${root%/}"
env_file="${root}/etc/kiln/cluster.env"
bundle_dir="${root}/opt/kiln/bootstrap"
log_file="${root}/var/log/kiln/fetch.log"
mkdir -p "${env_file%/*}" "${log_file%/*}" "$bundle_dir"

say() {
  printf '%s [fetch] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" | tee -a "$log_file" >&2
}

{
  printf '# shellcheck shell=bash disable=SC2034\n'
  printf '# Cluster values for kiln'"'"'s node bootstrap, written at boot by fetch.sh.\n'
  for pair in "${pairs[@]}"; do
    name="${pair%%=*}"
    value="${pair#*=}"
    if [[ "$value" == *"'"* ]]; then
      say "refusing $name: its value holds a single quote"
      exit 2
    fi
    printf "%s='%s'\n" "$name" "$value"
  done
} >"${env_file}.tmp"
mv "${env_file}.tmp" "$env_file"
chmod 0644 "$env_file"

command -v aws >/dev/null || {
  say "the AWS CLI is needed to fetch $bundle_url and is not installed on this image"
  exit 1
}
archive="${bundle_dir}.zip"
attempt=1
delay="${KILN_FETCH_RETRY_DELAY_SECONDS:-5}"
until aws s3 cp --only-show-errors "$bundle_url" "$archive" 2>>"$log_file"; do
  if ((attempt >= 6)); then
    say "could not fetch $bundle_url after $attempt attempts; see $log_file"
    exit 1
  fi
  say "fetch of $bundle_url failed (attempt $attempt); retrying in ${delay}s"
  sleep "$delay"
  attempt=$((attempt + 1))
  delay=$((delay * 2 > 60 ? 60 : delay * 2))
done

# Check the zip's content against the digest (when there is one) before anything is written, then unpack it
# with Python's zipfile, which every supported image has, keeping the files' modes. The digest is the sha256 of
# "<sha256 of the file>  <relative path>" lines, one per file in path order (sha256sum's own format).
unpack() {
  python3 - "$archive" "$bundle_dir" "$digest" <<'PY'
import hashlib
import os
import sys
import zipfile

archive, target, expected = sys.argv[1:4]
with zipfile.ZipFile(archive) as bundle:
    files = sorted((m for m in bundle.infolist() if not m.is_dir()), key=lambda m: m.filename)
    if expected:
        listing = "".join(f"{hashlib.sha256(bundle.read(m)).hexdigest()}  {m.filename}\n" for m in files)
        actual = hashlib.sha256(listing.encode()).hexdigest()
        if actual != expected:
            sys.exit(f"fetch.sh: the bundle's content has sha256 {actual}, not {expected}: not unpacking it")
    for member in bundle.infolist():
        path = bundle.extract(member, target)
        mode = (member.external_attr >> 16) & 0o777
        if mode:
            os.chmod(path, mode)
PY
}
unpack 2> >(tee -a "$log_file" >&2) || {
  say "the bundle from $bundle_url was not unpacked; see $log_file"
  exit 1
}
say "bundle unpacked in $bundle_dir; running $entry_point"
args=(--phase all)
if [[ -n "$role" ]]; then
  args+=(--role "$role")
fi
exec bash "${bundle_dir}/${entry_point}" "${args[@]}"
