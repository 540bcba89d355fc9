"""The version-1 cluster spec as pydantic models: shape, types and defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from kiln.catalog.capacity import CapacityType
from kiln.catalog.kubernetes import default_kubernetes_version, kubernetes_versions
from kiln.catalog.limits import (
    MAX_SPEC_TAGS,
    ROOT_VOLUME_MAX_GIB,
    ROOT_VOLUME_MIN_GIB,
    SERVICE_NODE_ROOT_VOLUME_GIB,
    TTL_RULE,
)
from kiln.catalog.names import (
    AVAILABILITY_ZONE,
    CLUSTER_NAME,
    CLUSTER_NAME_RULE,
    DCGM_EXPORTER_VERSION,
    DCGM_EXPORTER_VERSION_RULE,
    LINUX_USER,
    LINUX_USER_RULE,
    LOCK_FILE,
    LOCK_FILE_RULE,
    NCCL_VERSION,
    NCCL_VERSION_RULE,
    NODE_GROUP_NAME,
    NODE_GROUP_NAME_RULE,
    REGION,
    USER_STEP_NAME,
    USER_STEP_NAME_RULE,
    USER_STEP_PATH,
    USER_STEP_PATH_RULE,
    VERSION,
    VERSION_RULE,
)
from kiln.catalog.nccl import MAX_OVERRIDE_NAME_CHARS, MAX_OVERRIDE_VALUE_CHARS, MAX_OVERRIDES, allowed_prefixes
from kiln.catalog.neuron import known_neuron_releases, resolve_neuron_release
from kiln.catalog.platforms import KILN_INSTALLS, Component, image_profile_for, newest_pcs_slurm
from kiln.contracts.backends import EKS, HYPERPOD, HYPERPOD_EKS, PARALLELCLUSTER, PCS, Platform, platform_of
from kiln.contracts.permissions_boundary import BOUNDARY_NAME, BOUNDARY_RULE, POLICY_ARN, POLICY_NAME

# pydantic matches Field patterns with Rust's regex crate, where $ is the end of the text (a trailing
# newline does not pass, tests/spec/test_hostile_values.py checks each) and classes are spelled in ASCII.
NAME_PATTERN = f"^{CLUSTER_NAME.pattern}$"
GROUP_NAME_PATTERN = f"^{NODE_GROUP_NAME.pattern}$"
REGION_PATTERN = f"^{REGION.pattern}$"
AZ_PATTERN = f"^{AVAILABILITY_ZONE.pattern}$"
VPC_ID_PATTERN = r"^vpc-([0-9a-f]{8}|[0-9a-f]{17})$"
SUBNET_ID_PATTERN = r"^subnet-([0-9a-f]{8}|[0-9a-f]{17})$"
AMI_ID_PATTERN = r"^ami-([0-9a-f]{8}|[0-9a-f]{17})$"
# FSx's own patterns (API Reference: FileSystemId, LustreFileSystemConfiguration.MountName) and EC2's group ids.
FILE_SYSTEM_ID_PATTERN = r"^fs-([0-9a-f]{8}|[0-9a-f]{17})$"
MOUNT_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,8}$"
SECURITY_GROUP_ID_PATTERN = r"^sg-([0-9a-f]{8}|[0-9a-f]{17})$"
VERSION_PATTERN = f"^{VERSION.pattern}$"
NCCL_PATTERN = f"^{NCCL_VERSION.pattern}$"
DCGM_EXPORTER_PATTERN = f"^{DCGM_EXPORTER_VERSION.pattern}$"
LOCK_FILE_PATTERN = f"^{LOCK_FILE.pattern}$"
KUBERNETES_MINOR_PATTERN = r"^1\.[0-9]{1,2}$"
USER_STEP_NAME_PATTERN = f"^{USER_STEP_NAME.pattern}$"
USER_STEP_PATH_PATTERN = f"^{USER_STEP_PATH.pattern}$"
LINUX_USER_PATTERN = f"^{LINUX_USER.pattern}$"
PERMISSIONS_BOUNDARY_PATTERN = f"^(?:{POLICY_NAME.pattern}|{POLICY_ARN.pattern})$"

# What each pattern means, for error messages.
PATTERN_RULES = {
    NAME_PATTERN: CLUSTER_NAME_RULE,
    GROUP_NAME_PATTERN: NODE_GROUP_NAME_RULE,
    REGION_PATTERN: "an AWS region name such as us-east-1",
    AZ_PATTERN: "an availability zone name such as us-east-1a",
    VPC_ID_PATTERN: "a VPC id such as vpc-0123456789abcdef0",
    SUBNET_ID_PATTERN: "a subnet id such as subnet-0123456789abcdef0",
    AMI_ID_PATTERN: "an AMI id such as ami-0123456789abcdef0",
    FILE_SYSTEM_ID_PATTERN: "an FSx file system id such as fs-0123456789abcdef0",
    MOUNT_NAME_PATTERN: "an FSx for Lustre mount name: 1-8 letters, digits, '_' or '-'",
    SECURITY_GROUP_ID_PATTERN: "a security group id such as sg-0123456789abcdef0",
    VERSION_PATTERN: VERSION_RULE,
    NCCL_PATTERN: NCCL_VERSION_RULE,
    DCGM_EXPORTER_PATTERN: DCGM_EXPORTER_VERSION_RULE,
    LOCK_FILE_PATTERN: LOCK_FILE_RULE,
    KUBERNETES_MINOR_PATTERN: "a Kubernetes minor version such as 1.35",
    USER_STEP_NAME_PATTERN: USER_STEP_NAME_RULE,
    USER_STEP_PATH_PATTERN: USER_STEP_PATH_RULE,
    LINUX_USER_PATTERN: LINUX_USER_RULE,
    PERMISSIONS_BOUNDARY_PATTERN: BOUNDARY_RULE,
}


class SpecModel(BaseModel):
    """Base for every spec section: unknown keys are errors, values are immutable, types are exact.

    Strict: a count is a YAML integer, a switch a YAML boolean, as the JSON Schema says. Without it pydantic would take
    max_count: "2", true or 2.0, retain: "off" or 0, efa: "true"; a number field (ttl_hours) still takes an integer.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, strict=True)


