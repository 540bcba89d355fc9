"""What a deploy does that is worth a line: replacements, name collisions, removals, blocked exports, and the plan."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    # The judges' findings, each in its own module (which reads this one's Action): named for the Plan's fields only.
    from kiln.changes.directions import OneWayChange
    from kiln.changes.links import LinkCollision
    from kiln.changes.rolls import GroupDeleted, InstanceGroupShrunk, InstanceTypeChanged, NodeRoll, Resize
    from kiln.changes.subnets import SubnetCollision

# What kiln calls stateful: replacing or deleting it loses data or a running cluster.
STATEFUL = {
    "AWS::FSx::FileSystem": "file system",
    "AWS::S3::Bucket": "bucket",
    "AWS::EKS::Cluster": "EKS cluster",
    "AWS::SageMaker::Cluster": "HyperPod cluster",
    "AWS::PCS::Cluster": "PCS cluster",
    "AWS::APS::Workspace": "metrics workspace",
    "AWS::Grafana::Workspace": "Grafana workspace",
    "AWS::KMS::Key": "KMS key",
    "AWS::Logs::LogGroup": "log group",
}
# https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-name.html
CUSTOM_NAME_RULE = "CloudFormation cannot replace a custom-named resource"
# "After another stack imports an output value, you can't delete the stack that is exporting the output value or
# modify the exported output value": https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/intrinsic-function-reference-importvalue.html
EXPORT_RULE = "CloudFormation refuses to change or remove an export another stack imports"
# What a deploy does to one resource: "same" is no change at all, "update" a change in place.
Action = Literal["create", "update", "replace", "same", "delete"]


@dataclass(frozen=True)
class Replacement:
    """A resource the deploy replaces: why (the create-only properties that change), and what that costs."""

    stack: str
    logical_id: str
    type: str
    because: tuple[str, ...]
    # UpdateReplacePolicy Retain: the old one stays behind, outside the stack.
    keeps_old: bool
    # The custom name it keeps, which the new one would collide with: CloudFormation refuses the deploy.
    custom_name: str | None = None

    @property
    def stateful(self) -> str | None:
        return STATEFUL.get(self.type)

    @property
    def refused(self) -> bool:
        return self.custom_name is not None

    def line(self) -> str:
        what = f"{self.stack} {self.logical_id} ({self.stateful or self.type})"
        why = f"{', '.join(self.because)} {'is' if len(self.because) == 1 else 'are'} create-only"
        if self.refused:
            return (
                f"{what} would be replaced ({why}) but keeps its name {self.custom_name}: {CUSTOM_NAME_RULE}, and "
                "rolls the deploy back; change the name with it, or leave this change out"
            )
        old = "the old one stays behind outside the stack" if self.keeps_old else "the old one is deleted with its data"
        return f"{what} is replaced ({why}): the new one starts empty and {old}"


@dataclass(frozen=True)
class Collision:
    """A resource the deploy creates (new, or a replacement) under a custom name an old resource still holds."""

    stack: str
    logical_id: str
    type: str
    name: str
    holder: str
    # A replacement of a resource both templates have, not a resource the new template adds.
    replacing: bool = False

    def line(self) -> str:
        created = "would be replaced by one named" if self.replacing else "would be created as"
        return (
            f"{self.stack} {self.logical_id} ({self.type}) {created} {self.name}, which {self.holder} still holds: "
            "CloudFormation creates a resource before it deletes the one it replaces or a template drops, so the "
            "create fails (already exists) and rolls the deploy back; give it another name, or free the name in a "
            "deploy of its own first"
        )


@dataclass(frozen=True)
class Removal:
    """A stateful resource the new template no longer has."""

    stack: str
    logical_id: str
    type: str
    # DeletionPolicy Retain: it stays behind, outside the stack.
    kept: bool

    def line(self) -> str:
        what = f"{self.stack} {self.logical_id} ({STATEFUL.get(self.type, self.type)})"
        if self.kept:
            return f"{what} leaves the stack: it stays behind, outside the stack (DeletionPolicy Retain)"
        return f"{what} leaves the stack: it is deleted with its data"


@dataclass(frozen=True)
class BlockedExport:
    """An export another stack imports that the deploy would change or remove: CloudFormation refuses it."""

    stack: str
    export: str
    output: str
    importers: tuple[str, ...]
    reason: str
    # The importers' new templates no longer import it, and import nothing the deployed stacks do not export yet:
    # deploying them first, alone, removes the import, and the rest deploys after.
    importers_first: bool = False

    def line(self) -> str:
        users = ", ".join(self.importers)
        export = (
            self.export if self.export == f"{self.stack}:{self.output}" else f"{self.export} (output {self.output})"
        )
        imports = "imports" if len(self.importers) == 1 else "import"
        refused = f"{self.stack} export {export} {self.reason} while {users} {imports} it: {EXPORT_RULE}"
        if self.importers_first:
            templates = "template no longer imports" if len(self.importers) == 1 else "templates no longer import"
            return (
                f"{refused}, and rolls the deploy back when {self.stack} deploys first; deploy {users} first, whose "
                f"new {templates} it: `npx cdk deploy {' '.join(self.importers)} --exclusively` removes the import, "
                "then deploy the rest"
            )
        return (
            f"{refused}, and rolls the deploy back; deploy it once {users} no longer {imports} it "
            f"(`npx cdk destroy {' '.join(self.importers)}` removes the import, with whatever depends on it), "
            "or leave this change out"
        )


@dataclass(frozen=True)
class Plan:
    """Everything a deploy of the new templates over the old ones does that is worth a line."""

    replacements: tuple[Replacement, ...]
    removals: tuple[Removal, ...]
    blocked: tuple[BlockedExport, ...]
    collisions: tuple[Collision, ...] = ()
    # Per stack of the new templates, what the deploy does to each resource (logical id -> action).
    actions: Mapping[str, Mapping[str, Action]] = field(default_factory=dict)
    # Properties updated in place in the direction their service refuses (kiln.changes.directions).
    one_way: tuple[OneWayChange, ...] = ()
    # EKS node groups whose update replaces every node, those whose desired size changes, and those the deploy
    # replaces or removes (kiln.changes.rolls).
    rolls: tuple[NodeRoll, ...] = ()
    resizes: tuple[Resize, ...] = ()
    deleted_groups: tuple[GroupDeleted, ...] = ()
    # HyperPod instance groups removed or given fewer nodes: HyperPod terminates nodes (kiln.changes.rolls).
    shrunk_groups: tuple[InstanceGroupShrunk, ...] = ()
    # HyperPod instance groups given another instance type: their nodes go (kiln.changes.rolls).
    retyped_groups: tuple[InstanceTypeChanged, ...] = ()
    # Links to S3 created on a file system directory an old link still holds (kiln.changes.links).
    links: tuple[LinkCollision, ...] = ()
    # Subnets created on the addresses of a subnet the deploy drops (kiln.changes.subnets).
    subnets: tuple[SubnetCollision, ...] = ()

    def findings(self) -> list[str]:
        """Return one line per change CloudFormation refuses, then per stateful resource replaced or removed, then
        per node group whose running jobs the deploy ends: an EKS group resized past its pods' disruption budgets, an
        EKS or PCS group replaced or removed with its nodes, a HyperPod instance group removed or made smaller."""
        refused = [r.line() for r in self.replacements if r.refused] + [c.line() for c in self.collisions]
        refused += [b.line() for b in self.blocked] + [o.line() for o in self.one_way]
        refused += [link.line() for link in self.links]
        refused += [subnet.line() for subnet in self.subnets]
        stateful = [r.line() for r in self.replacements if r.stateful and not r.refused]
        ended = [r.line() for r in self.resizes] + [g.line() for g in self.deleted_groups]
        ended += [g.line() for g in self.shrunk_groups] + [g.line() for g in self.retyped_groups]
        return refused + stateful + [r.line() for r in self.removals] + ended

    def notes(self) -> list[str]:
        """Return one line per change that deploys and ends no job but is worth knowing: EKS node groups rolled
        within their pods' disruption budgets."""
        return [r.line() for r in self.rolls]

    @property
    def refused(self) -> bool:
        """Return whether CloudFormation would refuse the deploy (and roll it back)."""
        return (
            any(r.refused for r in self.replacements)
            or bool(self.collisions)
            or bool(self.blocked)
            or bool(self.one_way)
            or bool(self.links)
            or bool(self.subnets)
        )
