"""ComputeStack: the scheduler backend the spec names, with nodes booting kiln's bootstrap."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from kiln.bootstrap.config import config_from_spec
from kiln.constructs import CapacityOption
from kiln.constructs.bootstrap_assets import BootstrapAssets, BootstrapAssetsProps
from kiln.constructs.eks import EksTrainingCluster, EksTrainingClusterProps, GpuNodeGroup, LustreVolume, SystemNodeGroup
from kiln.constructs.hyperpod import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from kiln.constructs.parallelcluster import ParallelCluster, ParallelClusterProps, SlurmQueue
from kiln.constructs.pcs import PcsCluster, PcsClusterProps, PcsNodeGroup
from kiln.spec import ClusterSpec
from kiln.stacks.network import NetworkStack, wants_placement_group
from kiln.stacks.storage import StorageStack

BACKENDS_WITH_COMPUTE = ("pcs", "parallelcluster", "hyperpod", "eks")
MOUNT_POINT = "/fsx"


def has_compute(spec: ClusterSpec) -> bool:
    """Return whether kiln builds a compute stack for SPEC."""
    return spec.compute.backend in BACKENDS_WITH_COMPUTE


def _capacity(group: Any) -> CapacityOption:
    return CapacityOption(type=group.capacity.type, reservation_id=group.capacity.reservation_id)


class ComputeStack(cdk.Stack):
    """Slurm on AWS PCS or AWS ParallelCluster, picked by spec.compute.backend."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: ClusterSpec,
        network: NetworkStack,
        storage: StorageStack,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope, construct_id, description=f"kiln {spec.name}: compute ({spec.compute.backend})", **kwargs
        )
        if not has_compute(spec):
            raise ValueError(
                f"compute.backend: got {spec.compute.backend!r}; allowed here: {', '.join(BACKENDS_WITH_COMPUTE)}"
            )
        self.spec, self.network, self.storage = spec, network, storage
        self.pcs: PcsCluster | None = None
        self.parallelcluster: ParallelCluster | None = None
        self.hyperpod: HyperPodCluster | None = None
        self.eks: EksTrainingCluster | None = None
        if spec.effective_orchestrator == "eks":
            self.eks = self._eks(with_gpu_groups=False)
        if spec.compute.backend == "eks":
            self.eks = self._eks(with_gpu_groups=True)
            return
        if spec.compute.backend == "hyperpod":
            self.hyperpod = self._hyperpod()
            return
        self.bootstrap = BootstrapAssets(self, "Bootstrap", BootstrapAssetsProps(config=config_from_spec(spec)))
        if spec.compute.backend == "pcs":
            self.pcs = self._pcs()
        else:
            self.parallelcluster = self._parallelcluster()

    def _cluster_env(self, *, mounts_fsx: bool) -> dict[str, str]:
        values = {
            "KILN_CLUSTER_NAME": self.spec.name,
            "KILN_REGION": cdk.Aws.REGION,
            "KILN_BUCKET": self.storage.bucket.bucket_name,
        }
        if mounts_fsx and self.storage.lustre is not None:
            values |= {
                "KILN_FSX_DNS": self.storage.lustre.dns_name,
                "KILN_FSX_MOUNT_NAME": self.storage.lustre.mount_name,
                "KILN_MOUNT_POINT": MOUNT_POINT,
            }
        return values

    def _client_groups(self) -> list:
        return [self.storage.lustre_clients] if self.storage.lustre_clients is not None else []

    def _placement(self, group: Any) -> str | None:
        placement = self.network.placement_groups.get(group.name)
        return placement.placement_group_name if placement and wants_placement_group(group) else None

    def _node_group_fields(self, group: Any) -> dict[str, Any]:
        """Return what a spec group says about a node group, in the node-group props' terms."""
        return {
            "name": group.name,
            "instance_type": group.instance_type,
            "min_count": group.min_count,
            "max_count": group.max_count,
            "capacity": _capacity(group),
            "root_volume_gib": group.root_volume_gib,
            "placement_group_name": self._placement(group),
        }

    def _ami(self) -> str:
        if self.spec.compute.image.ami_id:
            return self.spec.compute.image.ami_id
        parameter = cdk.CfnParameter(
            self,
            "PcsAmiId",
            type="AWS::EC2::Image::Id",
            description="AMI with the AWS PCS agent and the cluster's Slurm (or set compute.image.ami_id in the spec)",
        )
        return parameter.value_as_string

    def _pcs(self) -> PcsCluster:
        spec = self.spec
        groups = [PcsNodeGroup(**self._node_group_fields(g)) for g in spec.compute.groups]
        login = spec.compute.login_nodes
        return PcsCluster(
            self,
            "Pcs",
            PcsClusterProps(
                vpc=self.network.training_vpc.vpc,
                subnet=self.network.training_vpc.compute_subnet,
                efa_security_group=self.network.efa.security_group,
                ami_id=self._ami(),
                compute_groups=groups,
                login=PcsNodeGroup(
                    name="login", instance_type=login.instance_type, min_count=login.count, max_count=login.count
                )
                if login.count
                else None,
                bootstrap=self.bootstrap,
                cluster_env=self._cluster_env(mounts_fsx=True),
                slurm_version=spec.software.slurm,
                security_groups=self._client_groups(),
            ),
        )

    def _parallelcluster(self) -> ParallelCluster:
        spec = self.spec
        queues = [
            SlurmQueue(
                name=g.name,
                instance_type=g.instance_type,
                min_count=g.min_count,
                max_count=g.max_count,
                capacity=_capacity(g),
                placement_group=wants_placement_group(g),
                root_volume_gib=g.root_volume_gib,
            )
            for g in spec.compute.groups
        ]
        return ParallelCluster(
            self,
            "ParallelCluster",
            ParallelClusterProps(
                cluster_name=spec.name,
                subnet=self.network.training_vpc.compute_subnet,
                queues=queues,
                bootstrap=self.bootstrap,
                cluster_env=self._cluster_env(mounts_fsx=False),
                head_node_instance_type=spec.compute.head_node.instance_type,
                login_instance_type=spec.compute.login_nodes.instance_type,
                login_count=spec.compute.login_nodes.count,
                os=spec.compute.image.os,
                custom_ami=spec.compute.image.ami_id,
                fsx_file_system_id=self.storage.lustre.file_system_id if self.storage.lustre else None,
                fsx_mount_dir=MOUNT_POINT,
                security_groups=self._client_groups(),
            ),
        )

    def _hyperpod_groups(self) -> list[HyperPodInstanceGroup]:
        compute = self.spec.compute
        groups = []
        if self.spec.effective_orchestrator == "slurm":
            groups.append(
                HyperPodInstanceGroup(
                    name="controller", instance_type=compute.head_node.instance_type, count=1, role="controller"
                )
            )
            if compute.login_nodes.count:
                groups.append(
                    HyperPodInstanceGroup(
                        name="login",
                        instance_type=compute.login_nodes.instance_type,
                        count=compute.login_nodes.count,
                        role="login",
                    )
                )
        groups += [
            HyperPodInstanceGroup(
                name=g.name, instance_type=g.instance_type, count=g.max_count, storage_gib=g.root_volume_gib
            )
            for g in compute.groups
        ]
        return groups

    def _provisioning_parameters(self, groups: list[HyperPodInstanceGroup]) -> dict[str, Any]:
        """Return the Slurm layout in HyperPod's provisioning_parameters.json form."""
        parameters: dict[str, Any] = {
            "version": "1.0.0",
            "workload_manager": "slurm",
            "controller_group": "controller",
            "worker_groups": [
                {"instance_group_name": g.name, "partition_name": g.name} for g in groups if g.role == "worker"
            ],
        }
        if any(g.role == "login" for g in groups):
            parameters["login_group"] = "login"
        if self.storage.lustre is not None:
            parameters |= {
                "fsx_dns_name": self.storage.lustre.dns_name,
                "fsx_mountname": self.storage.lustre.mount_name,
            }
        return parameters

    def _hyperpod(self) -> HyperPodCluster:
        spec = self.spec
        groups = self._hyperpod_groups()
        slurm = spec.effective_orchestrator == "slurm"
        return HyperPodCluster(
            self,
            "HyperPod",
            HyperPodClusterProps(
                cluster_name=spec.name,
                vpc=self.network.training_vpc.vpc,
                subnet=self.network.training_vpc.compute_subnet,
                security_groups=[self.network.efa.security_group, *self._client_groups()],
                instance_groups=groups,
                lifecycle=config_from_spec(spec),
                cluster_env=self._cluster_env(mounts_fsx=True),
                provisioning_parameters=self._provisioning_parameters(groups) if slurm else {},
                orchestrator=spec.effective_orchestrator,
                eks_cluster_arn=self.eks.cluster_arn if self.eks else None,
            ),
        )

    def _eks_cluster_group(self) -> list[ec2.ISecurityGroup]:
        if self.eks is None:
            return []
        # HyperPod's EKS nodes talk to the control plane through the cluster security group.
        return [
            ec2.SecurityGroup.from_security_group_id(
                self, "EksClusterSecurityGroup", self.eks.cluster_security_group_id
            )
        ]

    def _lustre_volume(self) -> LustreVolume | None:
        fs = self.storage.lustre
        if fs is None or self.storage.lustre_clients is None:
            return None
        return LustreVolume(
            file_system_id=fs.file_system_id,
            dns_name=fs.dns_name,
            mount_name=fs.mount_name,
            client_security_group=self.storage.lustre_clients,
            storage_gib=self.spec.storage.lustre.storage_gib,
        )

    def _eks(self, *, with_gpu_groups: bool) -> EksTrainingCluster:
        spec = self.spec
        gpu_groups = (
            [GpuNodeGroup(**self._node_group_fields(g)) for g in spec.compute.groups] if with_gpu_groups else []
        )
        bootstrap = None
        if with_gpu_groups:
            bootstrap = BootstrapAssets(self, "Bootstrap", BootstrapAssetsProps(config=config_from_spec(spec)))
        return EksTrainingCluster(
            self,
            "Eks",
            EksTrainingClusterProps(
                vpc=self.network.training_vpc.vpc,
                node_subnet=self.network.training_vpc.compute_subnet,
                efa_security_group=self.network.efa.security_group,
                gpu_groups=gpu_groups,
                # HyperPod brings the nodes; EKS alone needs a small CPU group for cluster services.
                system_nodes=SystemNodeGroup() if with_gpu_groups else None,
                cluster_name=spec.name,
                lustre=self._lustre_volume(),
                bootstrap=bootstrap,
                cluster_env=self._cluster_env(mounts_fsx=False) if with_gpu_groups else {},
            ),
        )
