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
    # Where configure_fsx mounts FSx for Lustre: kiln-launch health checks it is a lustre mount that answers.
    if [[ "${KILN_LUSTRE:-0}" == 1 ]]; then
      printf 'KILN_LUSTRE_MOUNT=%q\n' "$KILN_MOUNT_POINT"
    fi
    # Neuron nodes of a Slurm target have no Neuron PyTorch on the host: kiln-launch runs in this container
    # (kiln.launcher.container), through enroot. GPU and service nodes train on the host.
    if ((KILN_NEURON_COUNT > 0)) && [[ -n "${KILN_TRAINING_IMAGE:-}" ]]; then
      printf 'KILN_TRAINING_IMAGE=%q\n' "$KILN_TRAINING_IMAGE"
    fi
    # The spec's resilience (Slurm targets): when kiln-launch calls a job hung, and whether a job on an EFA node may
    # run when NCCL chose TCP sockets.
    if [[ -n "${KILN_HANG_FACTOR:-}" ]]; then
      printf 'KILN_HANG_FACTOR=%q\n' "$KILN_HANG_FACTOR"
      printf 'KILN_HANG_MIN_S=%q\n' "$KILN_HANG_MIN_S"
    fi
    if [[ "${KILN_ALLOW_TCP:-0}" == 1 ]]; then
      printf 'KILN_ALLOW_TCP=1\n'
    fi
  )
  configure_job_requeue
}

# Whether sbatch submits requeueable jobs from a login shell: SBATCH_REQUEUE (or SBATCH_NO_REQUEUE) is sbatch's own
# input variable for --requeue (--no-requeue), so Slurm requeues a batch job whose node fails and kiln-launch resumes
# it (resilience.auto_resume). A script's own #SBATCH line or option wins. Slurm targets only (EKS: none).
configure_job_requeue() {
  local variable
  case "${KILN_JOB_REQUEUE:-}" in
    1) variable=SBATCH_REQUEUE ;;
    0) variable=SBATCH_NO_REQUEUE ;;
    *) return 0 ;;
  esac
  write_file "$(root_path /etc/profile.d/kiln-jobs.sh)" <<<"export ${variable}=1"
}
