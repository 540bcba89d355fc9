"""Every spec field against every platform: setting it changes what kiln builds there, or `kiln validate` refuses it.

TABLE has a row for each field of kiln.spec.models (a dotted path, `[]` for a list's items; a section that may be
left out, storage.lustre and observability, has a row of its own beside its fields') and, in each row, a verdict for
each platform: the four backends, HyperPod once per orchestrator.

- Effect: the spec with the field set (over a context both sides share) differs from the spec without it, in what
  the proof names: the node bundle kiln renders (cheap), the network and storage stacks, every template of the
  app (slow), or the PyTorchJob `kiln job submit` writes (EKS). Both specs must pass validation, so a refusal never
  passes for an effect.
- Refused: `kiln validate` exits 2 with one line, which names the field; the context alone is valid.
- OneChoice: kiln offers the field one value on the platform today, its own default, so setting it changes nothing
  yet. The test fails as soon as the catalog offers a second value: the row must then prove an effect.

A field added to the models without a row fails test_the_table_has_a_verdict_for_every_field_and_platform: a field
without an effect cannot come back unnoticed.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from kiln.bootstrap.artifacts import lockable_artifacts
from kiln.bootstrap.lock import LockedFile, lock_text
from kiln.bootstrap.render import render_bundle
from kiln.catalog.kubernetes import default_kubernetes_version, kubernetes_versions
from kiln.changes import assembly_templates
from kiln.cli.main import main
from kiln.jobs.pytorchjob import JobRequest, cluster_facts, job_manifests
from kiln.node_config.translate import config_from_spec
from kiln.spec import ClusterSpec, load_spec
from kiln.spec.rules import software as software_rules
from kiln.stacks.app import build_cluster, environment, new_app
from kiln.stacks.ci_mode import ci_environment
from kiln.stacks.network import NetworkStack
from kiln.stacks.storage import StorageStack

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

PLATFORMS = ("pcs", "parallelcluster", "hyperpod-slurm", "hyperpod-eks", "eks")
SLURM = PLATFORMS[:3]
EKS = PLATFORMS[3:]

_GROUP = {"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2}
_BASE = {
    "name": "fx",
    "region": "us-east-1",
    "availability_zone": "us-east-1a",
    "storage": {"lustre": {"deployment": "PERSISTENT_2", "storage_gib": 2400}},
}
# EKS's control plane spans two AZs: offline (no account to look them up) the spec names the second.
_SECOND_AZ = {"network": {"second_availability_zone": "us-east-1b"}}
# The smallest valid spec of each platform. None sets compute.head_node or compute.login_nodes: kiln boots a login
# node by default (count 1) on the Slurm backends, and the default is no refusal on EKS, where it boots none.
BASES: dict[str, dict[str, Any]] = {
    "pcs": {**_BASE, "compute": {"backend": "pcs", "groups": [_GROUP]}},
    "parallelcluster": {**_BASE, "compute": {"backend": "parallelcluster", "groups": [_GROUP]}},
    # HyperPod's instance groups have a fixed size: min_count is max_count.
    "hyperpod-slurm": {**_BASE, "compute": {"backend": "hyperpod", "groups": [{**_GROUP, "min_count": 2}]}},
    "hyperpod-eks": {
        **_BASE,
        **_SECOND_AZ,
        "compute": {"backend": "hyperpod", "orchestrator": "eks", "groups": [{**_GROUP, "min_count": 2}]},
    },
    "eks": {**_BASE, **_SECOND_AZ, "compute": {"backend": "eks", "groups": [_GROUP]}},
}

DROP = object()  # a context value: remove the key
BUNDLE, STACKS, TEMPLATES, JOB = "bundle", "stacks", "templates", "job"
# The rules' one clock, fixed: a Slurm version PCS retires later is still one a cluster may pin here.
TODAY = datetime.date(2026, 1, 1)


@dataclass(frozen=True)
class Effect:
    """Setting the field to VALUE (with ALSO, changes it needs beside it) over CONTEXT changes what PROOF shows."""

    value: Any
    proof: str = STACKS
    context: Mapping[str, Any] = field(default_factory=dict)
    also: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Refused:
    """Setting the field to VALUE (with ALSO) over CONTEXT is one line of `kiln validate` naming NAMES (default:
    the field, its first list item for [])."""

    value: Any
    context: Mapping[str, Any] = field(default_factory=dict)
    also: Mapping[str, Any] = field(default_factory=dict)
    names: str | None = None


@dataclass(frozen=True)
class OneChoice:
    """The platform takes one value of the field today, kiln's default: ALLOWED() returns what it takes."""

    allowed: Callable[[], tuple[str, ...]]
    default: Callable[[], str]
    why: str


