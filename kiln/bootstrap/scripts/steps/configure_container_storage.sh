# shellcheck shell=bash
# Container storage (enroot, docker, containerd) on local NVMe or a given volume, never on
# the root disk: images and container layers filling the root volume kill the node. What the image keeps in the
# directories moved there comes along.

# Print the instance-store NVMe devices, one a line (namespace aliases _1, _2 left out).
instance_store_devices() {
  local link
  for link in "$(root_path /dev/disk/by-id)"/nvme-Amazon_EC2_NVMe_Instance_Storage_*; do
    [[ -e "$link" ]] || continue
    case "$link" in
      *-part* | *_[0-9]) continue ;;
    esac
    readlink -f "$link"
  done
}

# Put a file system on device $1 unless it has one, and mount it on the scratch directory.
mount_scratch_device() {
  local device="$1" scratch
  scratch="$(root_path "$KILN_SCRATCH_DIR")"
  if [[ -z "$(blkid -o value -s TYPE "$device" || true)" ]]; then
    log "creating a file system on ${device}"
    mkfs.ext4 -q -F -L kiln-scratch -m 0 -E nodiscard "$device"
  fi
  ensure_dir "$scratch"
  # Instance store is blank after a stop/start: nofail lets the node boot, and this step re-creates it.
  ensure_line "$(root_path /etc/fstab)" "LABEL=kiln-scratch ${KILN_SCRATCH_DIR} ext4 defaults,noatime,nofail 0 2"
  mount -o defaults,noatime "$device" "$scratch"
}

# Where the image mounts local NVMe or the node's data volume itself (HyperPod: /opt/dlami/nvme, then
# /opt/sagemaker), set KILN_SCRATCH_DIR to the first that is mounted. With instance store on the node, wait for the
# image's service to mount it: kiln never builds an array over disks the platform claims. Return 1 when the image
# mounts none of them and the node has no instance store.
use_platform_scratch() {
  local dir deadline
  deadline=$((SECONDS + KILN_PLATFORM_SCRATCH_TIMEOUT_SECONDS))
  while :; do
    for dir in $KILN_PLATFORM_SCRATCH_DIRS; do
      if mountpoint -q "$(root_path "$dir")"; then
        log "container storage on ${dir}, mounted by the image"
        KILN_SCRATCH_DIR="$dir"
        return 0
      fi
    done
    if [[ -z "$(instance_store_devices)" ]]; then
      return 1
    fi
    ((SECONDS < deadline)) || die "the image has not mounted this node's instance-store NVMe on any of ${KILN_PLATFORM_SCRATCH_DIRS} after ${KILN_PLATFORM_SCRATCH_TIMEOUT_SECONDS}s, and kiln builds no array over disks the image claims"
    log "waiting for the image to mount local NVMe on ${KILN_PLATFORM_SCRATCH_DIRS}"
    sleep "$KILN_LOCK_POLL_SECONDS"
  done
}

