# shellcheck shell=bash
# Accelerator services, from the instance type's catalog facts: the NVIDIA persistence daemon on GPU nodes (the
# driver stays initialised between jobs), fabric manager on NVSwitch types (without it the GPUs cannot talk over
# NVLink and CUDA refuses them). Neuron devices need no service. At every boot, so baked images get it too.

# Start unit $1 now and at boot unless it runs; $2 says what fails without it.
ensure_service_running() {
  if service_active "$1"; then
    skip "$1 is running"
    return 0
  fi
  systemctl enable --now "$1" || die "$1 did not start: $2"
}

configure_accelerators() {
  if ((KILN_GPU_COUNT == 0)); then
    skip "no NVIDIA GPUs on ${KILN_INSTANCE_TYPE}"
    return 0
  fi
  ensure_service_running nvidia-persistenced "without it every job start reinitialises the driver"
  if ((KILN_NVSWITCH == 1)); then
    ensure_service_running nvidia-fabricmanager \
      "${KILN_INSTANCE_TYPE} has NVSwitch, so its GPUs stay unusable; pin software.nvidia_driver so kiln installs it"
  fi
}
