# shellcheck shell=bash
# The NCCL/EFA environment (rendered from the catalog presets and the spec's overrides, per
# instance type) for login shells, Slurm jobs and containers, plus the launcher's settings.

configure_training_env() {
  local source_dir
  source_dir="${KILN_BUNDLE_DIR}/instances/${KILN_INSTANCE_TYPE}"
  if [[ -r "${source_dir}/nccl.env" ]]; then
    # KEY=value without quotes, so `docker --env-file` and `enroot --env` read it as is.
    write_file "$(root_path /etc/kiln/nccl.env)" <"${source_dir}/nccl.env"
    write_file "$(root_path /etc/profile.d/kiln-nccl.sh)" <"${source_dir}/profile.sh"
  else
    skip "no NCCL profile for ${KILN_INSTANCE_TYPE}"
  fi
  write_file "$(root_path /etc/kiln/launcher.env)" <<ENV
KILN_CLUSTER_NAME=${KILN_CLUSTER_NAME}
KILN_CHECKPOINT_DIR=${KILN_CHECKPOINT_DIR}
KILN_NCCL_ENV_FILE=/etc/kiln/nccl.env
KILN_VENV=${KILN_ROOT%/}/opt/kiln/venv
ENV
}
