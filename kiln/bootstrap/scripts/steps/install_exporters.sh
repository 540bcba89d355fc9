# shellcheck shell=bash
# The Prometheus exporters of the spec's observability section, each verified like every other download: the
# node exporter (and the agent's Prometheus) from Prometheus's releases (sha256 from artifacts.json; on the
# local target Debian's signed packages), NVIDIA's DCGM and DCGM exporter pinned from the signed CUDA
# repository on GPU nodes, and prometheus_client (pip --require-hashes) in kiln's venv for kiln-metrics.

# Unpack release tarball artifact $1 (version $2) into /opt/kiln/$1-$2, which must then hold binary $3, and point
# /opt/kiln/$1 at it.
install_release() {
  local name="$1" version="$2" binary="$3" dest staging
  dest="$(root_path "/opt/kiln/${name}-${version}")"
  if [[ -x "${dest}/${binary}" ]]; then
    skip "${name} ${version} is installed"
  else
    fetch_artifact "$name"
    staging="${dest}.kiln-new"
    rm -rf "$staging"
    mkdir -p "$staging"
    tar -xzf "$KILN_FETCHED" -C "$staging" --strip-components=1
    [[ -x "${staging}/${binary}" ]] || die "${name} ${version}: no ${binary} in ${KILN_FETCHED}"
    mv -f "$staging" "$dest"
  fi
  ln -sfn "${name}-${version}" "$(root_path "/opt/kiln/${name}")"
}

install_node_exporter() {
  if [[ "$KILN_TARGET" == local ]]; then
    # The local cluster's nodes share this machine: Debian's package, which kiln local starts per node.
    ensure_packages prometheus-node-exporter
    return 0
  fi
  install_release node-exporter "$KILN_NODE_EXPORTER_VERSION" node_exporter
}

# The agent runs on one node (the Slurm exporter's): an image serves every role, a node booting unbaked fetches
# Prometheus only where it runs.
install_prometheus_agent() {
  if [[ "$KILN_TARGET" == local ]]; then
    # kiln local runs Debian's Prometheus over the local exporters.
    ensure_packages prometheus
  elif [[ "${KILN_PHASE:-}" != bake && "$KILN_NODE_ROLE" != "$KILN_SLURM_EXPORTER_ROLE" ]]; then
    skip "Prometheus agent: it runs on the ${KILN_SLURM_EXPORTER_ROLE} node, this is a ${KILN_NODE_ROLE}"
  else
    install_release prometheus "$KILN_PROMETHEUS_VERSION" prometheus
  fi
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

# kiln's Slurm and EFA exporters (and the agent's node discovery) are kiln-metrics, from kiln's wheel, with
# prometheus_client beside it.
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
  # The EFA exporter runs on every node of a cluster with EFA nodes: elsewhere it reports 0 devices.
  if exporter_wanted slurm || exporter_wanted efa || ((KILN_PROMETHEUS_AGENT == 1)); then
    install_kiln_metrics
  fi
  if ((KILN_PROMETHEUS_AGENT == 1)); then
    install_prometheus_agent
  fi
}
