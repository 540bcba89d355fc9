# shellcheck shell=bash
# Slurm as AWS PCS builds it for the cluster's version: adopted from an image PCS's nodes boot, or baked into a
# stock image with PCS's Slurm installer (it compiles Slurm), checked against AWS's signature.

# Print PCS's Slurm on this node (VERSION-RELEASE from its version file), or nothing.
pcs_slurm_on_node() {
  local file version release
  file="$(root_path "$KILN_PCS_SLURM_VERSION_FILE")"
  version="$(version_file_value "$file" SLURM_VERSION)"
  release="$(version_file_value "$file" PCS_SLURM_RELEASE)"
  if [[ -n "$version" ]]; then
    printf '%s\n' "${version}${release:+-${release}}"
  fi
}

install_pcs_slurm() {
  local want="${KILN_PCS_SLURM_VERSION:-}" have work
  have="$(pcs_slurm_on_node)"
  if [[ -n "${KILN_IMAGE_PCS_SLURM:-}" ]]; then
    adopt_component "PCS Slurm" "$have" "$KILN_IMAGE_PCS_SLURM"
    return 0
  fi
  [[ -n "$want" ]] || die "software.pcs_slurm is not pinned and the ${KILN_IMAGE_TITLE} has no PCS Slurm"
  if [[ "$have" == "$want" ]]; then
    skip "PCS Slurm ${want} is installed"
    return 0
  fi
  guard_replacement pcs_slurm "PCS Slurm" "$have" "$want"
  if [[ "${KILN_PHASE:-}" != bake ]]; then
    die "PCS's Slurm must be on the image before the node registers: bake it (compute.image.bake)"
  fi
  fetch_artifact pcs-slurm
  work="$(root_path /var/cache/kiln/build/pcs-slurm)"
  rm -rf "$work"
  mkdir -p "$work"
  tar -xzf "$KILN_FETCHED" -C "$work"
  wait_for_package_locks
  (cd "${work}/${KILN_PCS_SLURM_DIRECTORY}" && ./installer.sh -y)
  rm -rf "$work"
  have="$(pcs_slurm_on_node)"
  [[ "$have" == "$want" ]] || die "PCS Slurm installer ${want} left version '${have}' in ${KILN_PCS_SLURM_VERSION_FILE}"
  record_installed pcs-slurm "$want"
}
