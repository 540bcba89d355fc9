#!/usr/bin/env bash
# Stand-in for system commands in the bootstrap harness: records every call in $SHIM_LOG
# and keeps fake state (packages, mounts, active units) under $SHIM_STATE.
set -uo pipefail
name="$(basename "$0")"
printf '%s %s\n' "$name" "$*" >>"$SHIM_LOG"
state="$SHIM_STATE"
mkdir -p "$state/pkgs" "$state/mounts" "$state/active" "$state/fs"

# Decrement counter file $1; succeed while it was above zero.
take() {
  local count=0
  [[ -f "$1" ]] && count="$(cat "$1")"
  if ((count > 0)); then
    echo $((count - 1)) >"$1"
    return 0
  fi
  return 1
}

record_packages() {
  local arg base
  for arg in "$@"; do
    case "$arg" in
      -* | install | update | makecache) continue ;;
      *.deb)
        IFS=_ read -r base version _ <<<"$(basename "$arg")"
        echo "$version" >"$state/pkgs/$base" ;;
      *.rpm)
        base="$(basename "$arg" .rpm)" && base="${base%.*}"
        [[ "$base" =~ ^([^-]+(-[^0-9][^-]*)*)-([0-9].*)$ ]] && echo "${BASH_REMATCH[3]}" >"$state/pkgs/${BASH_REMATCH[1]}" ;;
      *=*) version="${arg#*=}" && echo "${version%"*"}" >"$state/pkgs/${arg%%=*}" ;;
      *)
        # dnf takes name-version: the name ends before the first dash followed by a digit.
        if [[ "$name" == dnf && "$arg" =~ ^([^-]+(-[^0-9][^-]*)*)-([0-9].*)$ ]]; then
          version="${BASH_REMATCH[3]}" && echo "${version%"*"}" >"$state/pkgs/${BASH_REMATCH[1]}"
        else
          echo 1.0 >"$state/pkgs/${arg}"
        fi ;;
    esac
  done
}

