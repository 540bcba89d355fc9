"""Where code-server (VS Code in a browser) runs on a kiln cluster and how it is reached. Standard library only.

Every layer that touches code-server reads this module: the spec's rules and the bootstrap (which node runs it, as
whom), `kiln connect --vscode` (where to forward to, where the password is) and the EKS pod.

code-server's own defaults (its docs, https://coder.com/docs/code-server/FAQ and `code-server --help`): it reads
``$XDG_CONFIG_HOME/code-server/config.yaml`` (``~/.config/code-server/config.yaml``), binds 127.0.0.1:8080 and
asks for the password that file holds. kiln writes that file once, with a random password, and never rewrites it.
"""

from __future__ import annotations

from typing import Literal

from kiln.catalog.platforms import service_fact

# code-server listens here on the node (or in the pod), never on another address: no security group opens it.
CODE_SERVER_HOST = "127.0.0.1"
CODE_SERVER_PORT = 8080
# Relative to the user's home directory.
CODE_SERVER_CONFIG = ".config/code-server/config.yaml"
# On EKS: the namespace and Deployment of the pod that runs it.
CODE_SERVER_NAMESPACE = "kiln-dev"
CODE_SERVER_DEPLOYMENT = "code-server"
# The official image's user, who runs it in the pod (its Dockerfile, ci/release-image/Dockerfile: `adduser coder`,
# the image's first user, uid and gid 1000, home /home/coder).
CODE_SERVER_IMAGE_USER = "coder"
CODE_SERVER_IMAGE_UID = 1000

# Whom it runs as on a Slurm node unless code_server.user names another: a user kiln creates on every node with the
# same uid (configure_users, so the jobs its terminal submits run as it on the compute nodes too), with a home and a
# login shell, in no group but its own: no sudo, no group that is root by another name (services.ec2
# root_equivalent_groups), and outside the IMDS guard's allowed users. The name is the EKS pod's user's. The uid is
# high in the range useradd gives login users (UID_MIN 1000 to UID_MAX 60000 in both images' /etc/login.defs) and far
# from where it hands them out (upward from 1000: the image's default user is 1000, SSM Agent's ssm-user the next
# free one), so no account the image or SSM Agent creates takes it first.
CODE_SERVER_NODE_USER = CODE_SERVER_IMAGE_USER
CODE_SERVER_NODE_UID = 59000

# Where it runs: a login node, the Slurm controller (ParallelCluster's head node, HyperPod's controller) when there
# is no login node, or a pod on Kubernetes.
CodeServerPlace = Literal["login", "controller", "pod"]


def code_server_place(*, kubernetes: bool, controller: bool, login_nodes: int) -> CodeServerPlace | None:
    """Return where code-server runs on a platform where KUBERNETES runs the cluster (a pod) or kiln boots the Slurm
    CONTROLLER, with LOGIN_NODES login nodes; None where it cannot run (PCS without login nodes: PCS runs the
    controller itself, and kiln has no other node there). kiln.contracts.backends says both of each platform."""
    if kubernetes:
        return "pod"
    if login_nodes > 0:
        return "login"
    if not controller:
        return None
    return "controller"


def node_user(wanted: str | None) -> str:
    """Return whom code-server runs as on a Slurm node: code_server.user (WANTED), else kiln's own user."""
    return wanted or CODE_SERVER_NODE_USER


def root_equivalent_groups() -> tuple[str, ...]:
    """Return the groups whose members can become root on the images (services.ec2 root_equivalent_groups):
    configure_code_server refuses a user in one."""
    return tuple(service_fact("ec2", "root_equivalent_groups").value)


def refused_user(user: str) -> str | None:
    """Return why code_server.user may not be USER, known before any node boots (services.ec2
    login_accounts_refused), or None: root and the system accounts have no home and login shell to give a terminal,
    and the AMIs' default users and ssm-user are passwordless sudoers, so its terminal would be root."""
    accounts = service_fact("ec2", "login_accounts_refused").value
    sudoers = {*service_fact("ec2", "default_users").value.values(), *accounts["sudoers"]}
    if user in sudoers:
        return (
            f"{user} is a passwordless sudoer on the images (their default user, or SSM Agent's ssm-user), so "
            "code-server's terminal would be root"
        )
    if user in accounts["no_login"]:
        return f"{user} is a system account without a home and login shell for code-server's terminal"
    return None


def home_directory(user: str) -> str:
    """Return USER's home directory on a node: /home/USER, where useradd and the images put their default users."""
    return f"/home/{user}"


def config_path(user: str) -> str:
    """Return the file that holds USER's code-server password."""
    return f"{home_directory(user)}/{CODE_SERVER_CONFIG}"


def pod_home(cluster_name: str) -> str:
    """Return the pod's home directory on EKS for CLUSTER_NAME, relative to the FSx file system's root (mounted at
    /fsx, where jobs see it): a directory per cluster, since clusters may share an attached file system."""
    return f"code-server/{cluster_name}"
