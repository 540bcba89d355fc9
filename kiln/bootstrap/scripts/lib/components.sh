# shellcheck shell=bash
# Components the image owns or kiln installs: adopting the image's copy, refusing to swap it at boot, vendor
# installers baked into the image, and kiln's own node wheel. Sourced by lib.sh, never run.

# Adopt component $1 ("NVIDIA driver") from the image, which ships it per kiln's platform data: $2 is the node's
# copy (a version, "present", or nothing when it has none) and $3 what the data records (KILN_IMAGE_<COMPONENT>: a
# version, "branch:VERSION", or "present"). A missing or older copy ends the bootstrap: kiln never installs a
# second copy of what the image owns at boot.
adopt_component() {
  local what="$1" have="$2" recorded="$3" floor
  if [[ -z "$have" ]]; then
    die "${what}: the ${KILN_IMAGE_TITLE} ships it (kiln's platform data), but this node has none; boot that image, or bake ${what} into your own (compute.image.bake)"
  fi
  case "$recorded" in
    present) ;;
    branch:*)
      floor="${recorded#branch:}"
      if ! version_at_least "${have%%.*}" "${floor%%.*}"; then
        die "${what} ${have}: older than the ${floor%%.*} branch the ${KILN_IMAGE_TITLE} ships (${floor}); kiln does not replace the image's ${what} at boot"
      fi ;;
    *)
      if ! version_at_least "$have" "$recorded"; then
        die "${what} ${have}: older than the ${recorded} the ${KILN_IMAGE_TITLE} ships; kiln does not replace the image's ${what} at boot"
      fi ;;
  esac
  skip "${what} ${have}: adopted from the ${KILN_IMAGE_TITLE} (kiln installs none)"
}

# Let install step of component $1 ($2 in words) put version $4 on a node that has $3 (nothing: none) only where
# nothing is there, it is the same version, or a bake replaces it (software.replace): a node keeps what its image
# ships, and a boot never swaps it.
guard_replacement() {
  local component="$1" what="$2" have="$3" want="$4"
  if [[ -z "$have" || "$have" == "$want" ]]; then
    return 0
  fi
  if [[ "${KILN_PHASE:-}" == bake && " ${KILN_REPLACE:-} " == *" ${component} "* ]]; then
    log "replacing the image's ${what} ${have} with ${want} (software.replace names ${component})"
    return 0
  fi
  die "the image has ${what} ${have}: kiln does not install ${want} over it; pin software.${component}: ${have} to adopt it, or replace it in a bake (software.replace: [${component}])"
}

# Put component $1 ($2 in words) on the node from a vendor installer that must be on the image before the node
# joins its cluster: adopt the image's copy when KILN_IMAGE_<COMPONENT> ($3) says it ships one; else, in a bake
# only, unpack artifact $5 at version $4, run its DIRECTORY/installer.sh -y ($6) and check the version the
# installer records in file $7 (keys $8 and $9).
install_with_vendor_installer() {
  local component="$1" what="$2" image="$3" want="$4" artifact="$5" directory="$6" file have work
  file="$(root_path "$7")"
  have="$(version_file_release "$file" "$8" "$9")"
  if [[ -n "$image" ]]; then
    adopt_component "$what" "$have" "$image"
    return 0
  fi
  [[ -n "$want" ]] || die "software.${component} is not pinned and the ${KILN_IMAGE_TITLE} has no ${what}"
  if [[ "$have" == "$want" ]]; then
    skip "${what} ${want} is installed"
    return 0
  fi
  guard_replacement "$component" "$what" "$have" "$want"
  if [[ "${KILN_PHASE:-}" != bake ]]; then
    # A node joins its cluster before its user data runs: what it joins with must already be on the image.
    die "${what} must be on the image before the node registers: bake it (compute.image.bake)"
  fi
  fetch_artifact "$artifact"
  work="$(root_path "/var/cache/kiln/build/${artifact}")"
  rm -rf "$work"
  mkdir -p "$work"
  tar -xzf "$KILN_FETCHED" -C "$work"
  wait_for_package_locks
  (cd "${work}/${directory}" && ./installer.sh -y)
  rm -rf "$work"
  have="$(version_file_release "$file" "$8" "$9")"
  [[ "$have" == "$want" ]] || die "${what} installer ${want} left version '${have}' in ${7}"
  record_installed "$artifact" "$want"
}

# Install kiln's node wheel from the bundle into kiln's venv (/opt/kiln/venv), creating the venv when missing;
# --no-deps --no-index: no network and no CDK dependency. Sets KILN_VENV to the venv's path.
install_kiln_wheel() {
  local wheel
  wheel="${KILN_BUNDLE_DIR}/launcher/${KILN_LAUNCHER_WHEEL}"
  [[ -r "$wheel" ]] || die "kiln's node wheel ${wheel} is missing from the bundle"
  KILN_VENV="$(root_path /opt/kiln/venv)"
  if [[ ! -x "${KILN_VENV}/bin/python" ]]; then
    ensure_venv_packages
    "${KILN_PYTHON:-python3}" -m venv "$KILN_VENV"
  fi
  "${KILN_VENV}/bin/python" -m pip install --quiet --no-deps --no-index --force-reinstall "$wheel"
}
