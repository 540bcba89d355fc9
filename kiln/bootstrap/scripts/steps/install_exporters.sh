# shellcheck shell=bash
# The Prometheus exporters of the spec's observability section, each verified like every other download:
# the node exporter from Prometheus's release (sha256 from artifacts.json; on the local target Debian's
# signed package), NVIDIA's DCGM and DCGM exporter pinned from the signed CUDA repository on GPU nodes, and
# prometheus_client (pip --require-hashes) in kiln's venv for kiln's own Slurm and EFA exporters.

install_node_exporter() {
  local version="${KILN_NODE_EXPORTER_VERSION:-}" dest staging
  if [[ "$KILN_TARGET" == local ]]; then
    # The local cluster's nodes share this machine: Debian's package, which kiln local starts per node.
    ensure_packages prometheus-node-exporter
    return 0
  fi
  dest="$(root_path "/opt/kiln/node-exporter-${version}")"
  if [[ -x "${dest}/node_exporter" ]]; then
    skip "node exporter ${version} is installed"
  else
    fetch_artifact node-exporter
    staging="${dest}.kiln-new"
    rm -rf "$staging"
    mkdir -p "$staging"
    tar -xzf "$KILN_FETCHED" -C "$staging" --strip-components=1
    [[ -x "${staging}/node_exporter" ]] || die "node exporter ${version}: no node_exporter in ${KILN_FETCHED}"
    mv -f "$staging" "$dest"
  fi
  ln -sfn "node-exporter-${version}" "$(root_path /opt/kiln/node-exporter)"
}

# The DCGM exporter must run with the DCGM release it was built against: both are held at the pinned pair.
install_dcgm_exporter() {
  local dcgm="$KILN_DCGM_VERSION" exporter="$KILN_DCGM_EXPORTER_VERSION"
  if already_installed dcgm-exporter "${dcgm}-${exporter}" && package_installed datacenter-gpu-manager-exporter; then
    skip "DCGM ${dcgm} and DCGM exporter ${exporter} are installed"
    return 0
  fi
  add_signed_repository cuda
  if [[ "$KILN_PKG" == apt ]]; then
    # DCGM's packages carry an epoch (1:4.6.0-1): a pin by pattern holds them whatever it is.
    pin_apt_versions dcgm "datacenter-gpu-manager-4-*" "/^([0-9]+:)?${dcgm//./\\.}-/"
    pin_apt_versions dcgm-exporter "datacenter-gpu-manager-exporter" "/^([0-9]+:)?${exporter//./\\.}-/"
    install_packages datacenter-gpu-manager-4-core datacenter-gpu-manager-4-proprietary \
      datacenter-gpu-manager-exporter
  else
    install_packages "datacenter-gpu-manager-4-core-${dcgm}" "datacenter-gpu-manager-4-proprietary-${dcgm}" \
      "datacenter-gpu-manager-exporter-${exporter}"
  fi
  record_installed dcgm-exporter "${dcgm}-${exporter}"
}

# kiln's Slurm and EFA exporters are kiln-metrics, from kiln's wheel, with prometheus_client beside it.
install_kiln_metrics() {
  local requirements want="${KILN_LAUNCHER_WHEEL_SHA256} ${KILN_PROMETHEUS_CLIENT_REQUIREMENT}"
  if [[ -x "$(root_path /opt/kiln/venv)/bin/kiln-metrics" ]] && already_installed kiln-metrics "$want"; then
    skip "kiln-metrics and ${KILN_PROMETHEUS_CLIENT_REQUIREMENT%% *} are installed"
    return 0
  fi
  refuse_when_baked "prometheus_client from PyPI"
  install_kiln_wheel
  requirements="$(root_path /opt/kiln/metrics-requirements.txt)"
  printf '%s\n' "$KILN_PROMETHEUS_CLIENT_REQUIREMENT" >"$requirements"
  retry "$KILN_RETRY_ATTEMPTS" "${KILN_VENV}/bin/python" -m pip install --quiet --no-deps --require-hashes \
    -r "$requirements"
  record_installed kiln-metrics "$want"
}

install_exporters() {
  if [[ -z "${KILN_EXPORTERS:-}" ]]; then
    skip "no exporters: the spec has no observability section"
    return 0
  fi
  if exporter_wanted node; then
    install_node_exporter
  fi
  if exporter_wanted dcgm; then
    if ((KILN_GPU_COUNT > 0)); then
      install_dcgm_exporter
    else
      skip "DCGM exporter: no GPUs on ${KILN_INSTANCE_TYPE}"
    fi
  fi
  if exporter_wanted slurm || { exporter_wanted efa && ((KILN_EFA_COUNT > 0)); }; then
    install_kiln_metrics
  fi
}
