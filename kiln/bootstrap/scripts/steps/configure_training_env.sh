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
  # This node's instance type for kiln-launch, which every user runs: IMDS answers only root and kiln's services
  # (configure_imds). A file of the node's own, not launcher.env: what a job exports reaches every node of the job.
  write_file "$(root_path /etc/kiln/instance-type)" <<<"$KILN_INSTANCE_TYPE"
  # Sourced by job scripts (set -a; source launcher.env): every value is shell-quoted with printf %q, so
  # whatever a value holds, sourcing the file only assigns it.
  write_file "$(root_path /etc/kiln/launcher.env)" < <(
    printf 'KILN_CLUSTER_NAME=%q\n' "$KILN_CLUSTER_NAME"
    printf 'KILN_CHECKPOINT_DIR=%q\n' "$KILN_CHECKPOINT_DIR"
    printf 'KILN_VENV=%q\n' "${KILN_ROOT%/}/opt/kiln/venv"
    # Where kiln-launch check finds the image manifest (the local cluster's prefix; / on cloud nodes).
    printf 'KILN_ROOT=%q\n' "$KILN_ROOT"
    # Neuron nodes of a Slurm target have no Neuron PyTorch on the host: kiln-launch runs in this container
    # (kiln.launcher.container), through enroot. GPU and service nodes train on the host.
    if ((KILN_NEURON_COUNT > 0)) && [[ -n "${KILN_TRAINING_IMAGE:-}" ]]; then
      printf 'KILN_TRAINING_IMAGE=%q\n' "$KILN_TRAINING_IMAGE"
    fi
  )
}
