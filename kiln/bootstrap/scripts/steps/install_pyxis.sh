# shellcheck shell=bash
# pyxis, the Slurm SPANK plugin that runs jobs in enroot containers, built from NVIDIA's source at
# the commit bundle.env pins, against the node's own Slurm headers.

# Print the directory holding Slurm's spank.h, or nothing.
slurm_include_dir() {
  local dir
  for dir in "${KILN_SLURM_PREFIX}/include" /usr/include; do
    if [[ -r "$(root_path "$dir")/slurm/spank.h" ]]; then
      printf '%s\n' "$(root_path "$dir")"
      return 0
    fi
  done
}

install_pyxis() {
  local want="${KILN_PYXIS_VERSION:-}" plugin include work
  if [[ "${KILN_CONTAINERS:-0}" != 1 ]]; then
    skip "pyxis is not part of this bundle"
    return 0
  fi
  plugin="$(root_path "$KILN_PYXIS_PLUGIN")"
  if [[ -n "${KILN_IMAGE_PYXIS:-}" ]]; then
    adopt_component pyxis "$([[ -f "$plugin" ]] && printf 'present\n')" "$KILN_IMAGE_PYXIS"
    return 0
  fi
  if [[ -z "$want" ]]; then
    skip "pyxis is not part of this bundle"
    return 0
  fi
  if [[ -f "$plugin" ]] && already_installed pyxis "$want"; then
    skip "pyxis ${want} is installed"
    return 0
  fi
  include="$(slurm_include_dir)"
  [[ -n "$include" ]] || die "Slurm headers (slurm/spank.h) not found under ${KILN_SLURM_PREFIX}/include: pyxis must be built against the node's Slurm"
  ensure_packages gcc make
  fetch_source pyxis
  work="$KILN_FETCHED"
  # CPPFLAGS from the environment: pyxis's Makefile adds its own to them. VERSION would override pyxis 0.20's own.
  env -u VERSION CPPFLAGS="-I${include}" make -C "$work" prefix="$KILN_PYXIS_PREFIX" DESTDIR="${KILN_ROOT%/}" install
  rm -rf "$work"
  [[ -f "$plugin" ]] || die "pyxis build did not produce ${plugin}"
  record_installed pyxis "$want"
}
