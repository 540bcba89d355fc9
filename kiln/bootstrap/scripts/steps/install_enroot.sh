# shellcheck shell=bash
# enroot, the container runtime pyxis runs Slurm jobs in (`srun --container-image`), built from NVIDIA's source at
# the commit bundle.env pins, with the capabilities its +caps package would set (unprivileged image import).

# The packages enroot's build and its runtime need (its doc/installation.md; zstd from its own packages' Depends),
# by package format. Not libmd: the build links only the libbsd functions enroot vendors, and builds without it
# (benchmarks/source_builds.py); Amazon Linux 2023's repositories have none.
enroot_packages() {
  if [[ "$KILN_PACKAGE_FORMAT" == deb ]]; then
    printf '%s\n' gcc make libcap2-bin libtool automake curl gawk jq squashfs-tools parallel zstd pigz
  else
    printf '%s\n' gcc make libcap libtool automake curl gawk jq squashfs-tools parallel zstd pigz
  fi
}

install_enroot() {
  local want="${KILN_ENROOT_VERSION:-}" src
  local -a packages=()
  local -a layout=(prefix=/usr sysconfdir=/etc)
  if [[ "${KILN_CONTAINERS:-0}" != 1 ]]; then
    skip "enroot is not part of this bundle"
    return 0
  fi
  if [[ -n "${KILN_IMAGE_ENROOT:-}" ]]; then
    adopt_component enroot "$(package_version enroot)" "$KILN_IMAGE_ENROOT"
    return 0
  fi
  if [[ -z "$want" ]]; then
    skip "enroot is not part of this bundle"
    return 0
  fi
  if [[ -x "$(root_path /usr/bin/enroot)" ]] && already_installed enroot "$want"; then
    skip "enroot ${want} is installed"
    return 0
  fi
  guard_replacement enroot enroot "$(package_version enroot)" "$want"
  mapfile -t packages < <(enroot_packages)
  ensure_packages "${packages[@]}"
  fetch_source enroot
  src="$KILN_FETCHED"
  # Build, then install: the enroot script records its directories when built, and must not record DESTDIR. The
  # build links enroot's helpers statically against the musl its tree pins, as NVIDIA's own packages do.
  make -C "$src" "${layout[@]}" all
  make -C "$src" "${layout[@]}" DESTDIR="${KILN_ROOT%/}" install
  make -C "$src" "${layout[@]}" DESTDIR="${KILN_ROOT%/}" setcap
  rm -rf "$src"
  [[ -x "$(root_path /usr/bin/enroot)" ]] || die "the enroot build did not install /usr/bin/enroot"
  record_installed enroot "$want"
}
