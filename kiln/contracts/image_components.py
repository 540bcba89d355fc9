"""EC2 Image Builder component documents that bake a rendered bundle's install steps into an image, as data: the
TrainingImage construct writes each as YAML (kiln.constructs.training_image.component_yaml).

Every document runs the bundle's own scripts (kiln-step): there is no second copy of install logic. The
first component fetches the bundle, one component per step group installs and verifies its steps, the seal
component checks every step's marker and marks the image baked, and the test component checks the markers
again on an instance booted from the new AMI.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kiln.contracts.bundle import USER_STEP_PREFIX, VERIFIED_UNPACK
from kiln.contracts.errors import InputError

# One Image Builder component per group, in bootstrap order: a failed build names the group that broke.
STEP_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("accelerators", ("install_nvidia_driver", "install_neuron", "install_efa", "install_nccl")),
    ("storage", ("install_lustre_client",)),
    ("scheduler", ("install_pcs_agent", "install_pcs_slurm", "install_slurm", "install_munge")),
    ("containers", ("install_enroot", "install_pyxis", "install_container_runtime")),
    ("launcher", ("install_launcher",)),
    ("exporters", ("install_exporters",)),
    ("code-server", ("install_code_server",)),
)
# The user's install steps (user_NAME, spec bootstrap.steps) come after kiln's, in one component of their own.
USER_STEP_GROUP = "user-steps"

# Where a build unpacks the bundle: under /var/tmp, so it survives between components, and removed at the end.
BUILD_DIR = "/var/tmp/kiln-image"
BUNDLE_ZIP = f"{BUILD_DIR}/bundle.zip"
BUNDLE_DIR = f"{BUILD_DIR}/bundle"
SCHEMA_VERSION = 1.0
# What the bake checks is in the bundle before it unpacks it, and the heredoc that carries the check's program.
BAKE_ENTRY_POINT = "kiln-step"
UNPACK_MARKER = "KILN_VERIFIED_UNPACK"
_SHA256 = re.compile(r"[0-9a-f]{64}")


def step_groups(install_steps: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Return the groups of INSTALL_STEPS (a profile's, in its order), leaving out empty groups.

    Refuses a step in no group, or an order the groups would change: the image must install in bootstrap order.
    """
    grouped = [(name, tuple(step for step in install_steps if step in members)) for name, members in STEP_GROUPS]
    grouped.append((USER_STEP_GROUP, tuple(step for step in install_steps if step.startswith(USER_STEP_PREFIX))))
    grouped = [(name, steps) for name, steps in grouped if steps]
    flattened = tuple(step for _, steps in grouped for step in steps)
    if flattened != tuple(install_steps):
        raise ValueError(
            f"install steps {' '.join(install_steps)}: the image groups would run them as {' '.join(flattened)}"
        )
    return tuple(grouped)


@dataclass(frozen=True, kw_only=True)
class ComponentDocument:
    """One component: its name within the recipe (fetch, a step group, seal, test) and its document."""

    name: str
    description: str
    phases: tuple[dict[str, Any], ...]

    @property
    def document(self) -> dict[str, Any]:
        """Return the document Image Builder runs, in its key order."""
        return {
            "name": self.name,
            "description": self.description,
            "schemaVersion": SCHEMA_VERSION,
            "phases": list(self.phases),
        }


def _bash(name: str, *commands: str) -> dict[str, Any]:
    return {"name": name, "action": "ExecuteBash", "inputs": {"commands": ["set -euo pipefail", *commands]}}


def _fetch_steps(bundle_uri: str, bundle_sha256: str) -> list[dict[str, Any]]:
    # The zip comes from CDK's shared asset bucket, which others may write: nothing in it runs before its content
    # matches the digest (VERIFIED_UNPACK, the program fetch.sh runs on a booting node). The scripts run through bash;
    # python3 is on every base image kiln bakes on, unzip is not.
    unpack = (
        f"python3 - image-bake {BUNDLE_ZIP} {BUNDLE_DIR} {bundle_sha256} {bundle_uri} {BAKE_ENTRY_POINT} "
        f"<<'{UNPACK_MARKER}'\n{VERIFIED_UNPACK}{UNPACK_MARKER}"
    )
    return [
        _bash("Clean", f"rm -rf {BUILD_DIR}", f"mkdir -p -m 0700 {BUILD_DIR}"),
        {"name": "Download", "action": "S3Download", "inputs": [{"source": bundle_uri, "destination": BUNDLE_ZIP}]},
        _bash("Unpack", unpack, f"rm -f {BUNDLE_ZIP}"),
    ]


def _kiln_step(*arguments: str) -> str:
    # Phase bake throughout: an image build belongs to no cluster yet (no cluster.env), and its install steps
    # serve every instance type of the cluster.
    return f"cd {BUNDLE_DIR} && KILN_PHASE=bake bash ./kiln-step {' '.join(arguments)}"


def component_documents(
    *, bundle_uri: str, bundle_sha256: str, install_steps: tuple[str, ...]
) -> tuple[ComponentDocument, ...]:
    """Return the recipe's components, in order, for the bundle at BUNDLE_URI (s3://...) whose content digest is
    BUNDLE_SHA256 (kiln.bootstrap.fetch.bundle_digest), and its INSTALL_STEPS."""
    if not _SHA256.fullmatch(bundle_sha256):
        raise InputError(f"bundle_sha256: got {bundle_sha256!r}, allowed: 64 lowercase hex digits")
    documents = [
        ComponentDocument(
            name="fetch",
            description="kiln: fetch and unpack the node bootstrap bundle",
            phases=({"name": "build", "steps": _fetch_steps(bundle_uri, bundle_sha256)},),
        )
    ]
    for group, steps in step_groups(install_steps):
        documents.append(
            ComponentDocument(
                name=group,
                description=f"kiln: {', '.join(steps)}",
                phases=(
                    {
                        "name": "build",
                        "steps": [
                            _bash("Install", _kiln_step(*steps)),
                            _bash("Verify", _kiln_step("--verify", *steps)),
                        ],
                    },
                ),
            )
        )
    documents.append(
        ComponentDocument(
            name="seal",
            description="kiln: check every install step's marker, mark the image baked, drop the bundle",
            phases=({"name": "build", "steps": [_bash("Seal", _kiln_step("--seal"), f"rm -rf {BUILD_DIR}")]},),
        )
    )
    documents.append(
        ComponentDocument(
            name="test",
            description="kiln: on an instance of the new image, every install step's marker matches the bundle",
            phases=(
                {
                    "name": "test",
                    "steps": [
                        *_fetch_steps(bundle_uri, bundle_sha256),
                        _bash("Verify", _kiln_step("--verify", *install_steps), f"rm -rf {BUILD_DIR}"),
                    ],
                },
            ),
        )
    )
    return tuple(documents)
