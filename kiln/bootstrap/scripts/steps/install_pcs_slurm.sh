# shellcheck shell=bash
# Slurm as AWS PCS builds it for the cluster's version: adopted from an image PCS's nodes boot, or baked into a
# stock image with PCS's Slurm installer (it compiles Slurm), checked against AWS's signature.

install_pcs_slurm() {
  install_with_vendor_installer pcs_slurm "PCS Slurm" "${KILN_IMAGE_PCS_SLURM:-}" "${KILN_PCS_SLURM_VERSION:-}" \
    pcs-slurm "$KILN_PCS_SLURM_DIRECTORY" "$KILN_PCS_SLURM_VERSION_FILE" SLURM_VERSION PCS_SLURM_RELEASE
}
