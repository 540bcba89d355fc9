"""code_server: a pod on EKS, a login node (or the controller) on the Slurm backends."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog.code_server import CODE_SERVER_IMAGE_USER, CODE_SERVER_NODE_USER, code_server_place, refused_user
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem
from kiln.spec.rules.common import BACKEND, ORCHESTRATOR, problem_at


def code_server_pod(spec: ClusterSpec) -> Iterator[Problem]:
    """On EKS (and HyperPod with EKS) code-server is a pod with the FSx volume, its home on it, run by its image's own
    user (kiln.constructs.eks_code_server): it needs storage.lustre, and code_server.user would change nothing."""
    wanted = spec.code_server
    if wanted is None or not spec.platform.uses_kubernetes:
        return
    if spec.storage.lustre is None:
        yield problem_at(
            ("code_server",),
            f"needs storage.lustre on {spec.platform.label}: code-server runs there as a pod with the FSx volume, its "
            "home on it; add storage.lustre, or remove code_server",
            ("storage", "lustre"),
            BACKEND,
            ORCHESTRATOR,
        )
    if "user" in wanted.model_fields_set:
        yield problem_at(
            ("code_server", "user"),
            f"has no effect on {spec.platform.label}: the pod runs code-server as its image's own user "
            f"({CODE_SERVER_IMAGE_USER}); remove code_server.user",
            BACKEND,
            ORCHESTRATOR,
        )


def code_server_node(spec: ClusterSpec) -> Iterator[Problem]:
    """On the Slurm backends code-server runs on a login node, else on the Slurm controller where kiln boots one
    (kiln.catalog.code_server.code_server_place): PCS without login nodes has no node for it. It runs as a user other
    than root, never a known sudoer or system account (kiln.catalog.code_server.refused_user): its terminals and
    extensions act as that user."""
    wanted = spec.code_server
    if wanted is None or spec.platform.uses_kubernetes:
        return
    platform = spec.platform
    place = code_server_place(
        kubernetes=platform.uses_kubernetes,
        controller="controller" in platform.roles,
        login_nodes=spec.compute.login_nodes.count,
    )
    if place is None:
        yield problem_at(
            ("code_server",),
            "got code-server, but PCS runs the Slurm controller itself and this cluster has no login node to run it "
            "on: set compute.login_nodes.count, or remove code_server",
            ("compute", "login_nodes", "count"),
            BACKEND,
        )
    if wanted.user == "root":
        yield problem_at(
            ("code_server", "user"),
            "got 'root', allowed: any other user: code-server's terminals and extensions act as its user; name the "
            f"user you log in as, or leave it out for kiln's own user ({CODE_SERVER_NODE_USER}, without sudo)",
        )
    elif wanted.user is not None and (why := refused_user(wanted.user)):
        yield problem_at(
            ("code_server", "user"),
            f"got {wanted.user!r}: {why}; name a user without sudo that has a home and a login shell, or leave it "
            f"out for kiln's own user ({CODE_SERVER_NODE_USER})",
        )