# Make the scratch directory a mount of local NVMe (RAID 0 over several) or of KILN_CONTAINER_VOLUME, or take the
# image's own mount of them; KILN_SCRATCH_READY tells whether there was anything to put it on.
prepare_scratch() {
  local scratch array
  local -a devices=()
  scratch="$(root_path "$KILN_SCRATCH_DIR")"
  KILN_SCRATCH_READY=1
  if mountpoint -q "$scratch"; then
    log "${KILN_SCRATCH_DIR} is already a mount"
    return 0
  fi
  if [[ -n "${KILN_PLATFORM_SCRATCH_DIRS:-}" ]]; then
    use_platform_scratch || KILN_SCRATCH_READY=0
    return 0
  fi
  mapfile -t devices < <(instance_store_devices)
  if ((${#devices[@]} > 1)); then
    array="$(root_path /dev/md/kiln-scratch)"
    if [[ ! -e "$array" ]]; then
      log "striping ${#devices[@]} NVMe devices into ${array}"
      mdadm --create "$array" --run --level=0 --raid-devices="${#devices[@]}" "${devices[@]}"
    fi
    mount_scratch_device "$array"
  elif ((${#devices[@]} == 1)); then
    mount_scratch_device "${devices[0]}"
  elif [[ -n "${KILN_CONTAINER_VOLUME:-}" ]]; then
    if [[ -b "$(root_path "$KILN_CONTAINER_VOLUME")" ]]; then
      mount_scratch_device "$(root_path "$KILN_CONTAINER_VOLUME")"
    elif mountpoint -q "$(root_path "$KILN_CONTAINER_VOLUME")"; then
      KILN_SCRATCH_DIR="$KILN_CONTAINER_VOLUME"
    else
      die "KILN_CONTAINER_VOLUME=${KILN_CONTAINER_VOLUME} is neither a block device nor a mount point"
    fi
  else
    KILN_SCRATCH_READY=0
  fi
}

# Succeed when directory $1 holds anything.
dir_has_files() {
  [[ -d "$1" && -n "$(find "$1" -mindepth 1 -maxdepth 1 -print -quit)" ]]
}

# Give scratch directory $1 what the image keeps in directory $2 before $2 is bound to it, so the bind hides
# nothing: the EKS AMI caches the pod sandbox image in containerd's store at build time, and nothing can pull it
# (platforms.json, eks-al2023 sandbox_image). cp -a, as AWS's own local-disk setup copies these directories, keeps
# ownership, modes, links, times, extended attributes and SELinux labels. The copy lands beside $1 and is renamed
# into place whole, then a marker beside it records that $1 is the image's copy: a rerun never copies again, a copy
# cut short is started over, and files some other tool left in $1 are neither hidden nor mixed with the image's.
copy_to_scratch() {
  local source target staging copied
  source="$(root_path "${KILN_SCRATCH_DIR}/$1")"
  target="$(root_path "$2")"
  copied="$(root_path "${KILN_SCRATCH_DIR}/.kiln-copied-$1")"
  if [[ -e "$copied" ]]; then
    return 0
  fi
  if dir_has_files "$target"; then
    if dir_has_files "$source"; then
      die "${KILN_SCRATCH_DIR}/$1 already holds files, and $2 holds the image's: kiln neither hides these behind the bind nor mixes the two stores; empty ${KILN_SCRATCH_DIR}/$1 and run the step again"
    fi
    staging="${source}.kiln-copy"
    rm -rf "$staging"
    log "copying $2 onto ${KILN_SCRATCH_DIR}/$1 before binding it over $2"
    cp -a "$target" "$staging"
    if [[ -d "$source" ]]; then
      rmdir "$source"
    fi
    mv "$staging" "$source"
  else
    ensure_dir "$source" 0711
  fi
  : >"$copied"
}

# Stop unless the pod sandbox image the image caches (KILN_IMAGE_SANDBOX_STORE, containerd's metadata) is where
# containerd reads it, now that its store is on scratch: without it no pod starts and the node never becomes Ready.
check_sandbox_image() {
  if [[ -n "${KILN_IMAGE_SANDBOX_STORE:-}" && ! -e "$(root_path "$KILN_IMAGE_SANDBOX_STORE")" ]]; then
    die "no ${KILN_IMAGE_SANDBOX_STORE} after moving containerd's store to ${KILN_SCRATCH_DIR}: the ${KILN_IMAGE_TITLE} caches the pod sandbox image ${KILN_IMAGE_SANDBOX_IMAGE} there, which cannot be pulled, so no pod would start"
  fi
}

# Bind-mount scratch subdirectory $1 over $2 with what the image keeps in $2, stopping unit $3 around it if it runs.
bind_scratch() {
  local source target was_active=0
  source="$(root_path "${KILN_SCRATCH_DIR}/$1")"
  target="$(root_path "$2")"
  ensure_line "$(root_path /etc/fstab)" "${KILN_SCRATCH_DIR}/$1 $2 none bind,nofail 0 0"
  if mountpoint -q "$target"; then
    return 0
  fi
  # Stopped before the copy: a running daemon would change its store under it.
  if service_active "$3"; then
    was_active=1
    systemctl stop "$3"
  fi
  copy_to_scratch "$1" "$2"
  ensure_dir "$target" 0711
  mount --bind "$source" "$target"
  if ((was_active == 1)); then
    systemctl start "$3"
  fi
}

configure_container_storage() {
  if [[ "${KILN_CONTAINERS:-0}" != 1 ]]; then
    skip "containers are off for this cluster"
    return 0
  fi
  prepare_scratch
  if ((KILN_SCRATCH_READY == 0)); then
    if [[ "$KILN_NODE_ROLE" == worker ]]; then
      die "no instance-store NVMe on ${KILN_INSTANCE_TYPE} and no KILN_CONTAINER_VOLUME in cluster.env: refusing to put container storage on the root disk"
    fi
    skip "no NVMe or volume for containers on this ${KILN_NODE_ROLE} node: containers stay off here"
    return 0
  fi
  if [[ "$KILN_CONTAINER_RUNTIME" == docker ]]; then
    bind_scratch docker /var/lib/docker docker
  fi
  bind_scratch containerd /var/lib/containerd containerd
  check_sandbox_image
  # kiln-launch's training-container images (kiln.launcher.container): one directory per user below this one, each
  # the user's own (the launcher refuses any other), on the same local disk as enroot's storage.
  ensure_dir "$(root_path "${KILN_SCRATCH_DIR}/kiln-containers")" 1777
  write_file "$(root_path /etc/kiln/container-cache)" <<<"${KILN_SCRATCH_DIR}/kiln-containers"
  if [[ -n "${KILN_ENROOT_VERSION:-}" ]]; then
    ensure_dir "$(root_path "${KILN_SCRATCH_DIR}/enroot")" 0755
    ensure_dir "$(root_path "${KILN_SCRATCH_DIR}/enroot/cache")" 1777
    ensure_dir "$(root_path "${KILN_SCRATCH_DIR}/enroot/data")" 1777
    ensure_dir "$(root_path "${KILN_SCRATCH_DIR}/enroot/tmp")" 1777
    # enroot expands $(id -u) itself, per user, when it reads this file.
    # shellcheck disable=SC2016
    write_file "$(root_path /etc/enroot/enroot.conf)" < <(
      printf '%s\n' \
        "ENROOT_RUNTIME_PATH ${KILN_SCRATCH_DIR}/enroot/data/runtime-"'$(id -u)' \
        "ENROOT_CACHE_PATH ${KILN_SCRATCH_DIR}/enroot/cache/user-"'$(id -u)' \
        "ENROOT_DATA_PATH ${KILN_SCRATCH_DIR}/enroot/data/user-"'$(id -u)' \
        "ENROOT_TEMP_PATH ${KILN_SCRATCH_DIR}/enroot/tmp"
    )
  fi
}
