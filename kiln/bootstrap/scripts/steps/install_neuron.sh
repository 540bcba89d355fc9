# shellcheck shell=bash
# AWS Neuron host software for Trainium and Inferentia: the Neuron driver (DKMS), runtime, collectives and
# tools (neuron-ls, neuron-top) of the pinned Neuron SDK release, from AWS's signed Neuron repository.

install_neuron() {
  local release="${KILN_NEURON_VERSION:-}" pair name version
  local -a missing=()
  if ((KILN_NEURON_COUNT == 0)); then
    skip "no Neuron devices on ${KILN_INSTANCE_TYPE}"
    return 0
  fi
  if [[ -n "${KILN_IMAGE_NEURON:-}" ]]; then
    adopt_component "Neuron driver" "$(package_version aws-neuronx-dkms)" "$KILN_IMAGE_NEURON"
    return 0
  fi
  [[ -n "$release" ]] || die "software.neuron is not pinned and the ${KILN_IMAGE_TITLE} ships no Neuron driver"
  for pair in $KILN_NEURON_PACKAGES; do
    name="${pair%%:*}"
    version="${pair#*:}"
    package_installed "$name" "$version" || missing+=("$(pinned_package "$name" "$version")")
  done
  if ((${#missing[@]} == 0)); then
    skip "Neuron ${release} packages are installed"
    return 0
  fi
  log "installing Neuron ${release}: ${missing[*]}"
  install_kernel_build_packages
  add_signed_repository neuron
  install_packages "${missing[@]}"
}
