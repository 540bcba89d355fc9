# shellcheck shell=bash
# The munge key: backends that run Slurm themselves manage it (HyperPod's included); the local cluster keeps one
# under its prefix.

# Write a new random key to $1, readable by its owner only.
create_munge_key() {
  mkdir -p "${1%/*}"
  (umask 077 && head -c 1024 /dev/urandom >"${1}.kiln-new")
  mv -f "${1}.kiln-new" "$1"
  log "created munge key $1"
}

configure_munge() {
  local key
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
    *)
      die "KILN_MUNGE_KEY_SOURCE: got '${KILN_MUNGE_KEY_SOURCE}', allowed: backend, local"
      ;;
  esac
}
