"""Spec tags stay out of the key prefixes AWS, the platforms and kiln's IAM reserve (services.ec2
reserved_tag_prefixes): each refused in one line with its reason, in any case and after white space, as AWS reads
aws:."""

from __future__ import annotations

import copy

import pytest

from kiln.catalog.platforms import service_fact
from tests.support.specs import MINIMAL_SPEC, spec_problems


def problems(tags: dict[str, str]) -> list[str]:
    return spec_problems(copy.deepcopy(MINIMAL_SPEC) | {"tags": tags})


@pytest.mark.parametrize(
    ("key", "prefix", "reason"),
    [
        ("aws:owner", "aws:", "reserved by AWS"),
        (" aws:owner", "aws:", "reserved by AWS"),
        ("AwS:owner", "aws:", "reserved by AWS"),
        ("\taws:x", "aws:", "reserved by AWS"),
        ("parallelcluster:cluster-name", "parallelcluster:", "ParallelCluster's own tags"),
        ("ParallelCluster:node-type", "parallelcluster:", "ParallelCluster's own tags"),
        ("k8s.io/cluster-autoscaler/enabled", "k8s.io/cluster-autoscaler/", "kiln's autoscaler IAM"),
        ("eks:cluster-name", "eks:", "EKS's own tags"),
        (" EKS:nodegroup-name", "eks:", "EKS's own tags"),
        ("sagemaker:project", "sagemaker:", "SageMaker's own tags"),
        ("KILN:cluster", "kiln:", "kiln's own tags"),
    ],
)
def test_a_reserved_prefix_is_refused_in_one_line_with_its_reason(key: str, prefix: str, reason: str) -> None:
    [line] = problems({key: "x"})
    assert f"must not start with {prefix!r} (" in line and reason in line, line
    assert "\n" not in line


@pytest.mark.parametrize("key", ["owner", "team:aws:x", "eksample", "sagemakers", "k8s.io/cluster-name", "awsome"])
def test_keys_that_only_resemble_a_reserved_prefix_are_kept(key: str) -> None:
    assert problems({key: "x"}) == []


def test_every_reserved_prefix_names_its_reason_and_source() -> None:
    prefixes = service_fact("ec2", "reserved_tag_prefixes").value
    assert set(prefixes) == {"aws:", "parallelcluster:", "k8s.io/cluster-autoscaler/", "eks:", "sagemaker:"}
    for prefix, entry in prefixes.items():
        assert entry["reason"] and entry["source"].startswith("https://"), prefix
    # The autoscaler's prefix is the one kiln's IAM conditions on (services.eks cluster_autoscaler).
    autoscaler = service_fact("eks", "cluster_autoscaler").value
    assert autoscaler["owned_tag_prefix"].startswith("k8s.io/cluster-autoscaler/")
