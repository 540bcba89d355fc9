# shellcheck shell=bash
# The user's own steps (spec bootstrap.steps): step user_NAME runs the bundle's script user-steps/NAME, whose sha256,
# phase and node roles bundle.env records (KILN_USER_STEP_NAME_SHA256, _PHASE, _ROLES). An install step's pin is its
# sha256: its marker records the script it ran, and a baked image whose marker differs is refused.
# Sourced by lib.sh, never run.

# True when user step $1 (user_NAME) runs on this node: its roles name the node's role.
user_step_here() {
  local roles
  roles="$(bundle_value USER_STEP "${1#user_}" ROLES)"
  [[ " ${roles} " == *" ${KILN_NODE_ROLE:-} "* ]]
}

# Print node roles $@ as the spec names them (compute for worker), space-separated.
spec_roles() {
  local role
  local -a words=()
  for role in "$@"; do
    if [[ "$role" == worker ]]; then
      words+=(compute)
    else
      words+=("$role")
    fi
  done
  printf '%s\n' "${words[*]}"
}

# Run user step $1 (user_NAME): check the script against its sha256, skip it on a node of another role (an image build
# runs every install step: the image serves every role) and an install step whose marker records this script, else run
# it as root from the node's root directory with stdin closed, its output in the log, and record an install step's
# marker. The script sees the node's environment (bundle.env and cluster.env, exported) and KILN_ROLE (controller, login
# or compute; empty in an image build), KILN_PHASE, KILN_BUNDLE_DIR and KILN_USER_STEP (its name).
run_user_step() {
  local step="$1" name script sha phase roles marker role="" status=0
  name="${step#user_}"
  script="${KILN_BUNDLE_DIR}/user-steps/${name}"
  sha="$(bundle_value USER_STEP "$name" SHA256)"
  phase="$(bundle_value USER_STEP "$name" PHASE)"
  roles="$(bundle_value USER_STEP "$name" ROLES)"
  [[ -n "$sha" && -n "$phase" ]] || die "user step ${name} is not part of this bundle (bundle.env has no KILN_USER_STEP_${name^^}_SHA256)"
  [[ -f "$script" ]] || die "user step ${name}: ${script} is missing from the bundle"
  if ! sha256_matches "$script" "$sha"; then
    die "user step ${name}: ${script} is not the script this bundle was rendered with (bundle.env records sha256 ${sha}); refusing to run it"
  fi
  if [[ "$phase" == install && "${KILN_PHASE:-}" == bake ]]; then
    log "image build: runs for every role of the step (${roles}), as the image serves them all"
  elif ! user_step_here "$step"; then
    # shellcheck disable=SC2086 # one word per role
    skip "user step ${name} runs on $(spec_roles $roles) nodes; this node is $(spec_roles "$KILN_NODE_ROLE")"
    return 0
  else
    role="$(spec_roles "$KILN_NODE_ROLE")"
  fi
  marker="$(image_marker "$step")"
  if [[ "$phase" == install && -f "$marker" ]] &&
    [[ "$(env_file_value "$marker" "KILN_USER_STEP_${name^^}_SHA256" || true)" == "$sha" ]]; then
    skip "user step ${name} already ran with this script (sha256 ${sha}, ${marker})"
    return 0
  fi
  # A zip (an image build's, HyperPod's lifecycle scripts) may drop the executable bit; the digest is of the content.
  [[ -x "$script" ]] || chmod 0755 "$script"
  log "running ${script} (sha256 ${sha}) as $(id -un); its output follows"
  (
    cd "$(root_path /)"
    umask 0022
    export KILN_ROLE="$role" KILN_USER_STEP="$name"
    exec "$script"
  ) </dev/null || status=$?
  if ((status != 0)); then
    die "user step ${name} (bootstrap.steps): ${script##*/} exited with code ${status}; its output is above in ${KILN_LOG}"
  fi
  if [[ "$phase" == install ]]; then
    record_image_step "$step"
  fi
}
