# shellcheck shell=bash
# Start the exporters install_exporters put on this node, each where it belongs: the node exporter on every
# node, the Slurm exporter beside the controller (PCS: on login nodes), the DCGM exporter on GPU nodes and
# kiln's EFA exporter on every node of a cluster with EFA. Beside the Slurm exporter, the Prometheus agent:
# kiln-metrics targets keeps its list of nodes from sinfo, the agent scrapes them and remote-writes to the
# workspace. One systemd unit each; the local cluster starts its own processes.

# Where the agent's state (targets, write-ahead log) lives, under one dynamic user the two units share.
PROMETHEUS_STATE=kiln-prometheus
PROMETHEUS_CONFIG=/etc/kiln/prometheus/agent.yml

# Write unit $1 from stdin; (re)start it when it changed, start it when it does not run.
exporter_unit() {
  local unit="$1"
  write_file "$(root_path "/etc/systemd/system/${unit}")"
  activate_unit "$unit" "$KILN_CHANGED"
}

# Print the [Service] hardening every exporter but DCGM's shares: a user of its own, nothing writable.
exporter_sandbox() {
  printf '%s\n' DynamicUser=yes NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes
}

node_exporter_unit() {
  cat <<UNIT
[Unit]
Description=kiln: Prometheus node exporter on :${KILN_NODE_EXPORTER_PORT}
After=network-online.target

[Service]
ExecStart=/opt/kiln/node-exporter/node_exporter --web.listen-address=:${KILN_NODE_EXPORTER_PORT}
Restart=always
$(exporter_sandbox)

[Install]
WantedBy=multi-user.target
UNIT
}

# $1: slurm or efa; $2: the port; $3: extra Environment lines.
kiln_metrics_unit() {
  cat <<UNIT
[Unit]
Description=kiln: $1 exporter on :$2
After=network-online.target

[Service]
ExecStart=/opt/kiln/venv/bin/kiln-metrics $1 --listen :$2
Restart=always
$3
$(exporter_sandbox)

[Install]
WantedBy=multi-user.target
UNIT
}

# $1: what runs; $2: its command line; $3: more [Service] lines. Both agent units run as the same dynamic user.
agent_unit() {
  cat <<UNIT
[Unit]
Description=kiln: $1
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=$2
Restart=always
RestartSec=5
User=${PROMETHEUS_STATE}
StateDirectory=${PROMETHEUS_STATE}
$3
$(exporter_sandbox)

[Install]
WantedBy=multi-user.target
UNIT
}

# Print a list of names as kiln-metrics takes it: comma-separated.
comma_list() {
  local IFS=,
  printf '%s' "$*"
}

configure_prometheus_agent() {
  local self per_node=() name config_file draft
  self="$(hostname -s)"
  for name in $KILN_EXPORTERS; do
    [[ "$name" == slurm ]] || per_node+=("$name")
  done
  config_file="$(root_path "$PROMETHEUS_CONFIG")"
  mkdir -p "${config_file%/*}"
  draft="$(mktemp "${config_file}.draft.XXXXXX")"
  # shellcheck disable=SC2086 # KILN_EXPORTERS is a list of names
  "$(root_path /opt/kiln/venv)/bin/kiln-metrics" agent-config --cluster "$KILN_CLUSTER_NAME" \
    --targets-dir "/var/lib/${PROMETHEUS_STATE}/targets" --exporters "$(comma_list $KILN_EXPORTERS)" \
    --self "$self" --remote-write-url "$KILN_PROMETHEUS_REMOTE_WRITE_URL" --region "$KILN_REGION" --out "$draft" \
    >/dev/null || die "kiln-metrics agent-config could not write the Prometheus agent's configuration"
  write_file "$config_file" <"$draft"
  rm -f "$draft"
  local config_changed="$KILN_CHANGED"
  if ((${#per_node[@]} > 0)); then
    exporter_unit kiln-metrics-targets.service < <(agent_unit "the Prometheus agent's node list from sinfo" \
      "/opt/kiln/venv/bin/kiln-metrics targets --dir /var/lib/${PROMETHEUS_STATE}/targets --exporters $(comma_list "${per_node[@]}") --self ${self}" \
      "Environment=PATH=${KILN_SLURM_PREFIX}/bin:/usr/local/bin:/usr/bin:/bin")
  fi
  exporter_unit kiln-prometheus-agent.service < <(agent_unit "Prometheus agent sending the cluster's metrics" \
    "/opt/kiln/prometheus/prometheus --agent --config.file=${PROMETHEUS_CONFIG} --storage.agent.path=/var/lib/${PROMETHEUS_STATE}/agent --web.listen-address=127.0.0.1:${KILN_PROMETHEUS_PORT}" \
    "ExecReload=/bin/kill -HUP \$MAINPID")
  if ((config_changed == 1 && KILN_CHANGED == 0)); then
    # Prometheus rereads its configuration on SIGHUP; a unit that just (re)started read it already.
    systemctl reload-or-restart kiln-prometheus-agent.service || die "kiln-prometheus-agent.service did not reload"
  fi
}

# DCGM's exporter reads the GPUs (and, for profiling metrics, needs CAP_SYS_ADMIN): it runs as root.
dcgm_exporter_unit() {
  cat <<UNIT
[Unit]
Description=kiln: NVIDIA DCGM exporter on :${KILN_DCGM_EXPORTER_PORT}
After=network-online.target nvidia-persistenced.service

[Service]
ExecStart=$(command -v dcgm-exporter || printf /usr/bin/dcgm-exporter) --address :${KILN_DCGM_EXPORTER_PORT}
Restart=always

[Install]
WantedBy=multi-user.target
UNIT
}

configure_exporters() {
  if [[ -z "${KILN_EXPORTERS:-}" ]]; then
    skip "no exporters: the spec has no observability section"
    return 0
  fi
  if [[ "$KILN_EXPORTER_DAEMONS" == none ]]; then
    skip "the local cluster starts its exporters itself (kiln local up)"
    return 0
  fi
  if exporter_wanted node; then
    exporter_unit kiln-node-exporter.service < <(node_exporter_unit)
  fi
  if exporter_wanted slurm && [[ "$KILN_NODE_ROLE" == "$KILN_SLURM_EXPORTER_ROLE" ]]; then
    exporter_unit kiln-slurm-exporter.service < <(kiln_metrics_unit slurm "$KILN_SLURM_EXPORTER_PORT" \
      "Environment=PATH=${KILN_SLURM_PREFIX}/bin:/usr/local/bin:/usr/bin:/bin")
  fi
  if exporter_wanted efa; then
    exporter_unit kiln-efa-exporter.service < <(kiln_metrics_unit efa "$KILN_EFA_EXPORTER_PORT" "")
  fi
  if exporter_wanted dcgm && ((KILN_GPU_COUNT > 0)); then
    exporter_unit kiln-dcgm-exporter.service < <(dcgm_exporter_unit)
  fi
  if ((KILN_PROMETHEUS_AGENT == 1)) && [[ "$KILN_NODE_ROLE" == "$KILN_SLURM_EXPORTER_ROLE" ]]; then
    configure_prometheus_agent
  fi
}
