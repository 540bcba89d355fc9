"""spec -> BootstrapConfig's code-server settings: the node it runs on and the user it runs as."""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from typing import Any

from kiln.bootstrap.config import ClusterUser
from kiln.bootstrap.profiles import PROFILES
from kiln.catalog.code_server import CODE_SERVER_NODE_UID, CODE_SERVER_NODE_USER, code_server_place
from kiln.spec import ClusterSpec


def code_server_config(spec: ClusterSpec, target: str) -> dict[str, Any]:
    """Return BootstrapConfig's code-server settings for SPEC's TARGET nodes: the role of the node it runs on and its
    user (code_server.user, else kiln's own user, whom every node creates: users; locally, whoever ran kiln:
    local_code_server_user), or none where it is off, where Kubernetes runs it (a pod, not a node's bootstrap), or
    nowhere to run (PCS without login nodes: the spec rules refuse that)."""
    wanted = spec.code_server
    profile = PROFILES[target]
    if wanted is None or profile.target.uses_kubernetes:
        return {}
    if profile.local_cluster:
        return {"code_server_role": "controller", "code_server_user": local_code_server_user()}
    platform = spec.platform
    place = code_server_place(
        kubernetes=platform.uses_kubernetes,
        controller="controller" in platform.roles,
        login_nodes=spec.compute.login_nodes.count,
    )
    if place not in ("login", "controller"):
        return {}
    if wanted.user:
        return {"code_server_role": place, "code_server_user": wanted.user}
    # kiln's own user, on every node with the same uid (configure_users): the jobs its terminal submits run as it.
    user = ClusterUser(name=CODE_SERVER_NODE_USER, uid=CODE_SERVER_NODE_UID)
    return {"code_server_role": place, "code_server_user": user.name, "users": (user,)}


def local_code_server_user(environ: Mapping[str, str] | None = None, euid: int | None = None) -> str:
    """Return whom the local cluster runs code-server as: the user who ran kiln through sudo (SUDO_USER, when that
    is a user of this machine other than root), else the user running kiln, root included (kiln local runs as root)."""
    environ = os.environ if environ is None else environ
    sudo_user = environ.get("SUDO_USER", "")
    if sudo_user and sudo_user != "root":
        try:
            return pwd.getpwnam(sudo_user).pw_name
        except KeyError:
            pass
    return pwd.getpwuid(os.geteuid() if euid is None else euid).pw_name