class Network(SpecModel):
    """Where the cluster lives: a new VPC, or an existing VPC and private subnet."""

    vpc_cidr: str = Field(
        "10.0.0.0/16",
        description="CIDR of a new VPC, /16 to /22, inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or "
        "100.64.0.0/10; not Docker's 172.17.0.0/16 on Slurm backends. With vpc_id: the existing VPC's CIDR, /16 to "
        "/28 (required on parallelcluster, whose SSH rule admits it alone).",
    )
    vpc_id: str | None = Field(None, pattern=VPC_ID_PATTERN, description="An existing VPC to use instead.")
    private_subnet_id: str | None = Field(
        None, pattern=SUBNET_ID_PATTERN, description="Private subnet of vpc_id in availability_zone."
    )
    second_availability_zone: str | None = Field(
        None,
        pattern=AZ_PATTERN,
        description="A new VPC's second AZ (EKS's control plane needs subnets in two), another of region's than "
        "availability_zone; unset: on EKS and HyperPod with EKS the first other AZ the account lists, by CDK's "
        "lookup as cdk.context.json records it (kiln validate, diff and report read it there, and ask for this "
        "field where none is recorded); on Slurm backends one AZ. Not with vpc_id.",
    )
    interface_endpoints: bool = Field(
        False,
        description="Interface VPC endpoints in the compute subnet for the AWS services the nodes call (SSM, ECR, "
        "EKS auth, CloudWatch Logs, PCS, ...: the backend's list), HTTPS from the VPC only, so their traffic skips "
        "the NAT gateway; each costs an hourly fee. Not with vpc_id: preflight checks an existing VPC's.",
    )
    kept: bool = Field(
        False,
        description="vpc_id and private_subnet_id are the VPC and compute subnet an earlier deploy of this cluster "
        "kept on `cdk destroy` (a PERSISTENT_2 file system's): kiln deploys into them and builds again what the "
        "destroy removed (public subnet, internet gateway, NAT gateway, routes, S3 endpoint, flow log), so a "
        "redeploy takes no new VPC. `kiln leftovers` prints these lines; `kiln preflight` proves the VPC is this "
        "cluster's by the tags CloudFormation set on it. Slurm backends only; vpc_cidr: the kept VPC's.",
    )


class Bucket(SpecModel):
    """The data bucket: checkpoints, datasets, lifecycle scripts."""

    name: str | None = Field(None, description="Bucket name; generated when omitted.")
    retain: bool = Field(True, description="Keep the bucket and its data on `cdk destroy`.")
    existing: bool = Field(
        False,
        description="Use the bucket `name` names, made elsewhere (one an earlier deploy kept, or a team's): kiln "
        "neither creates nor deletes it, so retain does not apply.",
    )


