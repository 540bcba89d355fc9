# shellcheck shell=bash
# Mount FSx for Lustre and prove it takes writes: a new file system can mount before it
# accepts writes, so mount and probe are retried together. With an EFA-enabled file system,
# LNet first gets this node's EFA interfaces, as FSx's client guide describes, and again at every
# boot before the mount (kiln-lnet-efa.service); the mount itself stays @tcp and LNet carries the
# traffic over EFA.

LNET_EFA_UNIT=kiln-lnet-efa.service

# Print the EFA devices (names under /sys/class/infiniband) LNet takes: $1 of them spread evenly over the node's
# EFA devices (every fourth of a p5's 32 for 8, the first and last for 2), or all when there are no more.
lustre_efa_devices() {
  local want="$1" path index step
  local -a devices=()
  for path in "$(root_path /sys/class/infiniband)"/*; do
    if [[ -e "${path}/device/driver" && "$(basename "$(readlink -f "${path}/device/driver")")" == efa ]]; then
      devices+=("${path##*/}")
    fi
  done
  if ((${#devices[@]} == 0)); then
    return 0
  elif ((${#devices[@]} <= want)); then
    printf '%s\n' "${devices[@]}"
    return 0
  fi
  if ((want == 1)); then
    printf '%s\n' "${devices[0]}"
  elif ((want == 2)); then
    printf '%s\n' "${devices[0]}" "${devices[-1]}"
  else
    step=$((${#devices[@]} / want))
    for ((index = 0; index < want; index++)); do
      printf '%s\n' "${devices[index * step]}"
    done
  fi
}

# Print the interface of the default route: LNet's TCP network and kefalnd's ipif_name.
primary_interface() {
  local word previous=""
  for word in $(ip -o -4 route show default); do
    if [[ "$previous" == dev ]]; then
      printf '%s\n' "$word"
      return 0
    fi
    previous="$word"
  done
}

# The unit that gives LNet this node's EFA interfaces again at every boot (LNet forgets them), before any remote
# mount: FSx's client guide has its setup create such a service. Ordered before remote-fs-pre.target, which systemd
# orders every remote mount (the fstab line's _netdev) after (systemd.special(7),
# https://www.freedesktop.org/software/systemd/man/latest/systemd.special.html); it runs this step with
# KILN_FSX_LNET_ONLY=1: the same code, and no mount of its own.
lnet_efa_unit() {
  cat <<UNIT
[Unit]
Description=kiln: LNet over this node's EFA interfaces for FSx for Lustre, before the file system mounts
Documentation=https://docs.aws.amazon.com/fsx/latest/LustreGuide/configure-efa-clients.html
Wants=network-online.target remote-fs-pre.target
After=network-online.target
Before=remote-fs-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
Environment=KILN_NODE_ROLE=${KILN_NODE_ROLE} KILN_INSTANCE_TYPE=${KILN_INSTANCE_TYPE} KILN_FSX_LNET_ONLY=1
ExecStart=/bin/bash ${KILN_BOOT_BUNDLE}/kiln-step configure_fsx

[Install]
WantedBy=remote-fs.target
UNIT
}

# Write and enable the boot unit of LNet over EFA (lnet_efa_unit), with the bundle it runs.
install_lnet_efa_unit() {
  keep_boot_bundle
  write_file "$(root_path "/etc/systemd/system/${LNET_EFA_UNIT}")" < <(lnet_efa_unit)
  if ((KILN_CHANGED == 1)); then
    systemctl daemon-reload
    systemctl enable "$LNET_EFA_UNIT"
  fi
}

# Give LNet this node's EFA interfaces for an EFA-enabled file system (once per boot: LNet forgets them).
configure_lnet_efa() {
  local kernel eth device
  local -a devices
  if [[ "${KILN_LUSTRE_EFA:-0}" != 1 ]]; then
    return 0
  fi
  if ((KILN_LUSTRE_EFA_INTERFACES == 0)); then
    log "${KILN_INSTANCE_TYPE} takes no EFA for FSx for Lustre: mounting over TCP"
    return 0
  fi
  kernel="$(uname -r)"
  if [[ -n "${KILN_LUSTRE_EFA_MIN_KERNEL}" ]] && ! version_at_least "${kernel%%-*}" "$KILN_LUSTRE_EFA_MIN_KERNEL"; then
    die "FSx for Lustre over EFA needs kernel ${KILN_LUSTRE_EFA_MIN_KERNEL} or newer on ${KILN_OS} (this node runs ${kernel}): boot a newer image, or set storage.lustre.efa: false"
  fi
  if [[ "${KILN_FSX_LNET_ONLY:-0}" != 1 ]]; then
    install_lnet_efa_unit
  fi
  if lnetctl net show --net efa 2>/dev/null | grep -q 'net type: efa'; then
    skip "LNet already carries EFA interfaces"
    return 0
  fi
  mapfile -t devices < <(lustre_efa_devices "$KILN_LUSTRE_EFA_INTERFACES")
  ((${#devices[@]} > 0)) || die "no EFA devices under /sys/class/infiniband for LNet (${KILN_INSTANCE_TYPE} has ${KILN_EFA_COUNT} EFA interfaces)"
  eth="$(primary_interface)"
  [[ -n "$eth" ]] || die "no default route: LNet needs the primary interface for its TCP network"
  modprobe lnet
  modprobe kefalnd "ipif_name=${eth}"
  modprobe ksocklnd
  lnetctl lnet configure
  lnetctl net add --net tcp --if "$eth"
  for device in "${devices[@]}"; do
    lnetctl net add --net efa --if "$device" --peer-credits "$KILN_LUSTRE_EFA_PEER_CREDITS"
  done
  lnetctl set discovery "$KILN_LUSTRE_EFA_DISCOVERY"
  lnetctl udsp add --src efa --priority "$KILN_LUSTRE_EFA_UDSP_PRIORITY"
  modprobe lustre
  log "LNet over EFA: ${devices[*]} (tcp on ${eth})"
}

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
  configure_lnet_efa
  if [[ "${KILN_FSX_LNET_ONLY:-0}" == 1 ]]; then
    # The boot unit: LNet only; the fstab line mounts the file system after it.
    return 0
  fi
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
