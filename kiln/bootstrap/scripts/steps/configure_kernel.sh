# shellcheck shell=bash
# Huge pages, fork and locked memory. EFA may use 2 MiB huge pages for its buffers, but where DataLoader
# workers fail fork() with ENOMEM the bundle turns that off (FI_EFA_USE_HUGE_PAGE=0 in the
# NCCL profile), and then reserving huge pages would only waste memory.
# EFA (Neuron's collectives too) pins the memory it registers, which counts against the locked-memory
# limit: kiln lifts it where jobs get their limits (platforms.json, efa.locked_memory), with files of
# its own, never by editing the platform's.

# True when a limits file other than $1 already lifts the locked-memory limit, soft and hard, for every user.
memlock_lifted_elsewhere() {
  local own="$1" file who kind item value soft=0 hard=0
  for file in "$(root_path /etc/security/limits.conf)" "$(root_path /etc/security/limits.d)"/*.conf; do
    [[ -f "$file" && "$file" != "$own" ]] || continue
    while read -r who kind item value _; do
      [[ "$who" == "*" && "$item" == memlock ]] || continue
      [[ "$value" == unlimited || "$value" == infinity || "$value" == -1 ]] || continue
      case "$kind" in
        soft) soft=1 ;;
        hard) hard=1 ;;
        -) soft=1 hard=1 ;;
      esac
    done <"$file"
  done
  ((soft == 1 && hard == 1))
}

# Slurm gives a job the limits of the shell that submitted it (a login node's too): lift them for every session.
lift_session_memlock() {
  local file
  file="$(root_path /etc/security/limits.d/99-kiln-memlock.conf)"
  if memlock_lifted_elsewhere "$file"; then
    skip "the image's limits already lift locked memory for every user: kiln adds none"
    return 0
  fi
  write_file "$file" <<'LIMITS'
# kiln: EFA pins the memory it registers; Slurm jobs get the limits of the shell that submitted them.
* soft memlock unlimited
* hard memlock unlimited
LIMITS
  ((KILN_CHANGED == 1)) || skip "locked memory already unlimited for login sessions"
}

# Pods get the limits of containerd, which creates their containers: lift containerd's on EFA nodes.
lift_container_memlock() {
  local file
  if ((KILN_EFA_COUNT == 0)); then
    skip "${KILN_INSTANCE_TYPE} has no EFA interfaces: containerd's locked-memory limit stays"
    return 0
  fi
  file="$(root_path /etc/systemd/system/containerd.service.d/99-kiln-memlock.conf)"
  if [[ ! -f "$file" && "$(systemctl show --property=LimitMEMLOCK --value containerd 2>/dev/null)" == infinity ]]; then
    skip "containerd already runs with unlimited locked memory: kiln adds none"
    return 0
  fi
  write_file "$file" <<'UNIT'
# kiln: EFA pins the memory it registers; pods get containerd's limits.
[Service]
LimitMEMLOCK=infinity
UNIT
  if ((KILN_CHANGED == 1)); then
    systemctl daemon-reload
    restart_if_active containerd
  else
    skip "containerd's locked memory already unlimited"
  fi
}

configure_kernel() {
  local file
  case "${KILN_MEMLOCK_SCOPE:-}" in
    sessions) lift_session_memlock ;;
    containers) lift_container_memlock ;;
    *) skip "no EFA in this cluster: the locked-memory limit stays as the image sets it" ;;
  esac
  file="$(root_path /etc/sysctl.d/90-kiln.conf)"
  if [[ "${KILN_FORK_ENOMEM:-0}" == 1 ]]; then
    if [[ -f "$file" ]]; then
      rm -f "$file"
      log "removed ${file}: fork-safe mode reserves no huge pages"
    fi
    skip "fork-safe mode: EFA does not use huge pages, none reserved"
    return 0
  fi
  if [[ -z "${KILN_HUGEPAGES_2M:-}" ]] || ((KILN_EFA_COUNT == 0)); then
    skip "no huge page reservation asked for this node"
    return 0
  fi
  write_file "$file" < <(printf 'vm.nr_hugepages = %s\n' "$KILN_HUGEPAGES_2M")
  if ((KILN_CHANGED == 1)); then
    sysctl -p "$file"
  else
    skip "huge pages already set to ${KILN_HUGEPAGES_2M}"
  fi
}