class DataRepository(SpecModel):
    """How FSx links to S3."""

    import_path: str | None = Field(None, description="s3://bucket/prefix; default: the data bucket.")
    export: bool = Field(True, description="Export new and changed files back to S3 automatically.")


class Lustre(SpecModel):
    """FSx for Lustre scratch or persistent file system in the cluster's AZ."""

    deployment: Literal["PERSISTENT_2", "SCRATCH_2"] = "PERSISTENT_2"
    storage_gib: int = Field(1200, description="1200 or a multiple of 2400.")
    throughput_per_tib: int | None = Field(
        None, description="PERSISTENT_2 only: 125, 250, 500 or 1000 MB/s per TiB (default 250)."
    )
    compression: Literal["LZ4", "NONE"] = "LZ4"
    efa: bool = Field(False, description="EFA-enabled file system (PERSISTENT_2 only).")
    data_repository: DataRepository = DataRepository()
    file_system_id: str | None = Field(
        None,
        pattern=FILE_SYSTEM_ID_PATTERN,
        description="Attach this existing file system (one an earlier deploy kept, or a team's) instead of creating "
        "one: in network.vpc_id, with mount_name and security_group_id; kiln neither changes nor deletes it.",
    )
    mount_name: str | None = Field(
        None, pattern=MOUNT_NAME_PATTERN, description="With file_system_id: its mount name, as FSx reports it."
    )
    security_group_id: str | None = Field(
        None,
        pattern=SECURITY_GROUP_ID_PATTERN,
        description="With file_system_id: a group the file system already admits Lustre clients from (TCP 988, "
        "1018-1023); kiln's nodes join it, and kiln adds no rule to it.",
    )

    @property
    def attached(self) -> bool:
        """Return True when the spec attaches an existing file system rather than creating one."""
        return self.file_system_id is not None

    @property
    def effective_throughput_per_tib(self) -> int | None:
        """Return the throughput in force: 250 by default on PERSISTENT_2, none on SCRATCH_2."""
        if self.deployment != "PERSISTENT_2":
            return None
        return self.throughput_per_tib or 250


class Storage(SpecModel):
    """Durable storage: the S3 bucket and an optional Lustre file system."""

    bucket: Bucket = Bucket()
    lustre: Lustre | None = None


class HeadNode(SpecModel):
    """The Slurm head node: ParallelCluster's, HyperPod's controller group. Not on PCS, which runs the controller
    itself, nor with EKS, which runs no Slurm."""

    instance_type: str = "m5.8xlarge"


class LoginNodes(SpecModel):
    """Interactive login nodes where Slurm runs (PCS, ParallelCluster, HyperPod with Slurm); none with EKS."""

    instance_type: str = "m5.2xlarge"
    count: int = Field(1, description="0 for none.")


class Capacity(SpecModel):
    """How a group's instances are bought."""

    type: CapacityType = "on-demand"
    reservation_id: str | None = Field(None, description="cr-... for capacity-block and reservation.")


class ComputeGroup(SpecModel):
    """One homogeneous group of compute nodes (a Slurm partition or node group)."""

    name: str = Field(
        pattern=GROUP_NAME_PATTERN,
        description="Lowercase letters, digits and '-', 1-25 characters, starting with a letter, not ending in '-'.",
    )
    instance_type: str
    min_count: int = 0
    max_count: int = 1
    capacity: Capacity = Capacity()
    placement_group: bool | None = Field(
        None,
        description="A cluster placement group; default: true for EFA instance types outside reserved capacity. Not "
        "on HyperPod, which places its instances itself.",
    )
    root_volume_gib: int = Field(
        200, description=f"Encrypted gp3 root volume, {ROOT_VOLUME_MIN_GIB}-{ROOT_VOLUME_MAX_GIB} GiB."
    )


