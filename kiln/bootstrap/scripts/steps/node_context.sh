# shellcheck shell=bash
# First step of every run: read cluster.env (deploy-time values), check the keys this
# bundle needs, and work out this node's role and instance facts.

# Print this node's IPv4 addresses, one a line.
node_addresses() {
  local address
  for address in $(hostname -I 2>/dev/null); do
    printf '%s\n' "$address"
  done
}

# Print "group controller_ip" for this node from HyperPod's resource_config.json.
hyperpod_lookup() {
  local config addresses
  config="$(root_path "${SAGEMAKER_RESOURCE_CONFIG_PATH:-$KILN_HYPERPOD_RESOURCE_CONFIG}")"
  [[ -r "$config" ]] || die "${config} is missing: on_create runs on SageMaker HyperPod only"
  addresses="$(node_addresses)"
  python3 - "$config" "$KILN_HYPERPOD_CONTROLLER_GROUP" "$addresses" <<'PY'
import json, sys
config, controller_group, mine = sys.argv[1], sys.argv[2], set(sys.argv[3].split())
groups = json.load(open(config))["InstanceGroups"]
def address(instance):
    return instance.get("CustomerIpAddress") or instance.get("AgentIpAddress") or ""
own = next((g["Name"] for g in groups for i in g.get("Instances", []) if address(i) in mine), "")
controllers = [address(i) for g in groups if g["Name"] == controller_group for i in g.get("Instances", [])]
print(own or "-", controllers[0] if controllers else "-")
PY
}

# Set KILN_NODE_ROLE (and on HyperPod KILN_NODE_GROUP and the controller address).
resolve_role() {
  local group controller
  if [[ "${KILN_PHASE:-}" == bake ]]; then
    # An image build runs outside the cluster (no cfnconfig, no HyperPod resource_config.json), and what
    # install steps put on the image does not depend on the role.
    KILN_NODE_ROLE="${KILN_NODE_ROLE:-$KILN_DEFAULT_ROLE}"
    export KILN_NODE_ROLE
    log "image build: no cluster to ask for this node's role; install steps serve every role"
    return 0
  fi
  # ParallelCluster's head, login and compute nodes are told their role by their OnNodeConfigured arguments
  # (--role): its own /etc/parallelcluster/cfnconfig is not an interface ParallelCluster supports.
  if [[ "$KILN_TARGET" == hyperpod ]]; then
    read -r group controller < <(hyperpod_lookup)
    if [[ "$group" != - ]]; then
      KILN_NODE_GROUP="${KILN_NODE_GROUP:-$group}"
    fi
    if [[ -z "${KILN_NODE_ROLE:-}" ]]; then
      case "${KILN_NODE_GROUP:-}" in
        "$KILN_HYPERPOD_CONTROLLER_GROUP") KILN_NODE_ROLE=controller ;;
        "$KILN_HYPERPOD_LOGIN_GROUP") KILN_NODE_ROLE=login ;;
        *) KILN_NODE_ROLE=worker ;;
      esac
    fi
    if [[ -z "${KILN_SLURM_CONTROLLER_ADDR:-}" && "$controller" != - ]]; then
      KILN_SLURM_CONTROLLER_ADDR="$controller"
    fi
    if [[ -z "${KILN_SLURM_CONTROLLER_HOST:-}" && -n "${KILN_SLURM_CONTROLLER_ADDR:-}" ]]; then
      # EC2's default host names, which HyperPod keeps, are ip-a-b-c-d.
      KILN_SLURM_CONTROLLER_HOST="ip-${KILN_SLURM_CONTROLLER_ADDR//./-}"
    fi
    export KILN_NODE_GROUP KILN_SLURM_CONTROLLER_ADDR KILN_SLURM_CONTROLLER_HOST
  fi
  KILN_NODE_ROLE="${KILN_NODE_ROLE:-$KILN_DEFAULT_ROLE}"
  case "$KILN_NODE_ROLE" in
    controller | login | worker) ;;
    *) die "KILN_NODE_ROLE: got '${KILN_NODE_ROLE}', allowed: controller, login, worker" ;;
  esac
  export KILN_NODE_ROLE
}