case "$name" in
  apt-get | dnf)
    [[ -f "$state/fail-packages" ]] && exit 100
    [[ " $* " == *" install "* ]] && record_packages "$@"
    exit 0 ;;
  dpkg-query)
    pkg="${*: -1}"
    [[ -f "$state/pkgs/$pkg" ]] || exit 1
    printf 'install ok installed %s' "$(cat "$state/pkgs/$pkg")" ;;
  rpm)
    pkg="${*: -1}"
    [[ -f "$state/pkgs/$pkg" ]] || exit 1
    cat "$state/pkgs/$pkg" ;;
  curl | wget)
    [[ " $* " == *" PUT "* ]] && exit 7
    [[ -f "$state/offline" ]] && exit 7
    take "$state/curl-failures" && exit 7
    dest="" url="${*: -1}"
    while (($# > 0)); do
      [[ "$1" == -o ]] && dest="$2"
      shift
    done
    [[ -f "$SHIM_PAYLOADS/${url##*/}" ]] || exit 22
    cp "$SHIM_PAYLOADS/${url##*/}" "$dest" ;;
  fuser)
    take "$state/locks-busy" && exit 0
    exit 1 ;;
  systemctl)
    if [[ "${1:-}" == is-active ]]; then
      [[ -f "$state/active/${*: -1}" ]]
      exit
    fi
    if [[ "${1:-}" == show ]]; then
      # systemctl show --property=NAME --value UNIT: what $state/units/UNIT/NAME holds (nothing: systemd's default).
      property="${2#--property=}"
      [[ ! -f "$state/units/${*: -1}/$property" ]] || cat "$state/units/${*: -1}/$property"
      exit 0
    fi
    if [[ "${1:-}" == enable && "${2:-}" == --now ]]; then
      touch "$state/active/$3"
    fi
    if [[ "${1:-}" == start || "${1:-}" == restart ]]; then
      touch "$state/active/$2"
    fi
    exit 0 ;;
  mount)
    target="${*: -1}"
    if [[ "${1:-}" == --bind ]]; then
      # A bind hides what the target held (kept under $state/hidden) and shows the source there: a link stands in.
      mkdir -p "$state/hidden"
      rm -rf "$state/hidden/${target//\//%}"
      [[ ! -e "$target" ]] || mv "$target" "$state/hidden/${target//\//%}"
      ln -s "$2" "$target"
    fi
    touch "$state/mounts/${target//\//%}" ;;
  mountpoint)
    target="${*: -1}"
    [[ -f "$state/mounts/${target//\//%}" ]] ;;
  blkid)
    dev="${*: -1}"
    [[ -f "$state/fs/$(basename "$dev")" ]] && echo ext4
    exit 0 ;;
  mkfs.ext4)
    touch "$state/fs/$(basename "${*: -1}")" ;;
  hostname)
    case "${1:-}" in
      -I) echo "${SHIM_ADDRESSES:-10.1.0.5} " ;;
      *) echo node1 ;;
    esac ;;
  groupadd | useradd)
    prefix="" uid="" gid="" home="" user="${*: -1}"
    while (($# > 0)); do
      case "$1" in
        --prefix) prefix="$2" ;;
        --uid) uid="$2" ;;
        --gid) gid="$2" ;;
        --create-home | -m) home=1 ;;
      esac
      shift
    done
    if [[ "$name" == groupadd ]]; then
      echo "${user}:x:${gid}:" >>"${prefix}/etc/group"
    else
      # A system user without --uid gets the next free one below 1000, as useradd --system picks them.
      uid="${uid:-$((999 - $(wc -l <"${prefix}/etc/passwd")))}"
      echo "${user}:x:${uid}:${gid:-$uid}::/home/${user}:/bin/bash" >>"${prefix}/etc/passwd"
      [[ -z "$home" ]] || mkdir -p "${prefix}/home/${user}"
    fi ;;
  iptables)
    # The filter table as files of rules (one a line, as iptables -S lists them after "-A CHAIN"), per chain.
    tables="$state/iptables"
    mkdir -p "$tables"
    [[ -f "$tables/OUTPUT" ]] || : >"$tables/OUTPUT"
    args=()
    for arg in "$@"; do
      [[ "$arg" == -w || "$arg" == -n ]] || args+=("$arg")
    done
    set -- "${args[@]}"
    op="$1" chain="$2"
    shift 2
    file="$tables/$chain"
    case "$op" in
      -N) [[ ! -f "$file" ]] || exit 1
        : >"$file" ;;
      -L) [[ -f "$file" ]] ;;
      -F) [[ -f "$file" ]] || exit 1
        : >"$file" ;;
      -S) [[ -f "$file" ]] || exit 1
        if [[ "$chain" == OUTPUT ]]; then echo "-P OUTPUT ACCEPT"; else echo "-N $chain"; fi
        sed "s/^/-A $chain /" "$file" ;;
      -A) [[ -f "$file" ]] || exit 1
        echo "$*" >>"$file" ;;
      -I) [[ -f "$file" ]] || exit 1
        position=1
        [[ "${1:-}" =~ ^[0-9]+$ ]] && position="$1" && shift
        { head -n $((position - 1)) "$file"; echo "$*"; tail -n +"$position" "$file"; } >"$file.new"
        mv "$file.new" "$file" ;;
      -C) [[ -f "$file" ]] && grep -qxF -- "$*" "$file" ;;
      -D) [[ -f "$file" ]] && grep -qxF -- "$*" "$file" || exit 1
        awk -v rule="$*" 'gone || $0 != rule {print; next} {gone = 1}' "$file" >"$file.new"
        mv "$file.new" "$file" ;;
      *) exit 2 ;;
    esac ;;
  make)
    # What each source tree's `make install` puts in place: enroot's script, or pyxis's plugin.
    prefix="" destdir="" dir="" target=""
    while (($# > 0)); do
      case "$1" in
        -C) dir="$2"; shift ;;
        prefix=*) prefix="${1#prefix=}" ;;
        DESTDIR=*) destdir="${1#DESTDIR=}" ;;
        *=*) ;;
        *) target="$1" ;;
      esac
      shift
    done
    [[ "$target" == install ]] || exit 0
    if [[ "$(basename "$dir")" == enroot-* ]]; then
      mkdir -p "${destdir}${prefix}/bin"
      printf '#!/bin/sh\n' >"${destdir}${prefix}/bin/enroot" && chmod +x "${destdir}${prefix}/bin/enroot"
    else
      mkdir -p "${destdir}${prefix}/lib/slurm"
      touch "${destdir}${prefix}/lib/slurm/spank_pyxis.so"
    fi ;;
  git)
    # A repository that holds whatever commit was fetched; $state/git-head makes it hold another one instead.
    dir="."
    [[ "${1:-}" == -C ]] && dir="$2" && shift 2
    case "${1:-}" in
      init) mkdir -p "$dir/.git" ;;
      fetch)
        [[ -f "$state/offline" ]] && exit 128
        printf '%s\n' "${*: -1}" >"$dir/.git/FETCH_HEAD" ;;
      checkout) cp "$dir/.git/FETCH_HEAD" "$dir/.git/HEAD" ;;
      rev-parse)
        if [[ -f "$state/git-head" ]]; then cat "$state/git-head"; else cat "$dir/.git/HEAD"; fi ;;
      submodule) ;;
    esac ;;
  gpg)
    # Keys are stand-ins whose FINGERPRINT= line says which key they are (tests/support/bootstrap.py).
    home="" import="" export="" list=0 armor=0 signature="" signed=""
    while (($# > 0)); do
      case "$1" in
        --homedir) home="$2"; shift ;;
        --import) import="$2"; shift ;;
        --export) export="$2"; shift ;;
        --list-keys) list=1 ;;
        --armor) armor=1 ;;
        --status-fd) shift ;;
        --verify) signature="$2" signed="$3"; shift 2 ;;
      esac
      shift
    done
    if [[ -n "$signature" ]]; then
      # A stand-in signature names its key (SIGNED-BY=) and the sha256 of what it signs (SHA256=).
      by="$(sed -n 's/^SIGNED-BY=//p' "$signature")"
      digest="$(sed -n 's/^SHA256=//p' "$signature")"
      grep -qx "FINGERPRINT=${by}" "$home/shim-keys" 2>/dev/null || exit 2
      [[ "$(sha256sum "$signed" | cut -d' ' -f1)" == "$digest" ]] || { echo "[GNUPG:] BADSIG ${by: -16}"; exit 1; }
      echo "[GNUPG:] GOODSIG ${by: -16} AWS PCS Packages"
      echo "[GNUPG:] VALIDSIG ${by} 2026-01-01 1767225600 0 4 0 1 10 00 ${by}"
      exit 0
    fi
    if [[ -n "$import" ]]; then
      grep -q '^FINGERPRINT=' "$import" || exit 2
      cat "$import" >>"$home/shim-keys"
    elif ((list)); then
      while IFS='=' read -r key value; do
        if [[ "$key" == FINGERPRINT ]]; then
          printf 'pub:-:255:22:%s:1700000000:::-:::scESC:\nfpr:::::::::%s:\n' "${value: -16}" "$value"
        fi
      done <"$home/shim-keys"
    elif [[ -n "$export" ]]; then
      grep -qx "FINGERPRINT=$export" "$home/shim-keys" || exit 2
      printf 'key %s armor %s\n' "$export" "$armor"
    fi ;;
  setpriv)
    # Runs the command after -- as this process's own user (the harness has no such users to switch to).
    while (($# > 0)) && [[ "$1" != -- ]]; do
      shift
    done
    shift
    exec "$@" ;;
  uname)
    # The running kernel: an AWS kernel new enough for FSx's EFA clients unless the test says otherwise.
    if [[ "${1:-}" == -r ]]; then
      echo "${SHIM_KERNEL:-6.8.0-1015-aws}"
    else
      echo Linux
    fi ;;
  ip)
    echo "default via 10.1.0.1 dev ens5 proto dhcp src 10.1.0.5 metric 100" ;;
  modinfo)
    # modinfo -F version MODULE: a module built for the kernel but not loaded (state/modinfo-MODULE).
    [[ -f "$state/modinfo-${*: -1}" ]] || exit 1
    cat "$state/modinfo-${*: -1}" ;;
  lnetctl)
    case "$*" in
      "net show --net efa") [[ -f "$state/lnet-efa" ]] && printf 'net:\n    - net type: efa\n' ;;
      "net add --net efa "*) touch "$state/lnet-efa" ;;
    esac
    exit 0 ;;
  *) exit 0 ;;
esac
