#!/usr/bin/env bash
# First thing a cloud node runs: write cluster.env, fetch kiln's bootstrap bundle from S3, check it, run it.
# Usage: fetch.sh BUNDLE_S3_URL ENTRY_POINT --sha256 DIGEST [--role ROLE] [KILN_NAME=VALUE ...]
#    or: fetch.sh --manifest FILE [--role ROLE]
# The KILN_NAME=VALUE pairs carry deploy-time values (FSx DNS name, region, ...) that CloudFormation
# fills in; they become /etc/kiln/cluster.env, which the bundle's first step reads and checks.
# A manifest (JSON, what resolve-bootstrap.sh read from the cluster's SSM parameter) carries the same:
# {"bundle": {"url", "entry_point", "sha256"}, "env": {KILN_NAME: VALUE}}.
# DIGEST (the manifest's sha256) is the digest of the bundle's content listing, kiln.bootstrap.fetch.bundle_digest.
# It is required: the zip is checked against it before anything in it is written or run, and a zip that does not
# match is refused (fetch.log names the object and both digests) with a non-zero exit.
set -euo pipefail

root="${KILN_ROOT:-/}"
root="${root%/}"
env_file="${root}/etc/kiln/cluster.env"
bundle_dir="${root}/opt/kiln/bootstrap"
log_file="${root}/var/log/kiln/fetch.log"
mkdir -p "${log_file%/*}"

say() {
  printf '%s [fetch] %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" | tee -a "$log_file" >&2
}

# A refusal of the arguments: logged like everything else, exit 2.
refuse() {
  say "$*"
  exit 2
}

usage() {
  say "refusing arguments: $*"
  printf 'usage: %s BUNDLE_S3_URL ENTRY_POINT --sha256 DIGEST [--role ROLE] [KILN_NAME=VALUE ...]\n' "$0" >&2
  printf '   or: %s --manifest FILE [--role ROLE]\n' "$0" >&2
  exit 2
}

bundle_url=""
entry_point=""
digest=""
role=""
pairs=()
if [[ "${1:-}" == --manifest ]]; then
  [[ -r "${2:-}" ]] || usage "no readable manifest file"
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
  ((${#fields[@]} >= 3)) || refuse "fetch.sh: $manifest is not a bootstrap manifest"
  bundle_url="${fields[0]}"
  entry_point="${fields[1]}"
  digest="${fields[2]}"
  pairs=("${fields[@]:3}")
  for pair in "${pairs[@]}"; do
    [[ "$pair" == KILN_[A-Z_]*=* ]] || usage "the manifest's env holds $pair, not a KILN_NAME=VALUE pair"
  done
  while (($# > 0)); do
    case "$1" in
      --role)
        role="${2:-}"
        [[ -n "$role" ]] || usage "--role needs a role"
        shift 2
        ;;
      *) usage "unexpected $1" ;;
    esac
  done
else
  (($# >= 2)) || usage "a bundle URL and an entry point are needed"
  bundle_url="$1"
  entry_point="$2"
  shift 2
  while (($# > 0)); do
    case "$1" in
      --sha256)
        digest="${2:-}"
        shift $(($# >= 2 ? 2 : 1))
        ;;
      --role)
        role="${2:-}"
        [[ -n "$role" ]] || usage "--role needs a role"
        shift 2
        ;;
      KILN_[A-Z_]*=*)
        pairs+=("$1")
        shift
        ;;
      *) usage "unexpected $1" ;;
    esac
  done
fi
[[ "$bundle_url" == s3://* ]] || refuse "fetch.sh: bundle URL must be s3://bucket/key (got $bundle_url)"
[[ -n "$entry_point" && "$entry_point" != /* && "$entry_point" != *..* ]] ||
  refuse "fetch.sh: entry point must be a relative path inside the bundle (got $entry_point)"
[[ -n "$digest" ]] ||
  refuse "fetch.sh: refusing $bundle_url: no sha256 to check it against (--sha256, or the manifest's bundle.sha256)"
[[ "$digest" =~ ^[0-9a-f]{64}$ ]] || refuse "fetch.sh: sha256 must be 64 lowercase hex digits (got $digest)"

mkdir -p "${env_file%/*}" "$bundle_dir"
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

# Check the zip's content against the digest before anything is written, then unpack it with Python's zipfile,
# which every supported image has, keeping the files' modes. The digest is the sha256 of
# "<sha256 of the file>  <relative path>" lines, one per file in path order (sha256sum's own format); a name holding
# a line break could forge that listing, so it is refused, and so is a zip without the entry point.
unpack() {
  python3 - fetch.sh "$archive" "$bundle_dir" "$digest" "$bundle_url" "$entry_point" <<'PY'
import hashlib
import os
import sys
import zipfile

who, archive, target, expected, url, entry_point = sys.argv[1:7]
with zipfile.ZipFile(archive) as bundle:
    files = sorted((m for m in bundle.infolist() if not m.is_dir()), key=lambda m: m.filename)
    if any("\n" in m.filename or "\r" in m.filename for m in files):
        sys.exit(f"{who}: {url}: a file name in the zip holds a line break: refusing to unpack or run it")
    listing = "".join(f"{hashlib.sha256(bundle.read(m)).hexdigest()}  {m.filename}\n" for m in files)
    actual = hashlib.sha256(listing.encode()).hexdigest()
    if actual != expected:
        sys.exit(
            f"{who}: {url}: the bundle's content has sha256 {actual}, expected {expected}: "
            "refusing to unpack or run it"
        )
    if entry_point not in {m.filename for m in files}:
        sys.exit(f"{who}: {url}: the bundle has no {entry_point}: refusing to run it")
    for member in bundle.infolist():
        path = bundle.extract(member, target)
        mode = (member.external_attr >> 16) & 0o777
        if mode:
            os.chmod(path, mode)
PY
}
unpack 2> >(tee -a "$log_file" >&2) || {
  rm -f "$archive"
  say "the bundle from $bundle_url was not unpacked and nothing in it ran; see $log_file"
  exit 1
}
say "bundle unpacked in $bundle_dir (content sha256 $digest); running $entry_point"
args=(--phase all)
if [[ -n "$role" ]]; then
  args+=(--role "$role")
fi
exec bash "${bundle_dir}/${entry_point}" "${args[@]}"