class Image(SpecModel):
    """The node image: the AMI nodes boot (or kiln bakes on) and its OS."""

    ami_id: str | None = Field(
        None,
        pattern=AMI_ID_PATTERN,
        description="PCS, ParallelCluster, HyperPod Slurm: the AMI nodes boot; with bake, the AMI kiln bakes on "
        "(PCS: one with the PCS agent and Slurm; ParallelCluster: an official ParallelCluster AMI; HyperPod: a "
        "HyperPod base AMI).",
    )
    os: Literal["ubuntu2204", "ubuntu2404", "al2023"] | None = Field(
        None,
        description="The OS the nodes' AMI runs; it also picks the device kiln's launch templates give the root "
        "volume (/dev/xvda on al2023, /dev/sda1 on Ubuntu; kiln preflight checks an ami_id's). "
        "Unset: al2023 on PCS (its sample AMIs run Amazon Linux 2023) and EKS, ubuntu2204 elsewhere.",
    )
    base: Literal["sample", "own", "stock"] | None = Field(
        None,
        description="PCS only: what the AMI is, so kiln knows what it ships. sample (default): a PCS sample AMI (the "
        "one ami_id names, or looked up at deploy); kiln adopts the driver and EFA its release notes list. own: your "
        "own "
        "AMI with the PCS agent and Slurm (needs ami_id); kiln checks each component on the node, installs what is "
        "missing and refuses to put another version over what is there. stock: a stock Ubuntu 22.04/24.04 or Amazon "
        "Linux 2023 AMI (ami_id) that a bake (bake: true) makes PCS-ready with the installers AWS publishes, each "
        "checked against AWS's signature (software.pcs_agent, software.pcs_slurm; needs region).",
    )
    bake: bool = Field(
        False,
        description="Bake the install steps into an AMI (stack <name>-image, EC2 Image Builder) on top of ami_id; "
        "nodes then boot it and run configure steps only, downloading nothing.",
    )


class Compute(SpecModel):
    """The scheduler backend and its nodes."""

    backend: Literal["pcs", "parallelcluster", "hyperpod", "eks"]
    orchestrator: Literal["slurm", "eks"] | None = Field(None, description="hyperpod only; default slurm.")
    head_node: HeadNode = HeadNode()
    login_nodes: LoginNodes = LoginNodes()
    groups: list[ComputeGroup]
    image: Image = Image()
    kubernetes_version: str | None = Field(
        None,
        pattern=KUBERNETES_MINOR_PATTERN,
        description="EKS, and HyperPod orchestrated by EKS: the cluster's Kubernetes minor, one the platform supports "
        "and kiln drives (EKS: "
        + ", ".join(kubernetes_versions("eks"))
        + "; HyperPod: "
        + ", ".join(kubernetes_versions("hyperpod"))
        + "); unset: the newest of those.",
    )


# Said of every component the backend's image may own (kiln.catalog.platforms): kiln adopts the image's copy.
_ADOPTED = (
    "Unset: the copy the backend's image ships where it owns one (kiln adopts it and installs none; a differing "
    "pin is refused unless software.replace names it in a bake), else kiln's {default}."
)


