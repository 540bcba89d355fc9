"""A compute group in a capacity block or reservation deploys through CI: every call its backend's service documents
for that path is allowed to whoever makes it (CloudFormation's execution role for PCS's node groups, ParallelCluster's
own roles inside kiln's boundary), evaluated with IAM's logic (tests/support/iam_eval)."""

from __future__ import annotations

import inspect
import json
from importlib.metadata import version
from pathlib import Path

import pcluster
import pytest

from kiln.contracts import execution_policy
from kiln.contracts.execution_policy import CAPACITY_CALLS, execution_policies, execution_statements
from kiln.contracts.permissions_boundary import BOUNDARY_NAME, PCLUSTER_CAPACITY_CALLS, boundary_document
from tests.support.iam_eval import decision

ACCOUNT = "111122223333"
VARIABLES = {"aws:PrincipalAccount": ACCOUNT}
BOUNDARY = boundary_document(f"arn:aws:iam::{ACCOUNT}:policy/{BOUNDARY_NAME}")["Statement"]
CLUSTERS = ("ci-smoke", "llm")
RESERVATION = f"arn:aws:ec2:us-east-1:{ACCOUNT}:capacity-reservation/cr-0123456789abcdef0"
DOCUMENTED = [(backend, action) for backend, calls in CAPACITY_CALLS.items() for action in calls]


def _executed(clusters=CLUSTERS) -> list[dict]:
    """The statements as IAM reads them: every managed policy the execution role holds, packed."""
    policies = execution_policies(clusters, qualifier="hnb659fds", name_base="kiln-ci-exec-o-r")
    return [statement for policy in policies for statement in policy.document["Statement"]]


def test_pcs_capacity_block_node_groups_need_what_pcs_documents() -> None:
    # PCS's node group page names this one; the minimum-permissions page adds the two Capacity Block reads.
    assert set(CAPACITY_CALLS["pcs"]) == {
        "ec2:DescribeCapacityReservations",
        "ec2:DescribeCapacityBlocks",
        "ec2:DescribeCapacityBlockStatus",
    }
    assert all(source.startswith("https://docs.aws.amazon.com/pcs/") for source in CAPACITY_CALLS["pcs"].values())


@pytest.mark.parametrize(("backend", "action"), DOCUMENTED, ids=[f"{b}-{a}" for b, a in DOCUMENTED])
def test_the_execution_policies_allow_every_documented_capacity_call(backend: str, action: str) -> None:
    assert decision(_executed(), action, "*", variables=VARIABLES) == "Allow", (backend, action)


def test_the_pcs_reservation_read_is_allowed_by_the_policies_ci_hands_cloudformation() -> None:
    """The call PCS refuses a capacity-block node group without, evaluated against every statement kiln writes."""
    statements = execution_statements(CLUSTERS, qualifier="hnb659fds")
    assert decision(statements, "ec2:DescribeCapacityReservations", "*", variables=VARIABLES) == "Allow"


@pytest.mark.parametrize("action", sorted({a for _, a in DOCUMENTED} | set(PCLUSTER_CAPACITY_CALLS)))
def test_the_boundary_leaves_every_capacity_call(action: str) -> None:
    """ParallelCluster's head node (inside kiln's boundary) runs its compute nodes into the reservation."""
    resource = RESERVATION if action in ("ec2:RunInstances", "ec2:CreateFleet") else "*"
    assert decision(BOUNDARY, action, resource) == "Allow"


def test_parallelclusters_calls_come_from_its_head_node_policy() -> None:
    """Each is an action of the head node's policy in the installed ParallelCluster package (its version's source)."""
    policy = (Path(inspect.getfile(pcluster)).parent / "templates" / "cdk_builder_utils.py").read_text()
    assert version("aws-parallelcluster") == "3.16.1"
    assert set(PCLUSTER_CAPACITY_CALLS) >= {"ec2:DescribeCapacityReservations", "ec2:RunInstances"}
    for action, source in PCLUSTER_CAPACITY_CALLS.items():
        assert f'"{action}"' in policy, action
        assert source.endswith("/v3.16.1/cli/src/pcluster/templates/cdk_builder_utils.py")


def test_the_boundary_and_the_policies_still_fit_iams_limits() -> None:
    text = json.dumps(boundary_document(f"arn:aws:iam::{ACCOUNT}:policy/{BOUNDARY_NAME}"), separators=(",", ":"))
    assert len(text) <= execution_policy.MANAGED_POLICY_MAX_CHARS
    longest = tuple(f"cluster-{i}-abcdefgh" for i in range(6))
    policies = execution_policies(longest, qualifier="hnb659fds", name_base="kiln-ci-exec-o-r")
    assert len(policies) <= execution_policy.MAX_POLICIES
    assert all(policy.size <= execution_policy.MANAGED_POLICY_MAX_CHARS for policy in policies)
