"""EKS and HyperPod-with-EKS specs as plain data for the rule tests: compute per platform, whole specs from it."""

from __future__ import annotations

import copy

from tests.support.specs import MINIMAL_SPEC

SECOND_AZ = {"second_availability_zone": "us-east-1b"}
EKS_COMPUTE = {
    "eks": {"backend": "eks"},
    "hyperpod-eks": {"backend": "hyperpod", "orchestrator": "eks"},
}


ON = {"eks": "eks", "hyperpod-eks": "hyperpod with EKS"}


def eks_spec(platform: str, **top) -> dict:
    """Return MINIMAL_SPEC on PLATFORM (EKS needs a second AZ; HyperPod's groups a fixed size), with TOP merged in."""
    spec = copy.deepcopy(MINIMAL_SPEC)
    spec["network"] = dict(SECOND_AZ)
    spec["compute"] |= EKS_COMPUTE[platform]
    if platform == "hyperpod-eks":
        spec["compute"]["groups"][0]["min_count"] = spec["compute"]["groups"][0]["max_count"]
    for key, value in top.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


def spec_with(**compute) -> dict:
    """Return MINIMAL_SPEC (p5 on PCS) with COMPUTE merged into compute; software and storage via keys."""
    spec = copy.deepcopy(MINIMAL_SPEC)
    for key in ("software", "storage"):
        if key in compute:
            spec[key] = compute.pop(key)
    spec["compute"] |= compute
    return spec


HYPERPOD_EKS = {
    "backend": "hyperpod",
    "orchestrator": "eks",
    "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "min_count": 2, "max_count": 2}],
}
