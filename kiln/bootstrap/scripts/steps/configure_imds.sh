# shellcheck shell=bash
# Only root and kiln's own services reach EC2's instance metadata service, and with it the node role's credentials:
# cluster users, their jobs and enroot's containers (which keep the host's network) are refused. These are the allow
# rules of iptables' owner match that AWS suggests for instances several users share
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-limiting-access.html). They live in kiln's
# own chain, reached from OUTPUT by one rule carrying kiln's comment: no other rule of the firewall is touched.
# iptables rules do not survive a reboot, so a unit runs this step again at every boot, before anyone may log in.

IMDS_ADDRESS=169.254.169.254
IMDS_CHAIN=KILN-IMDS
IMDS_COMMENT=kiln-imds-guard
IMDS_UNIT=kiln-imds-guard.service
# configure_exporters runs the Prometheus agent and its node list as this user; the agent signs its remote writes
# with the node role's credentials.
IMDS_AGENT_USER=kiln-prometheus
IMDS_AGENT_UNITS="kiln-prometheus-agent.service kiln-metrics-targets.service"

# Print, one word a line, the OUTPUT rule that sends IMDS traffic through kiln's chain (as iptables -S lists it).
imds_jump() {
  printf '%s\n' -d "${IMDS_ADDRESS}/32" -p tcp -m comment --comment "$IMDS_COMMENT" -j "$IMDS_CHAIN"
}

# Print the rules of kiln's chain for the allowed uids $@, one a line: each of them returns to OUTPUT, and every
# other user's connection is refused.
imds_chain_rules() {
  local uid
  for uid in "$@"; do
    printf -- '-m owner --uid-owner %s -j RETURN\n' "$uid"
  done
  printf -- '-j REJECT\n'
}

# Print the rules of chain $1, as iptables -S lists them.
imds_listed() {
  iptables -w -S "$1" | grep -- "^-A $1 " || true
}