class Software(SpecModel):
    """Pinned versions the bootstrap installs, and the lock file of downloads without a published digest."""

    efa_installer: str | None = Field(
        None,
        pattern=VERSION_PATTERN,
        description="EFA installer; versions with an AWS digest need no lock. "
        + _ADOPTED.format(default=KILN_INSTALLS["efa_installer"]),
    )
    nvidia_driver: str | None = Field(
        None,
        pattern=VERSION_PATTERN,
        description="NVIDIA data center driver from NVIDIA's CUDA repository. "
        + _ADOPTED.format(default=KILN_INSTALLS["nvidia_driver"]),
    )
    nccl: str | None = Field(
        None,
        pattern=NCCL_PATTERN,
        description="NCCL from NVIDIA's CUDA repository as its package version, e.g. 2.27.3-1+cuda12.9; "
        "unset: the framework or container brings its own.",
    )
    nvidia_container_toolkit: str | None = Field(
        None,
        pattern=VERSION_PATTERN,
        description="NVIDIA container toolkit on GPU nodes with containers. "
        + _ADOPTED.format(default=KILN_INSTALLS["nvidia_container_toolkit"]),
    )
    neuron: str | None = Field(
        None,
        pattern=VERSION_PATTERN,
        description="AWS Neuron SDK release for Trainium/Inferentia nodes, one kiln catalogues ("
        + ", ".join(known_neuron_releases())
        + "); refused where it cannot train on a Trainium group's type or serve on an Inferentia group's. Unset: "
        "the copy the backend's image ships where it owns one (kiln adopts it and installs none; a differing pin is "
        "refused unless software.replace names it in a bake), else the newest release whose training (Trainium) or "
        "inference (Inferentia) is generally supported, not beta, on every group's type (`kiln catalog neuron`).",
    )
    slurm: str | None = Field(
        None,
        pattern=VERSION_PATTERN,
        description="PCS only: the Slurm version of the cluster (PCS installs it); unset: the newest PCS runs. Other "
        "backends' images bring their own Slurm.",
    )
    node_exporter: str = Field(
        "1.9.1",
        pattern=VERSION_PATTERN,
        description="Prometheus node exporter release (observability on Slurm backends; EKS runs its Helm chart); "
        "versions with a digest in kiln need no lock.",
    )
    prometheus: str = Field(
        "3.5.0",
        pattern=VERSION_PATTERN,
        description="Prometheus release the agent runs as on Slurm backends (observability.prometheus); versions with "
        "a digest in kiln need no lock.",
    )
    dcgm_exporter: str = Field(
        "4.6.0-4.8.3",
        pattern=DCGM_EXPORTER_PATTERN,
        description="NVIDIA DCGM and DCGM exporter as the pair NVIDIA's releases name, DCGM-EXPORTER "
        "(observability on GPU nodes of Slurm backends; EKS runs NVIDIA's chart, so not there).",
    )
    enroot: str | None = Field(
        None,
        pattern=VERSION_PATTERN,
        description="Built from NVIDIA's source at its release tag's commit: a version kiln pins the commit of. "
        + _ADOPTED.format(default=KILN_INSTALLS["enroot"]),
    )
    pyxis: str | None = Field(
        None,
        pattern=VERSION_PATTERN,
        description="Built from NVIDIA's source at its release tag's commit, against the cluster's Slurm: a version "
        "kiln pins the commit of. " + _ADOPTED.format(default=KILN_INSTALLS["pyxis"]),
    )
    replace: list[Component] = Field(
        default_factory=list,
        description="Components the backend's image owns that kiln replaces with the pinned version, in a bake only "
        "(compute.image.bake): never at boot, where a loaded driver cannot be swapped.",
    )
    pcs_agent: str | None = Field(
        None,
        pattern=VERSION_PATTERN,
        description=f"PCS with compute.image.base stock: the PCS agent release baked in; unset: "
        f"{KILN_INSTALLS['pcs_agent']}.",
    )
    pcs_slurm: str | None = Field(
        None,
        pattern=VERSION_PATTERN,
        description="PCS with compute.image.base stock: the release of PCS's Slurm installer baked in, of the "
        "cluster's Slurm version, e.g. 25.11.2-1 (the installer page of the PCS user guide lists them).",
    )
    containers: bool = Field(True, description="enroot + pyxis (Slurm) or the container toolkit (EKS).")
    lock_file: str | None = Field(
        None,
        pattern=LOCK_FILE_PATTERN,
        description="Lock file beside the spec (relative path ending .json) with the sha256 of downloads that have "
        "no published digest, signature or pinned commit (an EFA installer or exporter release newer than kiln's "
        "table); `kiln bootstrap lock --spec SPEC` writes it. Not with EKS, whose nodes download none.",
    )


class Launcher(SpecModel):
    """Settings for kiln-launch on the nodes."""

    checkpoint_dir: str = Field(
        "/fsx/checkpoints", description="Absolute path of letters, digits and . _ / + @ % = : , - only."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description=f"The launcher's environment over kiln's NCCL/EFA and Neuron presets, at most {MAX_OVERRIDES}: "
        f"a variable (starting with {' or '.join(allowed_prefixes())}; up to {MAX_OVERRIDE_NAME_CHARS} of A-Z, 0-9, _) "
        f"to a value of at most {MAX_OVERRIDE_VALUE_CHARS} letters, digits and ^_,.:/=+-. NCCL_ only with a group "
        "without Neuron devices, NEURON_ and CCOM_ only with a Neuron group; each type's nodes and pods get the names "
        "they read.",
    )
    nccl_env: dict[str, str] = Field(
        default_factory=dict,
        description="The older name of env, read the same way; a spec sets one of the two.",
    )

    @property
    def env_field(self) -> str:
        """Return the name the spec gave the launcher's environment under: env, or its older name nccl_env (the one
        that holds variables; a dumped spec has both, one empty)."""
        return "nccl_env" if self.nccl_env and not self.env else "env"

    @property
    def environment(self) -> dict[str, str]:
        """Return the launcher's environment, under whichever of its two names the spec set."""
        return dict(self.nccl_env if self.env_field == "nccl_env" else self.env)


