# shellcheck shell=bash
# code-server on the node it runs on, as KILN_CODE_SERVER_USER (never root, a sudoer, a member of a group that is
# root by another name, or an account without a home and login shell on a cluster: its terminal is that user): that user's
# ~/.config/code-server/config.yaml is written once, by the user's own process (a symlink in a home leads nowhere the
# user could not write), with a random password, and never rewritten; then a systemd unit runs code-server as the user
# on 127.0.0.1:8080 only, the address forced on the command line as well, so an edit of the file cannot widen it. On
# the local target the config goes under the cluster's prefix and `kiln local up` starts code-server itself.

# Whether the node's own account databases answer (directory users included): on the node itself, or on the local
# cluster (whose user is this machine's); else KILN_ROOT moves the node and its files are read.
code_server_real_node() {
  [[ "${KILN_ROOT%/}" == "" || "$KILN_TARGET" == local ]]
}

# Print "uid:gid:home:shell" of user $1 from the node's account database.
code_server_account() {
  local entry
  if code_server_real_node; then
    entry="$(getent passwd "$1")" || return 1
  else
    entry="$(awk -F: -v n="$1" '$1 == n' "$(root_path /etc/passwd)")"
    [[ -n "$entry" ]] || return 1
  fi
  awk -F: '{print $3 ":" $4 ":" $6 ":" $7}' <<<"$entry"
}

# Print the groups of user $1 (primary gid $2), one a line: its primary group and every group that lists it.
code_server_groups() {
  if code_server_real_node; then
    id -nG "$1" | tr ' ' '\n'
  else
    awk -F: -v u="$1" -v g="$2" '$3 == g || ("," $4 ",") ~ ("," u ",") {print $1}' "$(root_path /etc/group)"
  fi
}

# Print the first sudoers rule that grants user $1 (in groups $2...) anything: a line of /etc/sudoers or a file in
# /etc/sudoers.d whose user field is the user, one of its %groups, or ALL; nothing when none does.
code_server_sudoers_grant() {
  local user="$1" groups file rule
  shift
  groups="$*"
  for file in "$(root_path /etc/sudoers)" "$(root_path /etc/sudoers.d)"/*; do
    [[ -f "$file" ]] || continue
    rule="$(awk -v u="$user" -v groups="$groups" '
      BEGIN { n = split(groups, list, " "); for (i = 1; i <= n; i++) member["%" list[i]] = 1 }
      /^[[:space:]]*(#|$)/ || $1 ~ /^(Defaults|User_Alias|Runas_Alias|Host_Alias|Cmnd_Alias|@include)/ { next }
      $1 == u || $1 == "ALL" || ($1 in member) { print; exit }
    ' "$file")"
    if [[ -n "$rule" ]]; then
      printf '%s: %s\n' "${file#"${KILN_ROOT%/}"}" "$rule"
      return 0
    fi
  done
}

# Stop unless user $1 (primary gid $2, login shell $3) is one code-server may run as on a cluster: a login shell, in
# no group that is root by another name (KILN_CODE_SERVER_ROOT_GROUPS), granted nothing by sudoers, and on the node
# itself nothing by `sudo -l` either (which also reads the rules of a directory).
code_server_check_user() {
  local user="$1" gid="$2" shell="$3" group grant listed
  local -a groups
  case "${shell##*/}" in
    "" | nologin | false | sync | shutdown | halt)
      die "code_server.user ${user} has no login shell (${shell:-none}): code-server's terminal runs it; name a user with one"
      ;;
  esac
  mapfile -t groups < <(code_server_groups "$user" "$gid")
  for group in $KILN_CODE_SERVER_ROOT_GROUPS; do
    if [[ " ${groups[*]} " == *" ${group} "* ]]; then
      die "code_server.user ${user} is in group ${group}, which can become root: code-server's terminal would be root; name a user outside ${KILN_CODE_SERVER_ROOT_GROUPS// /, }"
    fi
  done
  grant="$(code_server_sudoers_grant "$user" "${groups[@]}")"
  if [[ -n "$grant" ]]; then
    die "code_server.user ${user} may use sudo (${grant}): code-server's terminal would be root; name a user without sudo"
  fi
  if [[ "${KILN_ROOT%/}" == "" ]] && command -v sudo >/dev/null; then
    listed="$(LC_ALL=C sudo -n -l -U "$user" 2>/dev/null || true)"
  fi
  if [[ "${listed:-}" == *"may run the following commands"* ]]; then
    die "code_server.user ${user} may use sudo (sudo -l -U ${user}): code-server's terminal would be root; name a user without sudo"
  fi
}

