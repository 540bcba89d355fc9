# shellcheck shell=bash
# Huge pages and fork: EFA may use 2 MiB huge pages for its buffers, but where DataLoader
# workers fail fork() with ENOMEM the bundle turns that off (FI_EFA_USE_HUGE_PAGE=0 in the
# NCCL profile), and then reserving huge pages would only waste memory.

configure_kernel() {
  local file
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