class Observability(SpecModel):
    """Prometheus exporters on the nodes (ports: node 9100, Slurm 9341, DCGM 9400, EFA 9342)."""

    node_exporter: bool = Field(
        True, description="Prometheus's node exporter on every node (EKS: its Helm chart as a DaemonSet)."
    )
    slurm_exporter: bool | None = Field(
        None,
        description="kiln's Slurm exporter beside the Slurm controller (PCS: on its login nodes); unset: wherever "
        "kiln can run it (not on EKS, which runs no Slurm, nor on PCS without login nodes).",
    )
    dcgm_exporter: bool = Field(
        True, description="NVIDIA's DCGM exporter on GPU nodes (EKS: NVIDIA's Helm chart on the GPU node groups)."
    )
    efa_exporter: bool = Field(
        True,
        description="kiln's EFA hardware-counter exporter, where the cluster has EFA nodes (Slurm backends: on every "
        "node, so each one's device count shows; EKS: on the training nodes).",
    )
    prometheus: bool = Field(
        False,
        description="An Amazon Managed Service for Prometheus workspace (kept like the data bucket) that the "
        "exporters' metrics go to, labelled cluster=<name>: on EKS through an AWS managed collector, on Slurm backends "
        "through a Prometheus agent on the Slurm exporter's node (it finds the nodes through sinfo); the local cluster "
        "runs Debian's Prometheus over its exporters instead.",
    )
    grafana: bool = Field(
        False,
        description="An Amazon Managed Grafana workspace (sign-in through IAM Identity Center, which the account must "
        "have) with kiln's dashboards (cluster, GPU, EFA, Slurm) over the Prometheus workspace; needs prometheus.",
    )


class UserStep(SpecModel):
    """One of your own scripts, run on the nodes by kiln's bootstrap under the contract of its own steps."""

    name: str = Field(
        pattern=USER_STEP_NAME_PATTERN,
        description="Names the step in the node's log, its marker and failures: lowercase letters, digits and '_'.",
    )
    path: str = Field(
        pattern=USER_STEP_PATH_PATTERN,
        description="The script, relative to the spec's directory and inside it (no '..', no absolute path, no "
        "symlink out), starting with '#!', at most 256 KiB; it ships in the bundle with its sha256, which the node "
        "checks before running it as root.",
    )
    phase: Literal["install", "configure"] = Field(
        description="install: after kiln's install steps, once per version of the script (its sha256 is the step's "
        "pin: a node or image that ran it skips it), baked into the image with compute.image.bake; configure: after "
        "kiln's configure steps, at every boot (keep it idempotent).",
    )
    roles: list[Literal["controller", "login", "compute"]] = Field(
        min_length=1,
        description="The nodes it runs on: controller (ParallelCluster's head node, HyperPod's controller), login, "
        "compute; only roles the backend has.",
    )


class Bootstrap(SpecModel):
    """Your own steps in the nodes' bootstrap."""

    steps: list[UserStep] = Field(
        default_factory=list,
        description="Run in this order after kiln's steps of the same phase; at most 16, names unique.",
    )


class CodeServer(SpecModel):
    """code-server (VS Code in a browser) where you log in: PCS's login nodes, ParallelCluster's login nodes (else its
    head node), HyperPod's login group (else its controller), a pod with the FSx volume on EKS."""

    user: str | None = Field(
        None,
        pattern=LINUX_USER_PATTERN,
        description="The user it runs as: an existing user without sudo, with a home and a login shell (never root, "
        "a system account, the image's default user or ssm-user, all of them refused here; the node refuses a sudoer "
        "or a member of a root-equivalent group); unset: coder, a user kiln creates on every node with uid 59000 and "
        "no sudo. It listens on 127.0.0.1 only; `kiln connect --vscode` forwards a local port to it.",
    )


class Iam(SpecModel):
    """IAM settings of every role kiln's stacks create."""

    permissions_boundary: str | None = Field(
        None,
        pattern=PERMISSIONS_BOUNDARY_PATTERN,
        description="A customer managed policy (name or ARN) every IAM role of the cluster carries as its permissions "
        "boundary, ParallelCluster's own roles included; unset: none, except in a CI environment, whose roles carry "
        f"{BOUNDARY_NAME} (made by `kiln ci identity`).",
    )


