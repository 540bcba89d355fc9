# shellcheck shell=bash
# The munge key: backends that run Slurm themselves manage it; the local cluster keeps one
# under its prefix; HyperPod nodes share the controller's through the shared file system.

# Write a new random key to $1, readable by its owner only.
create_munge_key() {
  mkdir -p "${1%/*}"
  (umask 077 && head -c 1024 /dev/urandom >"${1}.kiln-new")
  mv -f "${1}.kiln-new" "$1"
  log "created munge key $1"
}

configure_munge() {
  local key shared deadline
  key="$(root_path /etc/munge/munge.key)"
  case "${KILN_MUNGE_KEY_SOURCE:-backend}" in
    backend)
      skip "the ${KILN_TARGET} backend manages munge"
      ;;
    local)
      ensure_dir "$(root_path /etc/munge)" 0700
      ensure_dir "$(root_path /var/lib/munge)" 0711
      ensure_dir "$(root_path /var/log/munge)" 0700
      ensure_dir "$(root_path /run/munge)" 0755
      if [[ -s "$key" ]]; then
        skip "munge key ${key} exists"
      else
        create_munge_key "$key"
      fi
      ;;
    shared)
      shared="$(root_path "${KILN_SHARED_DIR:-${KILN_MOUNT_POINT:-}}")/.kiln/munge.key"
      if [[ "$KILN_NODE_ROLE" == controller && ! -s "$shared" ]]; then
        create_munge_key "$shared"
      fi
      deadline=$((SECONDS + KILN_LOCK_TIMEOUT_SECONDS))
      until [[ -s "$shared" ]]; do
        ((SECONDS < deadline)) || die "no munge key appeared at ${shared}: is the controller up?"
        log "waiting for the controller's munge key at ${shared}"
        sleep "$KILN_LOCK_POLL_SECONDS"
      done
      if [[ -s "$key" ]] && cmp -s "$shared" "$key"; then
        skip "munge key matches the controller's"
        return 0
      fi
      install -D -m 0400 "$shared" "$key"
      chown munge:munge "$key"
      systemctl restart munge
      ;;
    *)
      die "KILN_MUNGE_KEY_SOURCE: got '${KILN_MUNGE_KEY_SOURCE}', allowed: backend, local, shared"
      ;;
  esac
}
