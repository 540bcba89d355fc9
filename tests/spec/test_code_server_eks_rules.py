"""code_server on EKS and HyperPod with EKS: a pod with the FSx volume, run by its image's user (kiln.spec.rules
code_server_pod). Each problem is one line naming the field; code_server.user's refusal is also in the field table
(tests/spec/test_field_effects.py)."""

from __future__ import annotations

import copy

import pytest

from tests.support.eks_specs import EKS_COMPUTE, ON, eks_spec
from tests.support.specs import MINIMAL_SPEC
from tests.support.specs import spec_problems as problems


@pytest.mark.parametrize("platform", sorted(EKS_COMPUTE))
def test_code_server_with_the_fsx_volume_is_valid(platform: str) -> None:
    assert problems(eks_spec(platform, code_server={})) == []


@pytest.mark.parametrize("platform", sorted(EKS_COMPUTE))
def test_code_server_without_lustre_is_one_line_saying_what_to_add(platform: str) -> None:
    assert problems(eks_spec(platform, code_server={}, storage=None)) == [
        f"x.yaml: code_server: needs storage.lustre on {ON[platform]}: code-server runs there as a pod with the FSx "
        "volume, its home on it; add storage.lustre, or remove code_server"
    ]


@pytest.mark.parametrize("platform", sorted(EKS_COMPUTE))
def test_a_user_and_no_lustre_are_two_lines(platform: str) -> None:
    lines = problems(eks_spec(platform, code_server={"user": "alice"}, storage=None))
    assert [line.split(": ")[1] for line in lines] == ["code_server", "code_server.user"]
    assert lines[1] == (
        f"x.yaml: code_server.user: has no effect on {ON[platform]}: the pod runs code-server as its image's own user "
        "(coder); remove code_server.user"
    )


def test_the_rule_leaves_slurm_backends_to_their_nodes() -> None:
    spec = copy.deepcopy(MINIMAL_SPEC)
    spec.pop("storage")
    spec["code_server"] = {"user": "alice"}
    # Where code-server runs on a node, the user may be named and no FSx is needed: whatever else the Slurm side
    # says, this rule says nothing.
    assert not [line for line in problems(spec) if "as a pod" in line or "the pod runs" in line]
