# shellcheck shell=bash
# Mount FSx for Lustre and prove it takes writes: a new file system can mount before it
# accepts writes, so mount and probe are retried together.

fsx_write_probe() {
  local probe
  probe="$(root_path "$KILN_MOUNT_POINT")/.kiln-probe-$(hostname)"
  printf 'kiln\n' >"$probe" && rm -f "$probe"
}

fsx_mount_and_probe() {
  local mount_point
  mount_point="$(root_path "$KILN_MOUNT_POINT")"
  if ! mountpoint -q "$mount_point"; then
    mount -t lustre -o relatime,flock "${KILN_FSX_DNS}@tcp:/${KILN_FSX_MOUNT_NAME}" "$mount_point" || return 1
  fi
  fsx_write_probe
}

configure_fsx() {
  local mount_point
  if [[ "${KILN_LUSTRE:-0}" != 1 ]]; then
    skip "the cluster has no FSx for Lustre"
    return 0
  fi
  mount_point="$(root_path "$KILN_MOUNT_POINT")"
  ensure_dir "$mount_point"
  # _netdev and nofail: a late network or file system must not stop the node from booting.
  ensure_line "$(root_path /etc/fstab)" \
    "${KILN_FSX_DNS}@tcp:/${KILN_FSX_MOUNT_NAME} ${KILN_MOUNT_POINT} lustre defaults,relatime,flock,_netdev,nofail 0 0"
  if mountpoint -q "$mount_point" && fsx_write_probe; then
    skip "${KILN_MOUNT_POINT} is mounted and writable"
    return 0
  fi
  retry "$KILN_RETRY_ATTEMPTS" fsx_mount_and_probe ||
    die "FSx ${KILN_FSX_DNS}@tcp:/${KILN_FSX_MOUNT_NAME} did not mount writable at ${KILN_MOUNT_POINT}"
  log "mounted ${KILN_MOUNT_POINT}"
}
