# shellcheck shell=bash
# Slurm configuration rendered from kiln's templates (slurm.conf fragments, gres.conf,
# cgroup.conf, plugstack.conf for pyxis) where kiln owns it (the local cluster), pyxis's SPANK
# configuration in the directory the backend reads, then a reconfigure: slurmd only learns of pyxis
# when it restarts, and slurmctld when it is reconfigured. On HyperPod the lifecycle script also
# starts the daemons, against the slurm.conf HyperPod's agent writes.

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
# the backend's plugstack.conf must name each file (ParallelCluster, HyperPod), make sure it does. Nothing else of
# the backend's configuration is touched.
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
    # One include per file: a wildcard include does not reach nodes that read the controller's configuration.
    for source in "${KILN_BUNDLE_DIR}"/spank/*.conf; do
      ensure_line "$(root_path "$KILN_SLURM_PLUGSTACK_CONF")" "include ${KILN_SLURM_PLUGSTACK_DIR}/${source##*/}"
      if ((KILN_CHANGED == 1)); then
        KILN_SLURM_CHANGED=1
      fi
    done
  fi
}

# HyperPod: its agent writes slurm.conf on the controller, and the lifecycle script starts the daemons against it
# (kiln.catalog.platforms, hyperpod-slurm). Wait until that file names this cluster's controller.
wait_for_platform_slurm_conf() {
  local conf deadline
  conf="$(root_path "$KILN_SLURM_PLATFORM_CONF")"
  deadline=$((SECONDS + KILN_SLURM_CONF_TIMEOUT_SECONDS))
  # A whole-word match: 10.1.0.5 is not named by a line that names 10.1.0.50.
  until [[ -r "$conf" ]] && grep -qwF "$KILN_SLURM_CONTROLLER_ADDR" "$conf"; do
    ((SECONDS < deadline)) || die "${KILN_SLURM_PLATFORM_CONF} does not name the controller ${KILN_SLURM_CONTROLLER_ADDR} after ${KILN_SLURM_CONF_TIMEOUT_SECONDS}s: HyperPod's cluster agent writes it"
    log "waiting for HyperPod's agent to write ${KILN_SLURM_PLATFORM_CONF}"
    sleep "$KILN_LOCK_POLL_SECONDS"
  done
}

# Run slurmd in configless mode: it reads slurm.conf and its includes from the controller. The drop-in sets the
# unit's type and start line together (hyperpod-slurm's slurmd_unit fact): a notify unit waits for slurmd's READY,
# which slurmd sends only under --systemd (that flag keeps it in the foreground and refuses -D).
write_configless_slurmd_unit() {
  write_file "$(root_path /etc/systemd/system/slurmd.service.d/kiln.conf)" <<UNIT
[Service]
Type=notify
ExecStart=
ExecStart=${KILN_SLURM_PREFIX}/sbin/slurmd --systemd --conf-server ${KILN_SLURM_CONTROLLER_ADDR}
UNIT
  if ((KILN_CHANGED == 1)); then
    KILN_SLURM_CHANGED=1
    systemctl daemon-reload
  fi
}

# Start (or, after a change, reload) the daemon of this node's role against the platform's configuration.
start_lifecycle_daemons() {
  [[ -n "${KILN_SLURM_CONTROLLER_ADDR:-}" ]] || die "no controller address: HyperPod's resource_config.json names none"
  case "$KILN_NODE_ROLE" in
    controller)
      wait_for_platform_slurm_conf
      if ! service_active slurmctld; then
        systemctl enable --now slurmctld
      elif ((KILN_SLURM_CHANGED == 1)); then
        scontrol reconfigure
      fi
      ;;
    worker | login)
      write_configless_slurmd_unit
      if ! service_active slurmd; then
        systemctl enable --now slurmd
      elif ((KILN_SLURM_CHANGED == 1)); then
        systemctl restart slurmd
      fi
      ;;
  esac
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
  if [[ "$KILN_SLURM_DAEMONS" == lifecycle ]]; then
    start_lifecycle_daemons
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
