#!/usr/bin/env bash
# First thing a cloud node runs: write cluster.env, fetch kiln's bootstrap bundle from S3, run it.
# Usage: fetch.sh BUNDLE_S3_URL ENTRY_POINT [--role ROLE] [KILN_NAME=VALUE ...]
# The KILN_NAME=VALUE pairs carry deploy-time values (FSx DNS name, region, ...) that CloudFormation
# fills in; they become /etc/kiln/cluster.env, which the bundle's first step reads and checks.
set -euo pipefail

usage() {
  printf 'usage: %s BUNDLE_S3_URL ENTRY_POINT [--role ROLE] [KILN_NAME=VALUE ...]\n' "$0" >&2
  exit 2
}

(($# >= 2)) || usage
bundle_url="$1"
entry_point="$2"
shift 2
role=""
pairs=()
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
[[ "$bundle_url" == s3://* ]] || {
  printf 'fetch.sh: bundle URL must be s3://bucket/key (got %s)\n' "$bundle_url" >&2
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

# Unpack with Python's zipfile, which every supported image has, and keep the files' modes.
python3 - "$archive" "$bundle_dir" <<'PY'
import os
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as bundle:
    for member in bundle.infolist():
        path = bundle.extract(member, sys.argv[2])
        mode = (member.external_attr >> 16) & 0o777
        if mode:
            os.chmod(path, mode)
PY
say "bundle unpacked in $bundle_dir; running $entry_point"
args=(--phase all)
if [[ -n "$role" ]]; then
  args+=(--role "$role")
fi
exec bash "${bundle_dir}/${entry_point}" "${args[@]}"
