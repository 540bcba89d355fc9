# shellcheck shell=bash
# Start the exporters install_exporters put on this node, each where it belongs: the node exporter on every
# node, the Slurm exporter beside the controller (PCS: on login nodes), the DCGM exporter on GPU nodes and
# kiln's EFA exporter on EFA nodes. One systemd unit each; the local cluster starts its own processes.

# Write unit $1 from stdin; (re)start it when it changed, start it when it does not run.
exporter_unit() {
  local unit="$1"
  write_file "$(root_path "/etc/systemd/system/${unit}")"
  if ((KILN_CHANGED == 1)); then
    systemctl daemon-reload
    systemctl enable "$unit"
    systemctl restart "$unit" || die "${unit} did not start: journalctl -u ${unit}"
  elif ! service_active "$unit"; then
    systemctl enable --now "$unit" || die "${unit} did not start: journalctl -u ${unit}"
  fi
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
  if exporter_wanted efa && ((KILN_EFA_COUNT > 0)); then
    exporter_unit kiln-efa-exporter.service < <(kiln_metrics_unit efa "$KILN_EFA_EXPORTER_PORT" "")
  fi
  if exporter_wanted dcgm && ((KILN_GPU_COUNT > 0)); then
    exporter_unit kiln-dcgm-exporter.service < <(dcgm_exporter_unit)
  fi
}