Verdict = Effect | Refused | OneChoice


def each(verdict: Verdict, platforms: tuple[str, ...] = PLATFORMS) -> dict[str, Verdict]:
    return dict.fromkeys(platforms, verdict)


def split(slurm: Verdict, eks: Verdict) -> dict[str, Verdict]:
    return {**each(slurm, SLURM), **each(eks, EKS)}


AMI = "ami-0123456789abcdef0"
EXISTING_VPC = {
    "network": {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"},
    # ParallelCluster's SSH rule needs the existing VPC's CIDR; the others take it as well.
    "network.vpc_cidr": "10.0.0.0/16",
}
ATTACHED = {
    "file_system_id": "fs-0123456789abcdef0",
    "mount_name": "abcdefgh",
    "security_group_id": "sg-0123456789abcdef0",
}
ATTACHED_LUSTRE = {**EXISTING_VPC, "storage.lustre": ATTACHED}
OWN_AMI = {"compute.image": {"base": "own", "ami_id": AMI}}
BAKE = {"compute.image": {"ami_id": AMI, "bake": True}}
STOCK = {
    "compute.image": {"base": "stock", "ami_id": AMI, "bake": True},
    "software.pcs_slurm": "25.11.2-1",
}
TRAINIUM = {"compute.groups.0.instance_type": "trn1.32xlarge"}
OBSERVED = {"observability": {}}
USER_STEP = {"bootstrap": {"steps": [{"name": "setup", "path": "setup.sh", "phase": "install", "roles": ["compute"]}]}}
G0 = "compute.groups.0"


def bake_replacing(component: str) -> dict[str, Any]:
    """Return the context in which a pin replaces the image's COMPONENT: a bake that names it in software.replace."""
    return {**BAKE, "software.replace": [component]}


def image_pin(pin: str, component: str) -> dict[str, Verdict]:
    """A component PCS's sample AMI, ParallelCluster's and HyperPod's images and EKS's own (kiln adopts their copy):
    pinned on your own PCS AMI or in a bake that replaces it; EKS takes no bake, so a differing pin is refused."""
    return {
        "pcs": Effect(pin, BUNDLE, OWN_AMI),
        "parallelcluster": Effect(pin, BUNDLE, bake_replacing(component)),
        "hyperpod-slurm": Effect(pin, BUNDLE, bake_replacing(component)),
        **each(Refused(pin), EKS),
    }


TABLE: dict[str, dict[str, Verdict]] = {
    "name": each(Effect("fx2")),
    # Without an AZ, so that the other region needs no other AZ beside it.
    "region": each(Effect("us-west-2", context={"availability_zone": DROP, "network": DROP})),
    "availability_zone": each(Effect("us-east-1c")),
    "network.vpc_cidr": each(Effect("10.1.0.0/16")),
    "network.vpc_id": split(
        Effect("vpc-0123456789abcdef1", context=EXISTING_VPC),
        Refused(
            "vpc-0123456789abcdef0",
            context={"network": DROP},
            also={"network.private_subnet_id": EXISTING_VPC["network"]["private_subnet_id"]},
        ),
    ),
    "network.private_subnet_id": split(
        Effect("subnet-0123456789abcdef1", context=EXISTING_VPC), Refused("subnet-0123456789abcdef0")
    ),
    "network.second_availability_zone": split(Effect("us-east-1b"), Effect("us-east-1c")),
    "network.interface_endpoints": each(Effect(True)),
    # Slurm: the kept VPC gets its egress built again; EKS takes no vpc_id, so kept has none to adopt.
    "network.kept": split(Effect(True, context=EXISTING_VPC), Refused(True)),
    "storage.bucket.name": each(Effect("fx-data-bucket")),
    "storage.bucket.retain": each(Effect(False)),
    "storage.bucket.existing": each(Effect(True, context={"storage.bucket.name": "fx-data-bucket"})),
    "storage.lustre": each(Effect({"deployment": "SCRATCH_2", "storage_gib": 1200}, context={"storage.lustre": DROP})),
    "storage.lustre.deployment": each(Effect("SCRATCH_2")),
    "storage.lustre.storage_gib": each(Effect(4800)),
    "storage.lustre.throughput_per_tib": each(Effect(500)),
    "storage.lustre.compression": each(Effect("NONE")),
    # kiln gives LNet the nodes' EFA interfaces where it mounts FSx itself: PCS and HyperPod with Slurm.
    "storage.lustre.efa": {
        "pcs": Effect(True, BUNDLE),
        "parallelcluster": Refused(True),
        "hyperpod-slurm": Effect(True, BUNDLE),
        **each(Refused(True), EKS),
    },
    "storage.lustre.data_repository.import_path": each(Effect("s3://fx-import/datasets")),
    "storage.lustre.data_repository.export": each(Effect(False)),
    "storage.lustre.file_system_id": split(
        Effect("fs-0123456789abcdef1", context=ATTACHED_LUSTRE),
        Refused(
            ATTACHED["file_system_id"],
            context={"storage.lustre": {}},
            also={
                "storage.lustre.mount_name": ATTACHED["mount_name"],
                "storage.lustre.security_group_id": ATTACHED["security_group_id"],
            },
        ),
    ),
    "storage.lustre.mount_name": split(Effect("bcdefghi", context=ATTACHED_LUSTRE), Refused("abcdefgh")),
    # The nodes join the group (the compute stack); the storage stack only names it.
    "storage.lustre.security_group_id": split(
        Effect("sg-0123456789abcdef1", TEMPLATES, ATTACHED_LUSTRE), Refused("sg-0123456789abcdef0")
    ),
    "compute.backend": {
        "pcs": Effect("parallelcluster", TEMPLATES),
        "parallelcluster": Effect("pcs", TEMPLATES),
        "hyperpod-slurm": Effect("parallelcluster", TEMPLATES),
        "hyperpod-eks": Effect("eks", TEMPLATES, also={"compute.orchestrator": DROP}),
        "eks": Effect("pcs", TEMPLATES),
    },
    "compute.orchestrator": {
        "pcs": Refused("slurm"),
        "parallelcluster": Refused("slurm"),
        "hyperpod-slurm": Effect("eks", TEMPLATES, context=_SECOND_AZ),
        "hyperpod-eks": Effect("slurm", TEMPLATES),
        "eks": Refused("slurm"),
    },
    # PCS runs the Slurm controller itself; EKS and HyperPod orchestrated by EKS run no Slurm.
    "compute.head_node.instance_type": {
        "pcs": Refused("m5.4xlarge"),
        "parallelcluster": Effect("m5.4xlarge", BUNDLE),
        "hyperpod-slurm": Effect("m5.4xlarge", BUNDLE),
        **each(Refused("m5.4xlarge"), EKS),
    },
    "compute.login_nodes.instance_type": split(Effect("m5.4xlarge", BUNDLE), Refused("m5.4xlarge")),
    "compute.login_nodes.count": split(Effect(0, BUNDLE), Refused(0)),
    "compute.groups[].name": each(Effect("gpus", TEMPLATES)),
    "compute.groups[].instance_type": each(Effect("p4d.24xlarge", BUNDLE)),
    # HyperPod's instance groups have a fixed size, max_count.
    "compute.groups[].min_count": {
        **each(Effect(1, TEMPLATES), ("pcs", "parallelcluster", "eks")),
        **each(Refused(1), ("hyperpod-slurm", "hyperpod-eks")),
    },
    "compute.groups[].max_count": {
        **each(Effect(3, TEMPLATES), ("pcs", "parallelcluster", "eks")),
        **each(Effect(3, TEMPLATES, also={f"{G0}.min_count": 3}), ("hyperpod-slurm", "hyperpod-eks")),
    },
    # HyperPod buys its instances itself, and places them itself.
    "compute.groups[].capacity.type": {
        **each(Effect("spot", TEMPLATES), ("pcs", "parallelcluster", "eks")),
        **each(Refused("spot"), ("hyperpod-slurm", "hyperpod-eks")),
    },
    "compute.groups[].capacity.reservation_id": {
        **each(
            Effect(
                "cr-0123456789abcdef1",
                TEMPLATES,
                context={f"{G0}.capacity": {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}},
            ),
            ("pcs", "parallelcluster", "eks"),
        ),
        **each(Refused("cr-0123456789abcdef0"), ("hyperpod-slurm", "hyperpod-eks")),
    },
    "compute.groups[].placement_group": {
        **each(Effect(False, TEMPLATES), ("pcs", "parallelcluster", "eks")),
        **each(Refused(True), ("hyperpod-slurm", "hyperpod-eks")),
    },
    "compute.groups[].root_volume_gib": each(Effect(300, TEMPLATES)),
    # EKS's nodes boot EKS's accelerated AMI, and take no bake.
    "compute.image.ami_id": split(Effect(AMI, TEMPLATES), Refused(AMI)),
    "compute.image.os": {
        "pcs": Effect("ubuntu2204", BUNDLE, OWN_AMI),
        "parallelcluster": Effect("al2023", BUNDLE),
        # HyperPod's AMIs and EKS's run one OS each: another is refused.
        "hyperpod-slurm": Refused("ubuntu2404"),
        **each(Refused("ubuntu2204"), EKS),
    },
    "compute.image.base": {
        "pcs": Effect("own", BUNDLE, context={"compute.image.ami_id": AMI}),
        **each(Refused("own"), PLATFORMS[1:]),
    },
    "compute.image.bake": split(Effect(True, TEMPLATES, context={"compute.image.ami_id": AMI}), Refused(True)),
    "compute.kubernetes_version": {
        **each(Refused("1.35"), SLURM),
        "hyperpod-eks": OneChoice(
            lambda: kubernetes_versions("hyperpod"),
            lambda: default_kubernetes_version("hyperpod"),
            "kiln drives one Kubernetes version of HyperPod's",
        ),
        "eks": Effect("1.35", TEMPLATES),
    },
    "software.efa_installer": image_pin("1.38.1", "efa_installer"),
    "software.nvidia_driver": image_pin("580.65.06", "nvidia_driver"),
    # Pods bring their own NCCL.
    "software.nccl": split(Effect("2.27.3-1+cuda12.9", BUNDLE), Refused("2.27.3-1+cuda12.9")),
    # EKS's accelerated AMI and both HyperPod AMIs ship the toolkit (kiln adopts it): a pin replaces HyperPod Slurm's
    # in a bake only; EKS takes no bake.
    "software.nvidia_container_toolkit": {
        **each(Effect("1.17.7", BUNDLE), ("pcs", "parallelcluster")),
        "hyperpod-slurm": Effect("1.17.7", BUNDLE, bake_replacing("nvidia_container_toolkit")),
        **each(Refused("1.17.7"), ("eks", "hyperpod-eks")),
    },
    # A pin installs another release's packages than the default for the type (trn1: 2.29.1); EKS's Neuron AMI
    # ships its own driver, which kiln adopts.
    "software.neuron": {
        **each(
            Effect("2.29.0", BUNDLE, context=TRAINIUM), ("pcs", "parallelcluster", "hyperpod-slurm", "hyperpod-eks")
        ),
        # On EKS the image keeps its driver and the pin names the release of the pods' runtime: the Neuron objects
        # say whose images they run (and `kiln job submit` takes that release's training container).
        "eks": Effect("2.29.0", TEMPLATES, context=TRAINIUM),
    },
    "software.slurm": {"pcs": Effect("25.05", BUNDLE), **each(Refused("25.11"), PLATFORMS[1:])},
    # On EKS the exporters run as Helm charts and AWS's collector scrapes them: no pin of kiln's is used.
    "software.node_exporter": split(Effect("1.9.0", BUNDLE, OBSERVED), Refused("1.9.1")),
    "software.prometheus": split(Effect("3.4.0", BUNDLE, {"observability": {"prometheus": True}}), Refused("3.5.0")),
    "software.dcgm_exporter": split(Effect("4.5.0-4.7.0", BUNDLE, OBSERVED), Refused("4.6.0-4.8.3")),
    # ParallelCluster's AMI ships enroot and pyxis; EKS runs neither.
    "software.enroot": {
        "pcs": Effect("4.1.2", BUNDLE),
        "parallelcluster": Effect("4.1.2", BUNDLE, bake_replacing("enroot")),
        "hyperpod-slurm": Effect("4.1.2", BUNDLE),
        **each(Refused("4.1.2"), EKS),
    },
    "software.pyxis": {
        "pcs": Effect("0.24.0", BUNDLE),
        "parallelcluster": Effect("0.24.0", BUNDLE, bake_replacing("pyxis")),
        "hyperpod-slurm": Effect("0.24.0", BUNDLE),
        **each(Refused("0.24.0"), EKS),
    },
    "software.replace": split(
        Effect(["efa_installer"], BUNDLE, BAKE), Refused(["nvidia_driver"], names="software.replace[0]")
    ),
    "software.pcs_agent": {"pcs": Effect("1.3.0-1", BUNDLE, STOCK), **each(Refused("1.3.1-1"), PLATFORMS[1:])},
    "software.pcs_slurm": {"pcs": Effect("25.11.3-1", BUNDLE, STOCK), **each(Refused("25.11.2-1"), PLATFORMS[1:])},
    "software.containers": each(Effect(False, BUNDLE)),
    # A lock covers downloads without a published digest: a node exporter release kiln has none for, here.
    "software.lock_file": split(
        Effect("cluster.lock.json", BUNDLE, {"software.node_exporter": "1.9.0", **OBSERVED}),
        Refused("cluster.lock.json"),
    ),
    "launcher.checkpoint_dir": each(Effect("/fsx/ckpt", BUNDLE)),
    # Slurm backends: the node bundle (the health check program and how it runs, sbatch's requeue default, the
    # launcher's hang bounds); EKS: the node monitoring agent and node repair in the templates, the rest in the jobs
    # `kiln job submit` writes, which HyperPod with EKS does not take (kiln.spec.rules.resilience).
    "resilience.health_checks": {
        **each(Effect(False, BUNDLE), SLURM),
        "hyperpod-eks": Refused(False),
        "eks": Effect(False, TEMPLATES),
    },
    "resilience.health_check_interval_s": split(Effect(600, BUNDLE), Refused(600)),
    "resilience.deep_health_checks": {
        **each(Refused(False), ("pcs", "parallelcluster", "eks")),
        **each(Effect(False, TEMPLATES), ("hyperpod-slurm", "hyperpod-eks")),
    },
    "resilience.node_recovery": {
        **each(Refused("none"), ("pcs", "parallelcluster")),
        **each(Effect("none", TEMPLATES), ("hyperpod-slurm", "hyperpod-eks", "eks")),
    },
    "resilience.auto_resume": {
        **each(Effect(False, BUNDLE), SLURM),
        "hyperpod-eks": Refused(False),
        "eks": Effect(False, JOB),
    },
    "resilience.hang_factor": {**each(Effect(20, BUNDLE), SLURM), "hyperpod-eks": Refused(20), "eks": Effect(20, JOB)},
    "resilience.hang_min_s": {
        **each(Effect(900, BUNDLE), SLURM),
        "hyperpod-eks": Refused(900),
        "eks": Effect(900, JOB),
    },
    "resilience.allow_tcp": {
        **each(Effect(True, BUNDLE), SLURM),
        "hyperpod-eks": Refused(True),
        "eks": Effect(True, JOB),
    },
    "launcher.env": each(Effect({"NCCL_DEBUG": "INFO"}, BUNDLE)),
    "launcher.nccl_env": each(Effect({"NCCL_DEBUG": "INFO"}, BUNDLE)),
    "ci.ttl_hours": each(Effect(4, TEMPLATES)),
    # Every role of every stack, ParallelCluster's own cluster roles included (its Iam/PermissionsBoundary).
    "iam.permissions_boundary": each(Effect("org-boundary", TEMPLATES)),
    "observability": each(Effect({}, BUNDLE)),
    "observability.node_exporter": split(Effect(False, BUNDLE, OBSERVED), Effect(False, TEMPLATES, OBSERVED)),
    "observability.slurm_exporter": split(Effect(False, BUNDLE, OBSERVED), Refused(False, OBSERVED)),
    "observability.dcgm_exporter": split(Effect(False, BUNDLE, OBSERVED), Effect(False, TEMPLATES, OBSERVED)),
    "observability.efa_exporter": each(Effect(False, BUNDLE, OBSERVED)),
    "observability.prometheus": each(Effect(True, STACKS, OBSERVED)),
    "observability.grafana": each(Effect(True, TEMPLATES, {"observability": {"prometheus": True}})),
    # On EKS and HyperPod with EKS, code-server is a pod with the FSx volume (kiln.constructs.eks_code_server), run by
    # its image's own user. On the Slurm backends the bootstrap installs and runs it on the login node (the base specs
    # have one), as the image's default user unless code_server.user names another.
    "code_server": {**each(Effect({}, BUNDLE), SLURM), **each(Effect({}, TEMPLATES), EKS)},
    "code_server.user": {
        **each(Effect("alice", BUNDLE, {"code_server": {}}), SLURM),
        **each(Refused("ec2-user", context={"code_server": {}}), EKS),
    },
    # The cluster's own Session document and the nodes' grants for it (kiln.constructs.session_logs) where users reach
    # nodes through a Session Manager shell; refused where Kubernetes is the way in. s3 writes to storage.bucket.name.
    "session_logs": {
        **each(Effect({"destination": "cloudwatch"}, TEMPLATES), SLURM),
        **each(Refused({"destination": "cloudwatch"}), EKS),
    },
    "session_logs.destination": {
        **each(
            Effect("s3", TEMPLATES, {"session_logs": {"destination": "cloudwatch"}, "storage.bucket.name": "lab-x"}),
            SLURM,
        ),
        **each(Refused("s3", {"storage.bucket.name": "lab-x"}, names="session_logs"), EKS),
    },
    # The user's own steps ship in the bundle (_write puts each script beside the spec, its text naming its path).
    "bootstrap.steps[].name": each(Effect("setup_v2", BUNDLE, USER_STEP)),
    "bootstrap.steps[].path": each(Effect("scripts/other.sh", BUNDLE, USER_STEP)),
    "bootstrap.steps[].phase": each(Effect("configure", BUNDLE, USER_STEP)),
    # Only compute nodes where kiln boots no login node (EKS, HyperPod with EKS).
    "bootstrap.steps[].roles": split(
        Effect(["compute", "login"], BUNDLE, USER_STEP),
        Refused(["login"], USER_STEP, names="bootstrap.steps[0].roles[0]"),
    ),
    "tags": each(Effect({"team": "ml"}, TEMPLATES)),
}


def _is_model(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def field_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Yield every field of MODEL, recursively: a section's fields in its place, and a section that may be left
    out (Model | None) itself as well."""
    for name, info in model.model_fields.items():
        path, annotation = f"{prefix}{name}", info.annotation
        args = typing.get_args(annotation)
        if typing.get_origin(annotation) is list and args and _is_model(args[0]):
            yield from field_paths(args[0], f"{path}[].")
        elif _is_model(annotation):
            yield from field_paths(annotation, f"{path}.")
        else:
            yield path
            optional = [arg for arg in args if _is_model(arg)]
            if isinstance(annotation, types.UnionType) and optional:
                yield from field_paths(optional[0], f"{path}.")


def _apply(data: dict[str, Any], changes: Mapping[str, Any]) -> None:
    """Set each dotted path of CHANGES in DATA (digits index lists, dicts are made on the way); DROP removes."""
    for dotted, value in changes.items():
        *parents, last = [int(part) if part.isdigit() else part for part in dotted.split(".")]
        node = data
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
        if value is DROP:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(value)


def _concrete(field_path: str) -> str:
    """Return the dotted path _apply takes for FIELD_PATH: a list's first item for []."""
    return field_path.replace("[]", ".0")


def specs(field_path: str, platform: str, verdict: Effect | Refused) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return the spec data without the field (the platform's base with the verdict's context) and with it."""
    without = copy.deepcopy(BASES[platform])
    _apply(without, verdict.context)
    with_field = copy.deepcopy(without)
    _apply(with_field, {_concrete(field_path): verdict.value, **verdict.also})
    return without, with_field


@pytest.fixture(autouse=True)
def _fixed_today(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(software_rules, "today", lambda: TODAY)


def _write(data: Mapping[str, Any], directory: Path) -> Path:
    """Write DATA as DIRECTORY/cluster.yaml, the script of each of its bootstrap.steps, and the lock it names, with a
    digest for each download that needs one."""
    path = directory / "cluster.yaml"
    for step in data.get("bootstrap", {}).get("steps", []):
        script = directory / step["path"]
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(f"#!/bin/sh\necho {step['path']}\n")
    lock = data.get("software", {}).get("lock_file")
    if lock:
        unlocked = copy.deepcopy(dict(data))
        del unlocked["software"]["lock_file"]
        path.write_text(yaml.safe_dump(unlocked))
        config = config_from_spec(load_spec(path))
        entries = [
            LockedFile(
                name=a.name,
                version=a.version,
                url=a.url,
                sha256=hashlib.sha256(a.url.encode()).hexdigest(),
                size_bytes=1,
            )
            for a in lockable_artifacts(config)
        ]
        (directory / lock).write_text(lock_text(entries))
    path.write_text(yaml.safe_dump(dict(data)))
    return path


def _digest(files: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True, default=str).encode()).hexdigest()


@cache
def _built(spec_json: str, proof: str) -> str:
    """Return a digest of what PROOF shows of the spec SPEC_JSON, loaded (and validated) as `kiln validate` does."""
    with tempfile.TemporaryDirectory(prefix="kiln-field-effects-") as tmp:
        directory = Path(tmp)
        spec: ClusterSpec = load_spec(_write(json.loads(spec_json), directory))
        if proof == BUNDLE:
            bundle = render_bundle(config_from_spec(spec), directory / "bundle").directory
            # The launcher wheel is the same for every spec.
            files = {
                str(p.relative_to(bundle)): p.read_text()
                for p in sorted(bundle.rglob("*"))
                if p.is_file() and p.parent.name != "launcher"
            }
            return _digest(files)
        if proof == JOB:
            script = directory / "train.py"
            script.write_text("print('step')\n")
            request = JobRequest(script=script, name="fx", image="public.ecr.aws/x/pytorch:2", nodes=2)
            return _digest(job_manifests(request, cluster_facts(spec), b"wheel"))
        outdir = directory / "cdk.out"
        app = new_app(str(outdir))
        if proof == STACKS:
            network = NetworkStack(app, "network", spec=spec, env=environment(spec))
            StorageStack(app, "storage", spec=spec, network=network, env=environment(spec))
        else:
            build_cluster(app, spec, nag=False, ci=ci_environment(spec))
        app.synth()
        return _digest(assembly_templates(outdir))


def built(data: Mapping[str, Any], proof: str) -> str:
    return _built(json.dumps(data, sort_keys=True), proof)


def _cases(kind: type) -> list[Any]:
    cases = []
    for field_path, row in TABLE.items():
        for platform, verdict in row.items():
            if not isinstance(verdict, kind):
                continue
            slow = isinstance(verdict, Effect) and verdict.proof == TEMPLATES
            cases.append(
                pytest.param(
                    field_path,
                    platform,
                    verdict,
                    id=f"{field_path}@{platform}",
                    marks=[pytest.mark.slow] if slow else [],
                )
            )
    return cases


def test_the_table_has_a_verdict_for_every_field_and_platform() -> None:
    fields = list(field_paths(ClusterSpec))
    assert len(fields) == len(set(fields))
    missing = [f for f in fields if f not in TABLE]
    assert not missing, (
        f"fields without a row in TABLE (prove an effect, or refuse them in kiln/spec/rules/): {missing}"
    )
    assert not [f for f in TABLE if f not in fields], "rows for fields the models no longer have"
    for field_path, row in TABLE.items():
        assert tuple(row) == PLATFORMS or set(row) == set(PLATFORMS), field_path


def test_field_paths_walks_sections_lists_and_optional_sections() -> None:
    fields = set(field_paths(ClusterSpec))
    assert {
        "compute.groups[].capacity.reservation_id",
        "storage.lustre",
        "storage.lustre.data_repository.export",
    } <= fields
    assert {"observability", "observability.grafana", "software.replace", "tags"} <= fields
    # A section with a default is its fields: its own row would prove nothing they do not.
    assert not {"compute", "compute.groups", "storage", "storage.lustre.data_repository", "compute.head_node"} & fields


@pytest.mark.parametrize("platform", PLATFORMS)
def test_each_platforms_base_spec_is_valid_and_sets_no_service_nodes(tmp_path: Path, platform: str) -> None:
    spec = load_spec(_write(BASES[platform], tmp_path))
    config_from_spec(spec)
    # The defaults (a login node, an m5.8xlarge head node) are never refused where kiln boots neither.
    assert not {"head_node", "login_nodes"} & spec.compute.model_fields_set


@pytest.mark.parametrize(("field_path", "platform", "verdict"), _cases(Effect))
def test_an_effect_changes_what_kiln_builds(field_path: str, platform: str, verdict: Effect) -> None:
    without, with_field = specs(field_path, platform, verdict)
    assert built(without, verdict.proof) != built(with_field, verdict.proof), (
        f"{field_path} has no effect on {platform} (in the {verdict.proof}): refuse it in kiln/spec/rules/"
    )


@pytest.mark.parametrize(("field_path", "platform", "verdict"), _cases(Refused))
def test_a_refused_field_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture, field_path: str, platform: str, verdict: Refused
) -> None:
    without, with_field = specs(field_path, platform, verdict)
    load_spec(_write(without, tmp_path))  # the context alone is valid
    path = _write(with_field, tmp_path)
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    names = verdict.names or field_path.replace("[]", "[0]")
    assert f": {names}: " in lines[0], lines[0]
    assert "Traceback" not in out + err


@pytest.mark.parametrize(("field_path", "platform", "verdict"), _cases(OneChoice))
def test_a_field_with_one_choice_has_one_yet(field_path: str, platform: str, verdict: OneChoice) -> None:
    allowed = tuple(verdict.allowed())
    assert allowed == (verdict.default(),), (
        f"{field_path} on {platform}: {verdict.why} no longer ({', '.join(allowed)}); prove its effect in TABLE"
    )