class SessionLogs(SpecModel):
    """Session Manager logs of the shells `kiln connect` opens: a Session document of the cluster's own
    (kiln-<name>-session), never the account's shared preferences."""

    destination: Literal["s3", "cloudwatch"] = Field(
        description="s3: the cluster's bucket under session-logs/ (its default encryption); cloudwatch: a log group of "
        "the cluster's, encrypted with a key of its own. Either way the session itself is encrypted with that key "
        "(kmsKeyId). PCS, ParallelCluster and HyperPod with Slurm; refused on EKS and HyperPod with EKS, reached "
        "through the Kubernetes API.",
    )


class Resilience(SpecModel):
    """What keeps a training run going: node health checks, replacement of bad nodes, jobs that resume by
    themselves, and hung jobs caught (docs/resilience.md)."""

    health_checks: bool = Field(
        True,
        description="kiln's node health check (`kiln-launch health`) on every compute node, as the scheduler runs "
        "health checks (Slurm: a failing node is drained with the check's line as its reason), plus the platform's "
        "own checks where it has them (ParallelCluster's GPU health check; EKS: the node monitoring agent add-on).",
    )
    health_check_interval_s: int = Field(
        300,
        description="Seconds between two runs of the health check on an idle or busy node (Slurm's "
        "HealthCheckInterval); 60 to 3600.",
    )
    deep_health_checks: bool = Field(
        True,
        description="HyperPod: the deep health checks (InstanceStress, InstanceConnectivity) when an accelerated "
        "group's nodes start or are replaced.",
    )
    node_recovery: Literal["automatic", "none"] = Field(
        "automatic",
        description="What replaces an unhealthy node: automatic uses the platform's own mechanism (HyperPod's "
        "NodeRecovery, EKS managed node groups' node repair, ParallelCluster's and PCS's replacement of unhealthy "
        "instances); none leaves a drained node for you (HyperPod and EKS only: ParallelCluster and PCS give kiln no "
        "switch to turn replacement off).",
    )
    auto_resume: bool = Field(
        True,
        description="Jobs started the kiln way (kiln-launch under sbatch, kiln job submit) are requeued after a node "
        "fails or a job hangs, and resume from their newest complete checkpoint. On Slurm, sbatch on the cluster's "
        "nodes submits requeueable jobs (SBATCH_REQUEUE; false: SBATCH_NO_REQUEUE); on HyperPod add srun's "
        "--auto-resume=1 to a job step for HyperPod's own auto-resume.",
    )
    hang_factor: int = Field(
        10,
        description="kiln-launch declares a job hung when no rank has finished a step for this many median step "
        "times (and at least hang_min_s); 2 to 1000.",
    )
    hang_min_s: int = Field(
        300,
        description="The shortest stall kiln-launch calls a hang, in seconds (covers checkpoint saves and "
        "evaluation between steps); 10 to 86400.",
    )
    allow_tcp: bool = Field(
        False,
        description="Let a job on a GPU node with EFA start when NCCL chose TCP sockets instead of EFA; by default "
        "every rank checks NCCL's transport at start and the job stops in one line.",
    )


class Ci(SpecModel):
    """Short-lived environments for CI."""

    ttl_hours: float | None = Field(
        None,
        description=f"Delete the whole environment this long after deploy: {TTL_RULE}.",
    )