# Set KILN_INSTANCE_TYPE and load that type's facts (GPU count, EFA interfaces, NVSwitch).
resolve_instance() {
  local facts
  if [[ "$KILN_TARGET" == local ]]; then
    # slurmctld starts only on the host its SlurmctldHost names.
    KILN_SLURM_CONTROLLER_HOST="${KILN_SLURM_CONTROLLER_HOST:-$(hostname -s)}"
    export KILN_SLURM_CONTROLLER_HOST
    KILN_INSTANCE_TYPE=local KILN_GPU_COUNT=0 KILN_NEURON_COUNT=0 KILN_EFA_COUNT=0 KILN_NVSWITCH=0
    KILN_INSTANCE_STORAGE_GB=0
    export KILN_INSTANCE_TYPE KILN_GPU_COUNT KILN_NEURON_COUNT KILN_EFA_COUNT KILN_NVSWITCH KILN_INSTANCE_STORAGE_GB
    return 0
  fi
  if [[ "${KILN_PHASE:-}" == bake ]]; then
    # The build instance is of any type, and the image serves every type of the bundle: install for all of them.
    KILN_INSTANCE_TYPE=image
    export KILN_INSTANCE_TYPE
    log "image build: instance facts from image-facts.env, the union over ${KILN_INSTANCE_TYPES:-no instance types}"
    load_env_file "${KILN_BUNDLE_DIR}/image-facts.env"
    return 0
  fi
  if [[ -z "${KILN_INSTANCE_TYPE:-}" ]]; then
    KILN_INSTANCE_TYPE="$(retry 3 imds instance-type)" || die "KILN_INSTANCE_TYPE is not in cluster.env and IMDSv2 did not answer"
  fi
  KILN_INSTANCE_TYPE="${KILN_INSTANCE_TYPE#ml.}"
  export KILN_INSTANCE_TYPE
  facts="${KILN_BUNDLE_DIR}/instances/${KILN_INSTANCE_TYPE}/facts.env"
  # shellcheck disable=SC2153 # KILN_INSTANCE_TYPES comes from bundle.env
  [[ -r "$facts" ]] || die "instance type ${KILN_INSTANCE_TYPE} is not one this bundle was rendered for (${KILN_INSTANCE_TYPES})"
  load_env_file "$facts"
}

node_context() {
  local key
  local -a missing=()
  KILN_CLUSTER_ENV="${KILN_CLUSTER_ENV:-$(root_path /etc/kiln/cluster.env)}"
  if [[ ! -e "$KILN_CLUSTER_ENV" && -r "${KILN_BUNDLE_DIR}/cluster.env" ]]; then
    # Bundles that carry their own cluster.env (HyperPod lifecycle, local cluster) install it.
    mkdir -p "${KILN_CLUSTER_ENV%/*}"
    install -m 0644 "${KILN_BUNDLE_DIR}/cluster.env" "$KILN_CLUSTER_ENV"
  fi
  if [[ -r "$KILN_CLUSTER_ENV" ]]; then
    load_env_file "$KILN_CLUSTER_ENV"
  elif [[ "${KILN_PHASE:-}" == bake ]]; then
    # An image build belongs to no cluster yet: install steps need no cluster values.
    log "image build: no cluster.env yet"
  else
    die "${KILN_CLUSTER_ENV} is missing: the compute construct's user data must write it (kiln.bootstrap.cluster_env_script)"
  fi
  if [[ "${KILN_PHASE:-}" != bake ]]; then
    for key in $KILN_REQUIRED_CLUSTER_ENV; do
      [[ -n "${!key:-}" ]] || missing+=("$key")
    done
  fi
  if ((${#missing[@]} > 0)); then
    die "${KILN_CLUSTER_ENV} lacks ${missing[*]} (required by this ${KILN_TARGET} bundle)"
  fi
  if [[ "$KILN_OS" != "$KILN_IMAGE_OS" ]]; then
    die "this bundle was rendered for ${KILN_IMAGE_OS} (compute.image.os), but this node runs ${KILN_OS}"
  fi
  resolve_role
  resolve_instance
  local baked=no
  if is_baked; then
    baked=yes
  fi
  log "target ${KILN_TARGET}, role ${KILN_NODE_ROLE}, os ${KILN_OS}, instance ${KILN_INSTANCE_TYPE}," \
    "gpus ${KILN_GPU_COUNT}, neuron devices ${KILN_NEURON_COUNT}, efa ${KILN_EFA_COUNT}, baked ${baked}"
}
