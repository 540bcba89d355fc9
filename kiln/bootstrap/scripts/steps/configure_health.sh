# shellcheck shell=bash
# kiln's node health check on the nodes that run slurmd: the program at KILN_HEALTH_CHECK_PROGRAM runs
# `kiln-launch health --drain`, which drains this node with the failing check's line as its reason. Slurm runs it as
# its HealthCheckProgram where the platform's slurm.conf names it (KILN_HEALTH_CHECK=slurm: ParallelCluster's
# CustomSlurmSettings, the local cluster's own slurm.conf); a systemd timer of kiln's runs it every
# KILN_HEALTH_CHECK_INTERVAL_S seconds where the platform's slurm.conf takes none (timer: PCS, HyperPod). With the
# check off (KILN_HEALTH_CHECK empty) a program or timer an earlier bundle left is removed. Where the platform must
# be told to replace a node kiln drained (KILN_NODE_REPLACEMENT: HyperPod), the program says so to kiln-launch health.
# With the check on or off, the same nodes get the drain hand-off of the jobs' hang watchdogs (install_drain_handoff).

HEALTH_UNIT=kiln-health
# The drain hand-off (kiln.launcher.drain_request): a job's hang watchdog, which may not drain its node as the job's
# user (nor requeue its job from a training container, which has no scontrol), leaves a request in DRAIN_REQUESTS; root's side takes it at once (a systemd path unit where systemd runs the
# node; the local cluster's node replacer on the local cluster) and drains the node when the job runs there as the
# request's owner. The directory is root's, sticky, writable and not listable by others: 1733.
DRAIN_UNIT=kiln-drain-requests
DRAIN_REQUESTS=/run/kiln/drain-requests
# Root's answers, one per request, which the asking watchdog reads (root's, 0755).
DRAIN_RESULTS=/run/kiln/drain-results
DRAIN_PROGRAM=/opt/kiln/bin/kiln-drain-requests

# Print the start of a program of root's that runs kiln-launch on this node, with the comment $1. Slurm gives the
# programs it runs no search path, so the program sets one with the node's Slurm first (scontrol drains the node), and
# where kiln writes slurm.conf (the local cluster, under its prefix) says where that is.
root_program_head() {
  printf '#!/bin/bash\n'
  printf '# kiln: %s\n' "$1"
  printf 'export KILN_ROOT=%q\n' "$KILN_ROOT"
  printf 'export PATH=%q\n' "${KILN_SLURM_PREFIX}/bin:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
  if [[ "$KILN_SLURM_OWNS_CONFIG" == 1 ]]; then
    printf 'export SLURM_CONF=%q\n' "$(root_path "${KILN_SLURM_CONF_DIR}/slurm.conf")"
  fi
}

# Print the program: no arguments, as Slurm runs a HealthCheckProgram; the launcher under the node's root.
health_check_program() {
  root_program_head "the node health check; a failing check drains this node with its line as the reason."
  if [[ -n "${KILN_NODE_REPLACEMENT:-}" ]]; then
    printf 'export KILN_NODE_REPLACEMENT=%q\n' "$KILN_NODE_REPLACEMENT"
  fi
  printf 'exec %q health --drain\n' "${KILN_ROOT%/}/opt/kiln/venv/bin/kiln-launch"
}

# Print root's side of the drain hand-off (the local cluster's replacer passes --node for each node).
drain_requests_program() {
  root_program_head "take the drain and requeue requests of jobs on this node (kiln-launch drain-requests)."
  printf 'exec %q drain-requests "$@"\n' "${KILN_ROOT%/}/opt/kiln/venv/bin/kiln-launch"
}

# Print the path unit: systemd starts the service whenever the directory holds a request, and makes the directory
# (again after a reboot: /run is a tmpfs) with its mode (systemd.path(5): DirectoryNotEmpty=, MakeDirectory=,
# DirectoryMode=). The service removes every request it reads, so the unit does not fire again for one.
drain_path_unit() {
  cat <<UNIT
[Unit]
Description=kiln: drain requests from the hang watchdogs of jobs on this node

[Path]
DirectoryNotEmpty=${DRAIN_REQUESTS}
MakeDirectory=yes
DirectoryMode=1733

[Install]
WantedBy=paths.target
UNIT
}

drain_service_unit() {
  cat <<UNIT
[Unit]
Description=kiln: take drain requests (kiln-launch drain-requests)

[Service]
Type=oneshot
ExecStart=${DRAIN_PROGRAM}
TimeoutStartSec=60
UNIT
}

# The hand-off on a node that runs slurmd: the program and the request directory everywhere; the path unit where
# systemd runs the node's services (the local cluster's replacer takes the requests there).
install_drain_handoff() {
  local directory
  directory="$(root_path "$DRAIN_REQUESTS")"
  write_file "$(root_path "$DRAIN_PROGRAM")" 0755 < <(drain_requests_program)
  install -d -m 0755 "$(dirname "$directory")"
  install -d -m 1733 "$directory"
  install -d -m 0755 "$(root_path "$DRAIN_RESULTS")"
  if [[ "$KILN_SLURM_DAEMONS" != none ]]; then
    install_triggered_service "$DRAIN_UNIT" drain_service_unit path drain_path_unit
  fi
}

# Write the oneshot service $1.service (printed by $2) and the unit $1.$3 that starts it (printed by $4); (re)start
# that unit when either file changed, start it when it does not run.
install_triggered_service() {
  local name="$1" service="$2" kind="$3" trigger="$4" changed=0
  write_file "$(root_path "/etc/systemd/system/${name}.service")" < <("$service")
  ((KILN_CHANGED == 0)) || changed=1
  write_file "$(root_path "/etc/systemd/system/${name}.${kind}")" < <("$trigger")
  ((KILN_CHANGED == 0)) || changed=1
  activate_unit "${name}.${kind}" "$changed"
}

# Print the oneshot service the timer starts. Slurm kills a HealthCheckProgram after 60 s, and the checks end well
# within that; this unit allows 120 s, for the two scontrol calls that hand a drained node to HyperPod's replacement.
health_service_unit() {
  cat <<UNIT
[Unit]
Description=kiln: node health check (kiln-launch health --drain)
After=network-online.target

[Service]
Type=oneshot
ExecStart=${KILN_HEALTH_CHECK_PROGRAM}
TimeoutStartSec=120
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
  # The hang watchdog runs in every job, with or without the health check.
  install_drain_handoff
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
    timer) install_triggered_service "$HEALTH_UNIT" health_service_unit timer health_timer_unit ;;
    slurm)
      remove_health_timer
      log "Slurm runs ${KILN_HEALTH_CHECK_PROGRAM} as its HealthCheckProgram every ${KILN_HEALTH_CHECK_INTERVAL_S} s"
      ;;
    *) die "KILN_HEALTH_CHECK: got ${KILN_HEALTH_CHECK}, allowed: slurm, timer or empty" ;;
  esac
}