class ClusterSpec(SpecModel):
    """A whole kiln cluster, version 1."""

    # The directory of the file the spec was loaded from (load_spec sets it): relative paths in the spec
    # (software.lock_file) are below it. None for a spec built in code: the current directory.
    _source_dir: Path | None = PrivateAttr(None)
    # The file itself and the line of each field (load_spec sets them), for problems found past the rules: a script of
    # bootstrap.steps that cannot be shipped (kiln.node_config.user_steps). None and empty for a spec built in code.
    _source_file: str | None = PrivateAttr(None)
    _source_lines: dict[tuple[str | int, ...], int] = PrivateAttr(default_factory=dict)

    name: str = Field(pattern=NAME_PATTERN, description="Prefixes resource names.")
    region: str | None = Field(None, pattern=REGION_PATTERN, description="Omit for env-agnostic stacks.")
    availability_zone: str | None = Field(
        None, pattern=AZ_PATTERN, description="Compute, FSx and placement group share it (EFA)."
    )
    network: Network = Network()
    storage: Storage = Storage()
    compute: Compute
    software: Software = Software()
    launcher: Launcher = Launcher()
    resilience: Resilience = Resilience()
    ci: Ci = Ci()
    iam: Iam = Iam()
    observability: Observability | None = Field(None, description="Metrics exporters on the nodes; leave out for none.")
    bootstrap: Bootstrap = Bootstrap()
    code_server: CodeServer | None = Field(
        None, description="VS Code in a browser on the node you log in to; leave out for none."
    )
    session_logs: SessionLogs | None = Field(
        None, description="Log the Session Manager shells `kiln connect` opens; leave out for none."
    )
    tags: dict[str, str] = Field(
        default_factory=dict,
        description=f"Tags for every resource: at most {MAX_SPEC_TAGS}, keys 1-128 and values 0-256 of letters, "
        "digits, spaces and _ . : / = + - @; no key that starts (in any case, after spaces) with aws:, "
        "parallelcluster:, eks:, sagemaker:, k8s.io/cluster-autoscaler/ or kiln:.",
    )

    @property
    def lock_path(self) -> Path | None:
        """Return where software.lock_file is, or None when the spec names no lock file."""
        if self.software.lock_file is None:
            return None
        return (self._source_dir or Path()) / self.software.lock_file

    @property
    def node_image(self) -> str:
        """Return the image profile nodes boot (kiln.catalog.platforms): the image the backend publishes, or on PCS
        with base own the AMI compute.image.ami_id names (kiln knows nothing it ships and checks each component on the
        node). Elsewhere ami_id is taken to be built from the backend's own image, as its description asks."""
        if self.platform is PCS and self.compute.image.base == "own":
            return "pcs-custom"
        if self.platform is PCS and self.compute.image.base == "stock":
            return "pcs-stock"
        if self.platform is HYPERPOD_EKS:
            return "hyperpod-eks"
        return image_profile_for(self.compute.backend)

    @property
    def slurm_version(self) -> str | None:
        """Return the Slurm version a PCS cluster runs (software.slurm, else PCS's newest); None elsewhere."""
        if self.platform is not PCS:
            return None
        return self.software.slurm or newest_pcs_slurm()

    @property
    def neuron_release(self) -> str | None:
        """Return the Neuron SDK release of the cluster's Neuron nodes (software.neuron, else the default for the
        compute groups' types: kiln.catalog.neuron.default_neuron_release); None without Neuron devices."""
        return resolve_neuron_release(self.software.neuron, [group.instance_type for group in self.compute.groups])

    @property
    def image_os(self) -> str:
        """Return the OS nodes boot: compute.image.os, else the backend's usual one (PCS's sample AMIs and EKS's
        accelerated AMIs run Amazon Linux 2023; ParallelCluster and HyperPod Slurm default to Ubuntu 22.04)."""
        if self.compute.image.os is not None:
            return self.compute.image.os
        if self.platform is PCS or self.platform.uses_kubernetes:
            return "al2023"
        return "ubuntu2204"

    @property
    def smallest_root_volume_gib(self) -> int | None:
        """Return the smallest root volume of a node that boots compute.image (baked or ami_id): every such volume
        must hold the image's snapshot (EC2 refuses a smaller one). None on HyperPod, which sizes root volumes itself
        (a group's root_volume_gib is a secondary volume there), and on EKS, whose nodes boot EKS's image."""
        backend = self.compute.backend
        if backend in (HYPERPOD.backend, EKS.backend):
            return None
        sizes = [group.root_volume_gib for group in self.compute.groups]
        # ParallelCluster's head and login nodes and PCS's login nodes boot the image too, at kiln's size for them.
        if backend == PARALLELCLUSTER.backend or self.compute.login_nodes.count:
            sizes.append(SERVICE_NODE_ROOT_VOLUME_GIB)
        return min(sizes)

    @property
    def kubernetes_version(self) -> str | None:
        """Return the Kubernetes minor of the cluster's EKS control plane (the spec's, or the newest kiln runs on the
        backend); None where no EKS cluster runs."""
        if not self.platform.uses_kubernetes:
            return None
        return self.compute.kubernetes_version or default_kubernetes_version(self.compute.backend)

    @property
    def platform(self) -> Platform:
        """Return the spec's row of the backend table (kiln.contracts.backends): its backend with the orchestrator in
        force."""
        return platform_of(self.compute.backend, self.compute.orchestrator)

    @property
    def effective_orchestrator(self) -> str | None:
        """Return the orchestrator in force: hyperpod defaults to slurm, others have none."""
        return self.platform.orchestrator
