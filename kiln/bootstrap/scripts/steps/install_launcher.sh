# shellcheck shell=bash
# kiln's launcher from the wheel in the bundle, into its own venv, without any CDK
# dependency (--no-deps, --no-index: no network); torch from PyPI only when asked, with
# numpy, which torch uses without requiring it (it warns at every import without it).

install_launcher() {
  local venv want
  venv="$(root_path /opt/kiln/venv)"
  want="${KILN_LAUNCHER_WHEEL_SHA256}${KILN_TORCH_VERSION:+ torch-${KILN_TORCH_VERSION} numpy}"
  if [[ -x "${venv}/bin/python" ]] && already_installed launcher "$want"; then
    skip "launcher ${KILN_LAUNCHER_WHEEL} is installed"
    return 0
  fi
  install_kiln_wheel
  if [[ -n "${KILN_TORCH_VERSION:-}" ]]; then
    retry "$KILN_RETRY_ATTEMPTS" "${KILN_VENV}/bin/python" -m pip install --quiet "torch==${KILN_TORCH_VERSION}" numpy
  fi
  if [[ -x "${KILN_VENV}/bin/kiln-launch" ]]; then
    mkdir -p "$(root_path /usr/local/bin)"
    ln -sfn "${KILN_VENV}/bin/kiln-launch" "$(root_path /usr/local/bin/kiln-launch)"
  fi
  record_installed launcher "$want"
}
