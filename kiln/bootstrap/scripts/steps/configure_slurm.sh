# shellcheck shell=bash
# Slurm configuration rendered from kiln's templates (slurm.conf fragments, gres.conf,
# cgroup.conf, plugstack.conf for pyxis) where kiln owns it, pyxis's SPANK configuration in the
# directory the backend reads, then a reconfigure: slurmd only learns of pyxis when it restarts,
# and slurmctld when it is reconfigured.

# Copy the bundle's Slurm files into the configuration directory, filling deploy-time values.
install_slurm_files() {
  local source rel filled
  KILN_SLURM_CHANGED=0
  KILN_CHANGED=0
  while IFS= read -r -d '' source; do
    rel="${source#"${KILN_BUNDLE_DIR}/slurm/"}"
    filled="$(root_path /var/lib/kiln)/slurm-${rel//\//-}"
    mkdir -p "${filled%/*}"
    fill_placeholders <"$source" >"$filled"
    write_file "$(root_path "${KILN_SLURM_CONF_DIR}/${rel}")" <"$filled"
    rm -f "$filled"
    if ((KILN_CHANGED == 1)); then
      KILN_SLURM_CHANGED=1
    fi
  done < <(find "${KILN_BUNDLE_DIR}/slurm" -type f -print0 | sort -z)
  local gres="${KILN_BUNDLE_DIR}/instances/${KILN_INSTANCE_TYPE}/gres.conf"
  if [[ "$KILN_SLURM_OWNS_CONFIG" == 1 ]]; then
    if [[ -r "$gres" ]]; then
      write_file "$(root_path "${KILN_SLURM_CONF_DIR}/gres.conf")" <"$gres"
    fi
    if ((KILN_CHANGED == 1)); then
      KILN_SLURM_CHANGED=1
    fi
  fi
  install_spank_files
}

# Put pyxis's SPANK configuration where the backend reads it (PCS: its own directory per Slurm version), and where
# the backend's plugstack.conf must name that directory (ParallelCluster ships none: pyxis is off until one does),
# make sure it does. Nothing else of the backend's configuration is touched.
install_spank_files() {
  local source
  if [[ -z "${KILN_SLURM_PLUGSTACK_DIR:-}" || ! -d "${KILN_BUNDLE_DIR}/spank" ]]; then
    return 0
  fi
  for source in "${KILN_BUNDLE_DIR}"/spank/*.conf; do
    write_file "$(root_path "${KILN_SLURM_PLUGSTACK_DIR}/${source##*/}")" <"$source"
    if ((KILN_CHANGED == 1)); then
      KILN_SLURM_CHANGED=1
    fi
  done
  if [[ -n "${KILN_SLURM_PLUGSTACK_CONF:-}" ]]; then
    ensure_line "$(root_path "$KILN_SLURM_PLUGSTACK_CONF")" "include ${KILN_SLURM_PLUGSTACK_DIR}/*.conf"
    if ((KILN_CHANGED == 1)); then
      KILN_SLURM_CHANGED=1
    fi
  fi
}

# Run slurmd as a dynamic node of this node's group (HyperPod: nodes register themselves).
write_dynamic_node_unit() {
  local features="Feature=${KILN_NODE_GROUP:-default}"
  if ((KILN_GPU_COUNT > 0)); then
    features+=" Gres=gpu:${KILN_GPU_COUNT}"
  elif ((KILN_NEURON_COUNT > 0)); then
    features+=" Gres=neuron:${KILN_NEURON_COUNT}"
  fi
  write_file "$(root_path /etc/systemd/system/slurmd.service.d/kiln.conf)" <<UNIT
[Service]
ExecStart=
ExecStart=${KILN_SLURM_PREFIX}/sbin/slurmd -D -s -Z --conf "${features}" -f ${KILN_SLURM_CONF_DIR}/slurm.conf
UNIT
  if ((KILN_CHANGED == 1)); then
    KILN_SLURM_CHANGED=1
    systemctl daemon-reload
  fi
}

configure_slurm() {
  local dir
  if [[ -z "${KILN_SLURM_CONF_DIR:-}" ]]; then
    skip "no Slurm on ${KILN_TARGET} nodes"
    return 0
  fi
  for dir in $KILN_SLURM_DIRS; do
    ensure_dir "$(root_path "$dir")" 0755
  done
  install_slurm_files
  if [[ "$KILN_SLURM_DAEMONS" == none ]]; then
    log "Slurm configuration in ${KILN_ROOT%/}${KILN_SLURM_CONF_DIR}; the local cluster starts the daemons"
    return 0
  fi
  case "$KILN_NODE_ROLE" in
    controller)
      if [[ "$KILN_SLURM_OWNS_CONFIG" == 1 ]] && ! service_active slurmctld; then
        systemctl enable --now slurmctld
      elif ((KILN_SLURM_CHANGED == 1)) && service_active slurmctld; then
        scontrol reconfigure
      fi
      ;;
    worker)
      if [[ "$KILN_SLURM_NODES" == dynamic ]]; then
        write_dynamic_node_unit
      fi
      if [[ "$KILN_SLURM_OWNS_CONFIG" == 1 ]] && ! service_active slurmd; then
        systemctl enable --now slurmd
      elif ((KILN_SLURM_CHANGED == 1)); then
        restart_if_active slurmd
      fi
      ;;
    login)
      log "login node: srun reads plugstack.conf itself"
      ;;
  esac
}
