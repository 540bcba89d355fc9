#!/usr/bin/env bash
# A ParallelCluster node's OnNodeConfigured action: resolve the current bootstrap, then run it.
# Usage: resolve-bootstrap.sh REGION PARAMETER [FETCH_ARGUMENTS ...]
# PARAMETER (an SSM parameter the compute stack rewrites at every deploy) holds a JSON manifest whose
# "fetch" object names the current fetch.sh ("url": s3://bucket/key) and its "sha256". This script saves
# the manifest, downloads fetch.sh, checks its digest and runs: fetch.sh --manifest FILE FETCH_ARGUMENTS.
# Everything else (the bundle, its digest, cluster.env) is fetch.sh's business.
#
# FROZEN: ParallelCluster never updates a head node's or login pool's OnNodeConfigured Script, and this file
# is that script (an S3 object named by its digest). Any change to it needs every ParallelCluster cluster
# made before it to be created anew; change fetch.sh instead.
set -euo pipefail

(($# >= 2)) || {
  printf 'usage: %s REGION PARAMETER [FETCH_ARGUMENTS ...]\n' "$0" >&2
  exit 2
}
region="$1"
parameter="$2"
shift 2
root="${KILN_ROOT:-/}"
root="${root%/}"
dir="${root}/opt/kiln"
manifest="${dir}/node-bootstrap.json"
script="${dir}/fetch.sh"
mkdir -p "$dir"

# Run "$@" until it succeeds, six attempts at most, backing off up to a minute.
retry() {
  local attempt=1 delay="${KILN_FETCH_RETRY_DELAY_SECONDS:-5}"
  until "$@"; do
    if ((attempt >= 6)); then
      printf 'resolve-bootstrap.sh: gave up after %s attempts: %s\n' "$attempt" "$*" >&2
      return 1
    fi
    sleep "$delay"
    attempt=$((attempt + 1))
    delay=$((delay * 2 > 60 ? 60 : delay * 2))
  done
}

read_parameter() {
  aws ssm get-parameter --region "$region" --name "$parameter" --query Parameter.Value --output text \
    >"${manifest}.tmp"
}
retry read_parameter
mv "${manifest}.tmp" "$manifest"

fields=$(python3 -c 'import json, sys; f = json.load(open(sys.argv[1]))["fetch"]; print(f["url"], f["sha256"])' \
  "$manifest")
read -r url digest <<<"$fields"
retry aws s3 cp --only-show-errors "$url" "${script}.tmp"
if ! printf '%s  %s\n' "$digest" "${script}.tmp" | sha256sum --check --status; then
  printf 'resolve-bootstrap.sh: %s does not match its sha256 %s in %s\n' "$url" "$digest" "$parameter" >&2
  exit 1
fi
mv "${script}.tmp" "$script"
exec bash "$script" --manifest "$manifest" "$@"
