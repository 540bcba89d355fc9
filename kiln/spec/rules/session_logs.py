"""session_logs: only where users reach nodes through a Session Manager shell."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem
from kiln.spec.rules.common import BACKEND, problem_at


def session_logs(spec: ClusterSpec) -> Iterator[Problem]:
    """Session logs take effect where users reach the nodes through a Session Manager shell, which kiln connect opens
    with the cluster's own session document: PCS, ParallelCluster and HyperPod with Slurm
    (kiln.constructs.session_logs). On EKS and HyperPod with EKS users reach the cluster through the Kubernetes API,
    and the one session kiln opens there forwards a port, which Session Manager does not log: refused, not ignored."""
    if spec.session_logs is not None and spec.platform.uses_kubernetes:
        yield problem_at(
            ("session_logs",),
            f"is not available on {spec.platform.label}: users reach it through the Kubernetes API (kubectl), not a "
            "Session Manager shell, and Session Manager does not log port forwarding; remove session_logs",
            BACKEND,
        )
    elif spec.session_logs is not None and spec.session_logs.destination == "s3" and not spec.storage.bucket.name:
        yield problem_at(
            ("session_logs", "destination"),
            "got 's3', which needs storage.bucket.name: the nodes may write only under session-logs/ of the bucket "
            "the policy names at synthesis; name the bucket, or use cloudwatch",
            ("storage", "bucket", "name"),
        )
