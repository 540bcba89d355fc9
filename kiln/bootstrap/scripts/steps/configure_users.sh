# shellcheck shell=bash
# Cluster users with the same uid/gid on every node, so files on the shared file system
# belong to the same person everywhere.

configure_users() {
  local entry name uid gid shell have
  local -a where=()
  if [[ -z "${KILN_USERS:-}" ]]; then
    skip "no cluster users in this bundle"
    return 0
  fi
  if [[ "${KILN_ROOT%/}" != "" ]]; then
    where=(--prefix "$KILN_ROOT")
  fi
  for entry in $KILN_USERS; do
    IFS=: read -r name uid gid shell <<<"$entry"
    have="$(awk -F: -v n="$name" '$1 == n {print $3}' "$(root_path /etc/group)")"
    if [[ -z "$have" ]]; then
      groupadd "${where[@]}" --gid "$gid" "$name"
    elif [[ "$have" != "$gid" ]]; then
      die "group ${name} exists with gid ${have}, the cluster needs ${gid}"
    fi
    have="$(awk -F: -v n="$name" '$1 == n {print $3}' "$(root_path /etc/passwd)")"
    if [[ -z "$have" ]]; then
      useradd "${where[@]}" --uid "$uid" --gid "$gid" --shell "$shell" --create-home "$name"
    elif [[ "$have" != "$uid" ]]; then
      die "user ${name} exists with uid ${have}, the cluster needs ${uid}"
    fi
  done
}
