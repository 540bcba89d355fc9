# shellcheck shell=bash
# kiln's launcher from the wheel in the bundle, into its own venv, without any CDK
# dependency (--no-deps, --no-index: no network); torch from PyPI only when asked.

install_launcher() {
  local wheel venv want
  wheel="${KILN_BUNDLE_DIR}/launcher/${KILN_LAUNCHER_WHEEL}"
  [[ -r "$wheel" ]] || die "launcher wheel ${wheel} is missing from the bundle"
  venv="$(root_path /opt/kiln/venv)"
  want="${KILN_LAUNCHER_WHEEL_SHA256}${KILN_TORCH_VERSION:+ torch-${KILN_TORCH_VERSION}}"
  if [[ -x "${venv}/bin/python" ]] && already_installed launcher "$want"; then
    skip "launcher ${KILN_LAUNCHER_WHEEL} is installed"
    return 0
  fi
  if [[ ! -x "${venv}/bin/python" ]]; then
    if [[ "$KILN_PKG" == apt ]]; then
      ensure_packages python3-venv
    else
      ensure_packages python3
    fi
    "${KILN_PYTHON:-python3}" -m venv "$venv"
  fi
  "${venv}/bin/python" -m pip install --quiet --no-deps --no-index --force-reinstall "$wheel"
  if [[ -n "${KILN_TORCH_VERSION:-}" ]]; then
    retry "$KILN_RETRY_ATTEMPTS" "${venv}/bin/python" -m pip install --quiet "torch==${KILN_TORCH_VERSION}"
  fi
  if [[ -x "${venv}/bin/kiln-launch" ]]; then
    mkdir -p "$(root_path /usr/local/bin)"
    ln -sfn "${venv}/bin/kiln-launch" "$(root_path /usr/local/bin/kiln-launch)"
  fi
  record_installed launcher "$want"
}
