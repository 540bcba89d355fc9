# shellcheck shell=bash
# AWS PCS's agent: adopted from an image PCS's nodes boot, or baked into a stock image from the installer AWS
# publishes in the cluster's region, checked against AWS's signature.

# Print the agent on this node (VERSION-RELEASE from its version file), or nothing.
pcs_agent_on_node() {
  local file version release
  file="$(root_path "$KILN_PCS_AGENT_VERSION_FILE")"
  version="$(version_file_value "$file" AGENT_VERSION)"
  release="$(version_file_value "$file" AGENT_RELEASE)"
  if [[ -n "$version" ]]; then
    printf '%s\n' "${version}${release:+-${release}}"
  fi
}

install_pcs_agent() {
  local want="${KILN_PCS_AGENT_VERSION:-}" have work
  have="$(pcs_agent_on_node)"
  if [[ -n "${KILN_IMAGE_PCS_AGENT:-}" ]]; then
    adopt_component "PCS agent" "$have" "$KILN_IMAGE_PCS_AGENT"
    return 0
  fi
  [[ -n "$want" ]] || die "software.pcs_agent is not pinned and the ${KILN_IMAGE_TITLE} has no PCS agent"
  if [[ "$have" == "$want" ]]; then
    skip "PCS agent ${want} is installed"
    return 0
  fi
  guard_replacement pcs_agent "PCS agent" "$have" "$want"
  if [[ "${KILN_PHASE:-}" != bake ]]; then
    # A node registers with PCS before its user data runs: the agent must already be on the image.
    die "the PCS agent must be on the image before the node registers: bake it (compute.image.bake)"
  fi
  fetch_artifact pcs-agent
  work="$(root_path /var/cache/kiln/build/pcs-agent)"
  rm -rf "$work"
  mkdir -p "$work"
  tar -xzf "$KILN_FETCHED" -C "$work"
  wait_for_package_locks
  (cd "${work}/${KILN_PCS_AGENT_DIRECTORY}" && ./installer.sh -y)
  rm -rf "$work"
  have="$(pcs_agent_on_node)"
  [[ "$have" == "$want" ]] || die "PCS agent installer ${want} left version '${have}' in ${KILN_PCS_AGENT_VERSION_FILE}"
  record_installed pcs-agent "$want"
}
