# shellcheck shell=bash
# A baked image: whether this node boots one, and its manifest. Sourced by lib.sh, never run.

# True when the image was baked: install steps ran at image build, configure must not download.
is_baked() {
  [[ "${KILN_BAKED:-0}" == 1 || -f "$(root_path /etc/kiln/baked)" ]]
}

# End the bootstrap when a baked image, outside its own bake, is asked to fetch $1: such a node downloads
# nothing, so what it lacks belongs in the image.
refuse_when_baked() {
  if is_baked && [[ "${KILN_PHASE:-}" != bake ]]; then
    die "$1: this image is baked, so the bootstrap downloads nothing; ${KILN_REBUILD_IMAGE}"
  fi
}

# The image manifest: each install step that ran leaves a marker, /etc/kiln/image/STEP.env, holding the values of
# its pins (the bundle.env variables KILN_PINS_<STEP> names) it installed with. A baked image's boot checks them
# against its own bundle, and kiln-launch check compares them with /etc/kiln/bundle-pins.env.

# True when $1 is an install step of this bundle.
is_install_step() {
  [[ " ${KILN_INSTALL_STEPS} " == *" $1 "* ]]
}

# Print the bundle.env variable that lists install step $1's pins: KILN_PINS_<STEP>.
pins_variable() {
  printf 'KILN_PINS_%s\n' "${1^^}"
}

# Print the pins of install step $1, space-separated.
step_pins() {
  local variable
  variable="$(pins_variable "$1")"
  printf '%s\n' "${!variable-}"
}

# Print the path of install step $1's marker.
image_marker() {
  printf '%s/%s.env\n' "$(root_path /etc/kiln/image)" "$1"
}

# Print VARIABLE='value' for each variable named in $@, with its value in this bundle.
pinned_values() {
  local variable
  for variable in "$@"; do
    printf "%s='%s'\n" "$variable" "${!variable-}"
  done
}

# Write install step $1's marker: it ran, with these values of its pins. A step that skipped gets one too.
record_image_step() {
  local -a pins
  read -ra pins <<<"$(step_pins "$1")"
  pinned_values "${pins[@]}" | write_file "$(image_marker "$1")" 0644
}

# Check that the image holds install step $1 as this bundle installs it: its marker exists and records this
# bundle's value of every pin, on an image baked (if sealed) for this target.
verify_image_step() {
  local step="$1" marker variable have baked_for
  local -a pins
  if [[ -f "$(root_path /etc/kiln/baked)" ]]; then
    baked_for="$(<"$(root_path /etc/kiln/baked)")"
    if [[ "$baked_for" != "$KILN_TARGET" ]]; then
      die "this image was baked for target ${baked_for}, but this bundle is for ${KILN_TARGET}; ${KILN_REBUILD_IMAGE}"
    fi
  fi
  marker="$(image_marker "$step")"
  [[ -f "$marker" ]] || die "the image has no marker ${marker}: install step ${step} did not run when it was baked; ${KILN_REBUILD_IMAGE}"
  read -ra pins <<<"$(step_pins "$step")"
  for variable in "${pins[@]}"; do
    have="$(env_file_value "$marker" "$variable")" ||
      die "${marker} records no ${variable}: the image was baked from another bundle; ${KILN_REBUILD_IMAGE}"
    if [[ "$have" != "${!variable-}" ]]; then
      die "${variable}: the image has '${have}', this bundle wants '${!variable-}' (install step ${step}); ${KILN_REBUILD_IMAGE}"
    fi
  done
  log "the image matches this bundle: ${pins[*]:-no pins}"
}

# Write what this bundle wants of the image, for kiln-launch check: its install steps, their pins and values. A user
# step for other roles never runs on this node, so the node owes it no marker.
write_bundle_pins() {
  local step variable
  local -a pins steps=()
  local -A seen=()
  for step in $KILN_INSTALL_STEPS; do
    if [[ "$step" != user_* ]] || user_step_here "$step"; then
      steps+=("$step")
    fi
  done
  {
    printf "KILN_INSTALL_STEPS='%s'\n" "${steps[*]}"
    for step in "${steps[@]}"; do
      pinned_values "$(pins_variable "$step")"
      read -ra pins <<<"$(step_pins "$step")"
      for variable in "${pins[@]}"; do
        if [[ -z "${seen[$variable]:-}" ]]; then
          seen[$variable]=1
          pinned_values "$variable"
        fi
      done
    done
  } | write_file "$(root_path /etc/kiln/bundle-pins.env)" 0644
}

# Mark the image baked for this target and drop the downloads cache: the image carries no installer files.
mark_image_baked() {
  write_file "$(root_path /etc/kiln/baked)" 0644 <<<"$KILN_TARGET"
  if [[ -d "$KILN_CACHE_DIR" ]]; then
    rm -rf "$KILN_CACHE_DIR"
    log "removed ${KILN_CACHE_DIR}"
  fi
  log "image sealed for ${KILN_TARGET}: nodes booted from it run configure steps only and download nothing"
}

# Seal a baked image: every install step of this bundle has its marker, matching, then the image is marked baked.
seal_image() {
  local step
  log "sealing the image: checking every install step's marker against this bundle"
  for step in $KILN_INSTALL_STEPS; do
    run_step "$step" verify_image_step "$step"
  done
  run_step seal_image mark_image_baked
}
