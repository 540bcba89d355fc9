"""A HyperPod EKS cluster construct built for tests."""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks

from kiln.constructs.hyperpod import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from tests.support.constructs import imported_vpc, plain_bootstrap


def _eks_hyperpod(st: Stack, eks_cluster: eks.ICluster) -> HyperPodCluster:
    vpc = imported_vpc(st)
    return HyperPodCluster(
        st,
        "Cluster",
        HyperPodClusterProps(
            cluster_name="llm-hp-eks",
            vpc=vpc,
            subnet=vpc.private_subnets[0],
            instance_groups=[HyperPodInstanceGroup(name="p5", instance_type="p5.48xlarge", count=2)],
            lifecycle=plain_bootstrap(st, "eks-user-data.sh"),
            cluster_env={"KILN_CLUSTER_NAME": "llm-hp-eks", "KILN_REGION": "us-east-1"},
            orchestrator="eks",
            eks_cluster=eks_cluster,
        ),
    )
