# shellcheck shell=bash
# NCCL and aws-ofi-nccl: the plugin comes with the EFA installer; NCCL itself only when pinned
# (frameworks and containers otherwise bring their own), from NVIDIA's signed CUDA repository.

# Print the library directory of the aws-ofi-nccl plugin the EFA installer left, if any.
ofi_nccl_libdir() {
  local dir
  for dir in /opt/amazon/ofi-nccl/lib /opt/amazon/ofi-nccl/lib64 /opt/aws-ofi-nccl/lib; do
    if [[ -e "$(root_path "$dir")/libnccl-net.so" ]]; then
      printf '%s\n' "$dir"
      return 0
    fi
  done
}

install_nccl() {
  local want="${KILN_NCCL_VERSION:-}" plugin_dir runtime devel
  if ((KILN_GPU_COUNT == 0)); then
    skip "no GPUs on ${KILN_INSTANCE_TYPE}"
    return 0
  fi
  if ((KILN_EFA_COUNT > 0)); then
    plugin_dir="$(ofi_nccl_libdir)"
    if [[ -z "$plugin_dir" ]]; then
      die "aws-ofi-nccl (libnccl-net.so) not found under /opt/amazon/ofi-nccl: pin an EFA installer that bundles it"
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
