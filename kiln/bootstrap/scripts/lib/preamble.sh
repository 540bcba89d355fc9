# shellcheck shell=bash
# How every run of a bundle starts, its entry point's and kiln-step's alike: kiln's library and the bundle's steps
# loaded, the log open, the failure trap set, bundle.env read. Sourced right after the caller's set -euo pipefail
# (its arguments parsed, for the entry point), never run.
# shellcheck source-path=SCRIPTDIR

KILN_BUNDLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export KILN_BUNDLE_DIR
# shellcheck source=../lib.sh
source "${KILN_BUNDLE_DIR}/lib.sh"
for step_file in "${KILN_BUNDLE_DIR}"/steps/*.sh; do
  # shellcheck source=/dev/null
  source "$step_file"
done
kiln_init_logging
kiln_install_traps
load_env_file "${KILN_BUNDLE_DIR}/bundle.env"