# True when kiln's chain holds exactly the rules $@ (lines of imds_chain_rules), the refusal last.
imds_chain_current() {
  local rule
  local -a listed words
  mapfile -t listed < <(imds_listed "$IMDS_CHAIN")
  ((${#listed[@]} == $#)) || return 1
  [[ "${listed[-1]}" == *" -j REJECT"* ]] || return 1
  for rule in "$@"; do
    read -ra words <<<"$rule"
    iptables -w -C "$IMDS_CHAIN" "${words[@]}" 2>/dev/null || return 1
  done
}

# Make kiln's chain hold exactly the rules for the uids $@, and OUTPUT send IMDS traffic through it once, first.
imds_guard_apply() {
  local rule line
  local -a rules words jump ours
  mapfile -t rules < <(imds_chain_rules "$@")
  mapfile -t jump < <(imds_jump)
  if ! iptables -w -n -L "$IMDS_CHAIN" >/dev/null 2>&1; then
    iptables -w -N "$IMDS_CHAIN"
  fi
  if imds_chain_current "${rules[@]}"; then
    skip "${IMDS_CHAIN} already lets only uids $* reach IMDS"
  else
    iptables -w -F "$IMDS_CHAIN"
    for rule in "${rules[@]}"; do
      read -ra words <<<"$rule"
      iptables -w -A "$IMDS_CHAIN" "${words[@]}"
    done
    log "${IMDS_CHAIN}: IMDS (${IMDS_ADDRESS}) for uids $* only; every other user is refused"
  fi
  mapfile -t ours < <(imds_listed OUTPUT | grep -F -- "--comment ${IMDS_COMMENT} " || true)
  if ((${#ours[@]} == 1)) && iptables -w -C OUTPUT "${jump[@]}" 2>/dev/null; then
    return 0
  fi
  # Exactly one, ours: every OUTPUT rule with kiln's comment goes (an earlier kiln's too), then one goes first.
  for line in "${ours[@]}"; do
    read -ra words <<<"${line#-A OUTPUT }"
    iptables -w -D OUTPUT "${words[@]}"
  done
  iptables -w -I OUTPUT 1 "${jump[@]}"
  log "OUTPUT sends ${IMDS_ADDRESS} through ${IMDS_CHAIN}"
}

# True on the node that runs the Prometheus agent (configure_exporters decides it the same way).
imds_agent_here() {
  [[ "${KILN_PROMETHEUS_AGENT:-0}" == 1 && "$KILN_NODE_ROLE" == "${KILN_SLURM_EXPORTER_ROLE:-}" ]]
}

# Print the uid of user $1 in the node's passwd file, or nothing.
imds_uid() {
  awk -F: -v name="$1" '$1 == name {print $3}' "$(root_path /etc/passwd)"
}

# Give the Prometheus agent a fixed system user: systemd runs a DynamicUser= unit as the static user of its name when
# one exists, and a firewall rule can only name a uid that lasts.
imds_agent_user() {
  local unit
  local -a where=()
  if [[ -n "$(imds_uid "$IMDS_AGENT_USER")" ]]; then
    return 0
  fi
  if [[ "${KILN_ROOT%/}" != "" ]]; then
    where=(--prefix "$KILN_ROOT")
  fi
  useradd "${where[@]}" --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    "$IMDS_AGENT_USER"
  [[ -n "$(imds_uid "$IMDS_AGENT_USER")" ]] || die "useradd did not create the system user ${IMDS_AGENT_USER}"
  log "created the system user ${IMDS_AGENT_USER} for the Prometheus agent"
  for unit in $IMDS_AGENT_UNITS; do
    # A unit already running under a dynamic uid takes the fixed one when it restarts.
    restart_if_active "$unit"
  done
}

# Stop unless iptables is on the node. A configure step installs nothing (a baked image's boot may not fetch), and a
# node whose users could take the node role is not left running as if it were guarded.
imds_firewall_tool() {
  if ! command -v iptables >/dev/null 2>&1; then
    die "iptables is not on this node, and configure_imds keeps cluster users off IMDS with it; boot an image that has it (the package is iptables on Ubuntu, iptables-nft on Amazon Linux 2023)"
  fi
}

# The unit that runs this step again at every boot, before the network and any login: the same rules, the same code,
# from the root-owned copy of the bundle (keep_boot_bundle).
imds_guard_unit() {
  cat <<UNIT
[Unit]
Description=kiln: only root and kiln's services reach the instance metadata service
Documentation=https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-limiting-access.html
DefaultDependencies=no
After=local-fs.target
Before=network-pre.target systemd-user-sessions.service shutdown.target
Wants=network-pre.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
Environment=KILN_NODE_ROLE=${KILN_NODE_ROLE} KILN_INSTANCE_TYPE=${KILN_INSTANCE_TYPE}
ExecStart=/bin/bash ${KILN_BOOT_BUNDLE}/kiln-step configure_imds

[Install]
WantedBy=multi-user.target
UNIT
}

configure_imds() {
  local -a uids=(0)
  if [[ " ${KILN_IMDS_GUARD_ROLES:-} " != *" ${KILN_NODE_ROLE} "* ]]; then
    skip "IMDS stays as the platform sets it on ${KILN_TARGET} ${KILN_NODE_ROLE} nodes (kiln restricts it on: ${KILN_IMDS_GUARD_ROLES:-none})"
    return 0
  fi
  imds_firewall_tool
  if imds_agent_here; then
    imds_agent_user
    uids+=("$(imds_uid "$IMDS_AGENT_USER")")
  fi
  keep_boot_bundle
  write_file "$(root_path "/etc/systemd/system/${IMDS_UNIT}")" < <(imds_guard_unit)
  if ((KILN_CHANGED == 1)); then
    systemctl daemon-reload
    systemctl enable "$IMDS_UNIT"
  fi
  imds_guard_apply "${uids[@]}"
}
