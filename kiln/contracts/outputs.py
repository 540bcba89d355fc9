"""The stacks' outputs: kiln.stacks writes them under these keys; `kiln ci` and `kiln connect` find the cluster by
the compute stack's (kiln.aws.remote.cluster.ClusterHandle), `kiln ami build` the image pipeline by the image stack's.
A key is part of what a deployed stack promises: renaming one breaks every cluster deployed before."""

from __future__ import annotations

from enum import Enum


class ComputeOutput(str, Enum):
    """An output key of the `<name>-compute` stack."""

    # pcs, parallelcluster, hyperpod or eks.
    BACKEND = "Backend"
    # slurm or eks on HyperPod, none elsewhere.
    ORCHESTRATOR = "Orchestrator"
    # The backend's name for the cluster (the spec's name, or the CI environment's).
    CLUSTER_NAME = "ClusterName"
    PCS_CLUSTER_ID = "PcsClusterId"
    # Only when the spec has login nodes.
    PCS_LOGIN_NODE_GROUP_ID = "PcsLoginNodeGroupId"
    HYPERPOD_CLUSTER_ARN = "HyperPodClusterArn"
    EKS_CLUSTER_NAME = "EksClusterName"
    # Only with spec session_logs: the key that encrypts sessions with the cluster's own session document.
    SESSION_KEY_ARN = "SessionKeyArn"


class ImageOutput(str, Enum):
    """An output key of the `<name>-image` stack (compute.image.bake)."""

    PIPELINE_ARN = "PipelineArn"
    IMAGE_ID = "ImageId"
    # The SSM parameter that holds the newest AMI's id (kiln.contracts.image.image_parameter_name).
    IMAGE_PARAMETER = "ImageParameter"
