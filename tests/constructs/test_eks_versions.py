"""HyperPod on EKS runs a Kubernetes version every AWS page on HyperPod's versions lists (issue 45, A8).

HyperPod's AMI support policy serves EKS up to 1.35 while every copy of its EKS prerequisites page read stops at
1.34 (platforms.json, images.hyperpod-eks.facts.kubernetes_versions, with both pages). kiln offers the versions
both list, defaults to the newest it drives, and drives it end to end: the kubectl layer, the install Jobs' tools,
the second kube-scheduler and the cluster-autoscaler of that minor.
"""

from __future__ import annotations

from kiln.catalog.kubernetes import (
    KUBECTL_RELEASES,
    default_kubernetes_version,
    kubernetes_source,
    kubernetes_versions,
    platform_kubernetes_versions,
)
from kiln.catalog.platforms import image_profile
from kiln.constructs.eks_addons import KUBERNETES_RELEASES
from kiln.constructs.eks_install import install_tools
from kiln.constructs.eks_scheduling import CLUSTER_AUTOSCALER_FACTS
from tests.support.eks_specs import HYPERPOD_EKS, spec_with
from tests.support.specs import spec_problems

PAGES = image_profile("hyperpod-eks").fact("kubernetes_versions").value


def test_both_pages_are_in_the_data_and_disagree_on_the_newest():
    ami, prerequisites = PAGES["ami_releases"], PAGES["prerequisites"]
    assert ami["source"].endswith("/sagemaker-hyperpod-ami-support-policy.html")
    assert prerequisites["source"].endswith("/sagemaker-hyperpod-eks-prerequisites.html")
    assert "1.35" in ami["versions"] and "1.35" not in prerequisites["versions"]


def test_hyperpod_offers_only_what_both_pages_list_and_defaults_to_the_newest_kiln_drives():
    both = [v for v in PAGES["ami_releases"]["versions"] if v in PAGES["prerequisites"]["versions"]]
    assert platform_kubernetes_versions("hyperpod") == tuple(both)
    assert kubernetes_versions("hyperpod") == ("1.34",)
    assert default_kubernetes_version("hyperpod") == "1.34"
    assert all(page["source"] in kubernetes_source("hyperpod") for page in PAGES.values())


def test_every_minor_kiln_offers_is_driven_end_to_end():
    offered = set(kubernetes_versions("hyperpod")) | set(kubernetes_versions("eks"))
    assert offered <= KUBERNETES_RELEASES.keys() == KUBECTL_RELEASES.keys()
    for minor in offered:
        tools = install_tools(minor)
        assert tools.kubectl.version == KUBECTL_RELEASES[minor]
        assert KUBERNETES_RELEASES[minor].version.version == minor
        assert CLUSTER_AUTOSCALER_FACTS["images"][minor].startswith(f"v{minor}.")


def test_kiln_validate_refuses_the_version_only_the_ami_table_lists_in_one_line():
    [line] = spec_problems(spec_with(**{**HYPERPOD_EKS, "kubernetes_version": "1.35"}))
    assert line.startswith(
        "x.yaml: compute.kubernetes_version: got '1.35', allowed on HyperPod orchestrated by EKS: 1.34"
    )
    assert all(page["source"] in line for page in PAGES.values())
