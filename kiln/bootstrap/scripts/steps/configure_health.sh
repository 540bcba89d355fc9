# shellcheck shell=bash
# kiln's node health check on the nodes that run slurmd: the program at KILN_HEALTH_CHECK_PROGRAM runs
# `kiln-launch health --drain`, which drains this node with the failing check's line as its reason. Slurm runs it as
# its HealthCheckProgram where the platform's slurm.conf names it (KILN_HEALTH_CHECK=slurm: ParallelCluster's
# CustomSlurmSettings, the local cluster's own slurm.conf); a systemd timer of kiln's runs it every
# KILN_HEALTH_CHECK_INTERVAL_S seconds where the platform's slurm.conf takes none (timer: PCS, HyperPod). With the
# check off (KILN_HEALTH_CHECK empty) a program or timer an earlier bundle left is removed.

HEALTH_UNIT=kiln-health

# Print the program: no arguments, as Slurm runs a HealthCheckProgram; the launcher under the node's root. Slurm
# gives the programs it runs no search path, so the program sets one with the node's Slurm first (scontrol drains the
# node), and where kiln writes slurm.conf (the local cluster, under its prefix) says where that is.
health_check_program() {
  printf '#!/bin/bash\n'
  printf '# kiln: the node health check; a failing check drains this node with its line as the reason.\n'
  printf 'export KILN_ROOT=%q\n' "$KILN_ROOT"
  printf 'export PATH=%q\n' "${KILN_SLURM_PREFIX}/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
  if [[ "$KILN_SLURM_OWNS_CONFIG" == 1 ]]; then
    printf 'export SLURM_CONF=%q\n' "$(root_path "${KILN_SLURM_CONF_DIR}/slurm.conf")"
  fi
  printf 'exec %q health --drain\n' "${KILN_ROOT%/}/opt/kiln/venv/bin/kiln-launch"
}

# Print the oneshot service the timer starts. Slurm kills a HealthCheckProgram after 60 s; so does this unit.
health_service_unit() {
  cat <<UNIT
[Unit]
Description=kiln: node health check (kiln-launch health --drain)
After=network-online.target

[Service]
Type=oneshot
ExecStart=${KILN_HEALTH_CHECK_PROGRAM}
TimeoutStartSec=60
UNIT
}

health_timer_unit() {
  cat <<UNIT
[Unit]
Description=kiln: node health check every ${KILN_HEALTH_CHECK_INTERVAL_S} s

[Timer]
OnActiveSec=${KILN_HEALTH_CHECK_INTERVAL_S}
OnUnitActiveSec=${KILN_HEALTH_CHECK_INTERVAL_S}
AccuracySec=5s

[Install]
WantedBy=timers.target
UNIT
}

# Write the service and timer; (re)start the timer when either changed, start it when it does not run.
install_health_timer() {
  local changed=0
  write_file "$(root_path "/etc/systemd/system/${HEALTH_UNIT}.service")" < <(health_service_unit)
  ((KILN_CHANGED == 0)) || changed=1
  write_file "$(root_path "/etc/systemd/system/${HEALTH_UNIT}.timer")" < <(health_timer_unit)
  ((KILN_CHANGED == 0)) || changed=1
  if ((changed == 1)); then
    systemctl daemon-reload
    systemctl enable "${HEALTH_UNIT}.timer"
    systemctl restart "${HEALTH_UNIT}.timer" || die "${HEALTH_UNIT}.timer did not start: journalctl -u ${HEALTH_UNIT}"
  elif ! service_active "${HEALTH_UNIT}.timer"; then
    systemctl enable --now "${HEALTH_UNIT}.timer" || die "${HEALTH_UNIT}.timer did not start: journalctl -u ${HEALTH_UNIT}"
  fi
}

# Stop and remove the timer an earlier bundle installed (the check turned off, or Slurm runs it now).
remove_health_timer() {
  local timer service
  timer="$(root_path "/etc/systemd/system/${HEALTH_UNIT}.timer")"
  service="$(root_path "/etc/systemd/system/${HEALTH_UNIT}.service")"
  if [[ -e "$timer" || -e "$service" ]]; then
    systemctl disable --now "${HEALTH_UNIT}.timer" || true
    rm -f "$timer" "$service"
    systemctl daemon-reload
    log "removed ${HEALTH_UNIT}.timer"
  fi
}

configure_health() {
  local program
  program="$(root_path "$KILN_HEALTH_CHECK_PROGRAM")"
  # slurmd runs on workers; the local cluster's one run serves every node, whose daemons it starts itself.
  if [[ "$KILN_NODE_ROLE" != worker && "$KILN_SLURM_DAEMONS" != none ]]; then
    skip "no slurmd on a ${KILN_NODE_ROLE} node"
    return 0
  fi
  if [[ -z "${KILN_HEALTH_CHECK:-}" ]]; then
    remove_health_timer
    if [[ -e "$program" ]]; then
      rm -f "$program"
      log "removed ${KILN_HEALTH_CHECK_PROGRAM}: resilience.health_checks is off"
    else
      skip "resilience.health_checks is off"
    fi
    return 0
  fi
  write_file "$program" 0755 < <(health_check_program)
  case "$KILN_HEALTH_CHECK" in
    timer) install_health_timer ;;
    slurm)
      remove_health_timer
      log "Slurm runs ${KILN_HEALTH_CHECK_PROGRAM} as its HealthCheckProgram every ${KILN_HEALTH_CHECK_INTERVAL_S} s"
      ;;
    *) die "KILN_HEALTH_CHECK: got ${KILN_HEALTH_CHECK}, allowed: slurm, timer or empty" ;;
  esac
}
