# shellcheck shell=bash
# NCCL and aws-ofi-nccl: the plugin comes with the EFA installer; NCCL itself only when pinned
# (frameworks and containers otherwise bring their own), from NVIDIA's signed CUDA repository. Where Kubernetes runs
# the jobs (KILN_HOST_NCCL=0), pods bring NCCL, libfabric and the plugin: the host needs none of them, and the EKS
# AMI's minimal EFA install has no plugin to register.

# Print the library directory of the aws-ofi-nccl plugin the EFA installer left, if any: the first of
# KILN_OFI_NCCL_DIRS that holds one of KILN_OFI_NCCL_NAMES: where the EFA installer and AWS's images put it
# (nccl_presets.json, efa_software, with its sources), the multiarch directories of recent installers among them.
ofi_nccl_libdir() {
  local dir name
  for dir in $KILN_OFI_NCCL_DIRS; do
    for name in $KILN_OFI_NCCL_NAMES; do
      if [[ -e "$(root_path "$dir")/${name}" ]]; then
        printf '%s\n' "$dir"
        return 0
      fi
    done
  done
}

install_nccl() {
  local want="${KILN_NCCL_VERSION:-}" plugin_dir runtime devel
  if ((KILN_GPU_COUNT == 0)); then
    skip "no GPUs on ${KILN_INSTANCE_TYPE}"
    return 0
  fi
  if [[ "$KILN_HOST_NCCL" != 1 ]]; then
    skip "jobs run in pods on ${KILN_TARGET}, which bring NCCL and aws-ofi-nccl: the host needs neither"
    return 0
  fi
  if ((KILN_EFA_COUNT > 0)); then
    plugin_dir="$(ofi_nccl_libdir)"
    if [[ -z "$plugin_dir" ]]; then
      die "aws-ofi-nccl (${KILN_OFI_NCCL_NAMES// / or }) not found in ${KILN_OFI_NCCL_DIRS}: pin an EFA installer that bundles it"
    fi
    write_file "$(root_path /etc/ld.so.conf.d/kiln-aws-ofi-nccl.conf)" <<<"$plugin_dir"
    if ((KILN_CHANGED == 1)); then
      ldconfig
    fi
  fi
  if [[ "$KILN_PKG" == apt ]]; then
    runtime=libnccl2 devel=libnccl-dev
  else
    runtime=libnccl devel=libnccl-devel
  fi
  if [[ -n "${KILN_IMAGE_NCCL:-}" ]]; then
    adopt_component NCCL "$(package_version "$runtime")" "$KILN_IMAGE_NCCL"
    return 0
  fi
  if [[ -z "$want" ]]; then
    skip "software.nccl is not pinned: NCCL comes with the framework or container"
    return 0
  fi
  if package_installed "$runtime" "$want" && package_installed "$devel" "$want"; then
    skip "NCCL ${want} is installed"
    return 0
  fi
  add_signed_repository cuda
  install_packages "$(pinned_package "$runtime" "$want")" "$(pinned_package "$devel" "$want")"
}
