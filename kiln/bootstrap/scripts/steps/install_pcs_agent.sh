# shellcheck shell=bash
# AWS PCS's agent: adopted from an image PCS's nodes boot, or baked into a stock image from the installer AWS
# publishes in the cluster's region, checked against AWS's signature.

install_pcs_agent() {
  install_with_vendor_installer pcs_agent "PCS agent" "${KILN_IMAGE_PCS_AGENT:-}" "${KILN_PCS_AGENT_VERSION:-}" \
    pcs-agent "$KILN_PCS_AGENT_DIRECTORY" "$KILN_PCS_AGENT_VERSION_FILE" AGENT_VERSION AGENT_RELEASE
}
