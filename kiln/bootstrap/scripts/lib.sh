# shellcheck shell=bash
# kiln's node bootstrap library: it loads its parts from lib/, one concern each, in this order. Sourced, never run;
# detect_os then adds the package manager's part (lib/pkg-apt.sh or lib/pkg-dnf.sh, which define the same functions).
# The bundle's entry point and kiln-step come in through lib/preamble.sh, which sources this file.
# shellcheck source-path=SCRIPTDIR

KILN_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib"
# shellcheck source=lib/core.sh
source "${KILN_LIB_DIR}/core.sh"
# shellcheck source=lib/envfile.sh
source "${KILN_LIB_DIR}/envfile.sh"
# shellcheck source=lib/files.sh
source "${KILN_LIB_DIR}/files.sh"
# shellcheck source=lib/packages.sh
source "${KILN_LIB_DIR}/packages.sh"
# shellcheck source=lib/downloads.sh
source "${KILN_LIB_DIR}/downloads.sh"
# shellcheck source=lib/components.sh
source "${KILN_LIB_DIR}/components.sh"
# shellcheck source=lib/image.sh
source "${KILN_LIB_DIR}/image.sh"
# shellcheck source=lib/user-steps.sh
source "${KILN_LIB_DIR}/user-steps.sh"
