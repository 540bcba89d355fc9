"""EKS's launch templates map the root volume to the root device of the EKS-optimized AMI every node group boots
(platforms.json, images.eks-al2023 and ec2.root_device_names), on the shared EKS clusters
(tests/support/eks_clusters.py)."""

from __future__ import annotations

from kiln.catalog.platforms import image_profile, root_device_name
from kiln.constructs.eks_node_groups import EKS_ROOT_DEVICE
from tests.support.constructs import root_devices


def test_every_eks_launch_template_maps_the_eks_amis_root_device(eks) -> None:
    # Every EKS node group boots an EKS-optimized AL2023 AMI: the accelerated groups and the system group alike.
    (os,) = image_profile("eks-al2023").fact("operating_systems").value
    assert EKS_ROOT_DEVICE == root_device_name(os) == "/dev/xvda"
    devices = root_devices(eks["template"])
    # p5, spot, odcr and the system group; HyperPod's orchestrator cluster has its system group alone.
    assert len(devices) == 4 and len(root_devices(eks["hp_template"])) == 1
    devices |= root_devices(eks["hp_template"])
    assert all(names == [EKS_ROOT_DEVICE] for names in devices.values()), devices