# Run command $3... as uid $1 and gid $2 with that user's groups: what it writes, the user could have written.
as_code_server_user() {
  local uid="$1" gid="$2"
  shift 2
  setpriv --reuid="$uid" --regid="$gid" --init-groups -- "$@"
}

# Write config file $1 unless it exists (as a file, a directory or a symlink): code-server's bind address, password
# authentication with a random password, no TLS (the session is forwarded over Session Manager). Runs as the user.
write_code_server_config() {
  # shellcheck disable=SC2016 # expanded by the user's shell
  as_code_server_user "$2" "$3" bash -c '
    set -euo pipefail
    umask 077
    config="$1" bind="$2"
    if [[ -e "$config" || -L "$config" ]]; then
      exit 3
    fi
    mkdir -p "${config%/*}"
    password="$(od -An -v -tx1 -N20 /dev/urandom | tr -d " \n")"
    staged="$(mktemp "${config}.XXXXXX")"
    printf "bind-addr: %s\nauth: password\npassword: %s\ncert: false\n" "$bind" "$password" >"$staged"
    mv -f "$staged" "$config"
  ' code-server-config "$1" "$KILN_CODE_SERVER_BIND"
}

# Print the systemd unit that runs code-server as user $1 (with the user's own group), in the user's home.
code_server_unit() {
  cat <<UNIT
[Unit]
Description=kiln: code-server (VS Code in a browser) for $1 on ${KILN_CODE_SERVER_BIND}
After=network-online.target
Wants=network-online.target

[Service]
User=$1
WorkingDirectory=~
ExecStart=${KILN_CODE_SERVER_PREFIX}/node/bin/node ${KILN_CODE_SERVER_PREFIX}/lib/node_modules/code-server/out/node/entry.js --bind-addr ${KILN_CODE_SERVER_BIND} --disable-telemetry --disable-update-check
Restart=always
RestartSec=5
NoNewPrivileges=yes
PrivateTmp=yes
ProtectSystem=full
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
LockPersonality=yes

[Install]
WantedBy=multi-user.target
UNIT
}

configure_code_server() {
  local user="${KILN_CODE_SERVER_USER:-}" uid gid home shell config unit=kiln-code-server.service status=0
  if [[ -z "${KILN_CODE_SERVER_ROLE:-}" ]]; then
    skip "code-server is off: the spec has no code_server section"
    return 0
  fi
  if [[ "$KILN_NODE_ROLE" != "$KILN_CODE_SERVER_ROLE" ]]; then
    skip "code-server runs on the ${KILN_CODE_SERVER_ROLE} node, this is a ${KILN_NODE_ROLE}"
    return 0
  fi
  IFS=: read -r uid gid home shell < <(code_server_account "$user") ||
    die "code_server.user ${user} does not exist on this node: create it (a user step, or the image), or set code_server.user to one that does"
  if ((uid == 0)) && [[ "$KILN_TARGET" != local ]]; then
    die "code_server.user ${user} has uid 0: code-server never runs as root on a cluster"
  fi
  if [[ "$KILN_TARGET" != local ]]; then
    code_server_check_user "$user" "$gid" "$shell"
  fi
  if [[ "$KILN_TARGET" == local ]]; then
    # The local cluster keeps everything under its prefix: a home of the user's own there, never the real one.
    home="$(root_path "/home/${user}")"
    ensure_dir "$home" 0700
    chown "${uid}:${gid}" "$home"
  else
    [[ -d "$(root_path "$home")" ]] || die "code_server.user ${user}'s home ${home} does not exist on this node"
    home="$(root_path "$home")"
  fi
  config="${home}/${KILN_CODE_SERVER_CONFIG}"
  write_code_server_config "$config" "$uid" "$gid" || status=$?
  case "$status" in
    0) log "wrote ${config} for ${user} (mode 0600): its password opens code-server" ;;
    3) skip "${config} exists: the user's own, kept as it is" ;;
    *) die "could not write ${config} as ${user}" ;;
  esac
  if [[ "$KILN_CODE_SERVER_DAEMONS" == none ]]; then
    skip "the local cluster starts code-server itself (kiln local up)"
    return 0
  fi
  write_file "$(root_path "/etc/systemd/system/${unit}")" 0644 < <(code_server_unit "$user")
  activate_unit "$unit" "$KILN_CHANGED"
}
