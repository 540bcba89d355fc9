"""session_logs (kiln.spec.rules.session_logs): on the Slurm backends, whose users reach nodes through a Session
Manager shell; refused in one line, with the reason, on EKS and HyperPod with EKS (reached through the Kubernetes API);
s3 needs the bucket named, since the nodes' policy names its session-logs/ prefix at synthesis."""

from __future__ import annotations

import copy

import pytest

from kiln.spec import parse_spec
from tests.support.eks_specs import EKS_COMPUTE, ON, eks_spec
from tests.support.specs import MINIMAL_SPEC
from tests.support.specs import spec_problems as problems

BACKENDS = {
    "parallelcluster": {"backend": "parallelcluster"},
    "hyperpod": {"backend": "hyperpod"},
}


def spec_with(**top) -> dict:
    return copy.deepcopy(MINIMAL_SPEC) | top


@pytest.mark.parametrize("destination", ["s3", "cloudwatch"])
def test_pcs_takes_either_destination(destination: str) -> None:
    spec = spec_with(session_logs={"destination": destination}, storage={"bucket": {"name": "lab-data"}})
    assert MINIMAL_SPEC["compute"]["backend"] == "pcs"
    assert problems(spec) == []
    assert parse_spec(spec, "x.yaml").session_logs.destination == destination


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("destination", ["s3", "cloudwatch"])
def test_the_other_slurm_backends_take_it(backend: str, destination: str) -> None:
    spec = spec_with(session_logs={"destination": destination}, storage={"bucket": {"name": "lab-data"}})
    spec["compute"] = spec["compute"] | BACKENDS[backend]
    if backend == "hyperpod":
        spec["compute"]["groups"][0]["min_count"] = spec["compute"]["groups"][0]["max_count"]
    assert problems(spec) == []
    assert parse_spec(spec, "x.yaml").session_logs.destination == destination


@pytest.mark.parametrize("platform", sorted(EKS_COMPUTE))
def test_kubernetes_backends_refuse_it_in_one_line_saying_why(platform: str) -> None:
    assert problems(eks_spec(platform, session_logs={"destination": "cloudwatch"})) == [
        f"x.yaml: session_logs: is not available on {ON[platform]}: users reach it through the Kubernetes API "
        "(kubectl), not a Session Manager shell, and Session Manager does not log port forwarding; remove session_logs"
    ]


def test_s3_without_a_named_bucket_is_refused_in_one_line() -> None:
    assert problems(spec_with(session_logs={"destination": "s3"})) == [
        "x.yaml: session_logs.destination: got 's3', which needs storage.bucket.name: the nodes may write only under "
        "session-logs/ of the bucket the policy names at synthesis; name the bucket, or use cloudwatch"
    ]


@pytest.mark.parametrize("bad", [{"destination": "syslog"}, {}, {"destination": "s3", "prefix": "x"}])
def test_a_bad_section_is_refused(bad: dict) -> None:
    [line] = problems(spec_with(session_logs=bad, storage={"bucket": {"name": "lab-data"}}))
    assert line.startswith("x.yaml: session_logs"), line
