"""What deploying one stack's new template over its old one does to each resource: create, update, replace, delete.

A resource is replaced when a create-only property changes; a replaced resource changes its physical id, and an
updated one its volatile attributes, so whatever refers to them changes too (and is replaced in turn where the
reference sits in a create-only property). CloudFormation creates a resource before it deletes the one it replaces
or the template drops, so a resource created under a custom name an old one holds in the same scope fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kiln.changes.findings import STATEFUL, Action, Collision, Removal, Replacement
from kiln.changes.schemas import DEFAULT_REGION, create_only, name_properties, scope_properties
from kiln.changes.templates import RETAINED, attribute_references, stack_outputs_read, value_at

# Attributes an update (not only a replacement) changes: a launch template's versions ("The latest version number of
# the launch template", https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ec2-launchtemplate.html)
# and an image pipeline's deployment ("The deployment ID changes each time the pipeline configuration changes",
# https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-imagebuilder-image-imagepipelineexecutionsettings.html).
VOLATILE_ATTRIBUTES = frozenset({"LatestVersionNumber", "DefaultVersionNumber", "DeploymentId"})


@dataclass
class Moves:
    """What a deploy does to one stack's resources so far: replaced (why), updated, and other stacks' outputs."""

    replaced: dict[str, tuple[str, ...]]
    updated: set[str]
    changed_outputs: set[tuple[str, str]]


def value_change(before: Any, after: Any, moves: Moves) -> str | None:
    """Return why a value changes on deploy (None if it does not): "" for its text, else what it refers to."""
    if before != after:
        return ""
    refs = attribute_references(after)
    moved = sorted({t for t, _ in refs if t in moves.replaced})
    if moved:
        return f"{', '.join(moved)} {'is' if len(moved) == 1 else 'are'} replaced"
    bumped = sorted(f"{t}.{a}" for t, a in refs if t in moves.updated and a in VOLATILE_ATTRIBUTES)
    if bumped:
        return f"{', '.join(bumped)} {'changes' if len(bumped) == 1 else 'change'} with the update"
    read = sorted(stack_outputs_read(after) & moves.changed_outputs)
    if read:
        return f"{', '.join(f'{s} {o}' for s, o in read)} changes"
    return None


def _why_replaced(old: Mapping[str, Any], new: Mapping[str, Any], moves: Moves, region: str) -> tuple[str, ...]:
    if old.get("Type") != new.get("Type"):
        return (f"Type ({old.get('Type')} to {new.get('Type')})",)
    before, after = old.get("Properties", {}), new.get("Properties", {})
    reasons = []
    for path in dict.fromkeys(create_only(new["Type"], region)):
        why = value_change(value_at(before, path), value_at(after, path), moves)
        if why is not None:
            name = path.removeprefix("/properties/").replace("/*", "[]")
            reasons.append(f"{name} ({why})" if why else name)
    return tuple(reasons)


def deploy_moves(
    old_resources: Mapping[str, Any],
    new_resources: Mapping[str, Any],
    changed_outputs: Iterable[tuple[str, str]],
    region: str,
) -> Moves:
    """Return what the deploy does to the resources both templates have, repeated until nothing more moves."""
    common = [lid for lid in new_resources if lid in old_resources]
    moves = Moves(replaced={}, updated=set(), changed_outputs=set(changed_outputs))
    while True:
        replaced = {
            lid: reasons
            for lid in common
            if lid not in moves.replaced
            and (reasons := _why_replaced(old_resources[lid], new_resources[lid], moves, region))
        }
        updated = {
            lid
            for lid in common
            if lid not in moves.replaced
            and lid not in replaced
            and value_change(old_resources[lid].get("Properties"), new_resources[lid].get("Properties"), moves)
            is not None
        }
        if not replaced and updated <= moves.updated:
            return moves
        moves.replaced.update(replaced)
        moves.updated = updated


def updated_in_place(
    old_resources: Mapping[str, Any],
    new_resources: Mapping[str, Any],
    actions: Mapping[str, Action],
    resource_types: Iterable[str] | None = None,
) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    """Yield (logical id, old, new) for each resource of one stack the deploy updates in place (ACTIONS), of one of
    RESOURCE_TYPES (default any), with the same type before and after."""
    wanted = None if resource_types is None else frozenset(resource_types)
    for lid, new in new_resources.items():
        old = old_resources.get(lid)
        kind = new.get("Type")
        if old is None or actions.get(lid) != "update" or old.get("Type") != kind:
            continue
        if wanted is None or kind in wanted:
            yield lid, old, new


def _shown(value: Any, path: str) -> str:
    return value if isinstance(value, str) else f"{path.rsplit('/', 1)[-1]} {json.dumps(value)}"


def _identity(resource: Mapping[str, Any], region: str) -> tuple[tuple[str, Any], ...]:
    """Return RESOURCE's custom name with its scope: (property, value) for each name property set (all of them: a
    primary identifier may take several), then for each property that places it (a node group's ClusterId); () when
    CloudFormation generates the name."""
    properties = resource.get("Properties", {})
    names = [(p, value_at(properties, p)) for p in name_properties(resource.get("Type", ""), region)]
    names = [(p, v) for p, v in names if v is not None]
    if not names:
        return ()
    return (*names, *((p, value_at(properties, p)) for p in scope_properties(resource["Type"])))


def _taken_name(new: Mapping[str, Any], holder: Mapping[str, Any], moves: Moves, region: str) -> str | None:
    """Return the custom name NEW is created under if HOLDER (an old resource) holds it in the same scope, else None.

    A name or scope that refers to something the deploy replaces is another name, or another scope (a node group
    created in a replacement cluster holds none of the old cluster's names)."""
    identity = _identity(new, region)
    if not identity or holder.get("Type") != new.get("Type") or _identity(holder, region) != identity:
        return None
    if any(value_change(value, value, moves) is not None for _, value in identity):
        return None
    path, value = identity[0]
    return _shown(value, path)


def _action(lid: str, old_resources: Mapping[str, Any], new_resources: Mapping[str, Any], moves: Moves) -> Action:
    if lid not in new_resources:
        return "delete"
    if lid not in old_resources:
        return "create"
    return "replace" if lid in moves.replaced else "update" if lid in moves.updated else "same"


@dataclass(frozen=True)
class StackChanges:
    """What deploying one stack's new template over its old one does."""

    moves: Moves
    # Logical id -> what happens to it, for every resource of either template.
    actions: dict[str, Action]
    replacements: tuple[Replacement, ...]
    collisions: tuple[Collision, ...]
    removals: tuple[Removal, ...]


def stack_changes(
    before_template: Mapping[str, Any],
    after_template: Mapping[str, Any],
    *,
    stack: str = "",
    region: str = DEFAULT_REGION,
    changed_outputs: Iterable[tuple[str, str]] = (),
) -> StackChanges:
    """Return what deploying AFTER_TEMPLATE over BEFORE_TEMPLATE (one stack's) does.

    CHANGED_OUTPUTS: (stack, output) pairs of other stacks whose values change (read with Fn::GetStackOutput).
    """
    old_resources = before_template.get("Resources", {})
    new_resources = after_template.get("Resources", {})
    moves = deploy_moves(old_resources, new_resources, changed_outputs, region)
    done = {lid: _action(lid, old_resources, new_resources, moves) for lid in {**old_resources, **new_resources}}
    replaced = []
    collided = []
    for lid, new in new_resources.items():
        if done[lid] not in ("create", "replace"):
            continue
        old = old_resources.get(lid)
        if old is not None:
            replaced.append(
                Replacement(
                    stack=stack,
                    logical_id=lid,
                    type=new["Type"],
                    because=moves.replaced[lid],
                    # Which template's policy CloudFormation applies is not documented: the old one is kept only if
                    # both say so.
                    keeps_old=old.get("UpdateReplacePolicy") in RETAINED and new.get("UpdateReplacePolicy") in RETAINED,
                    custom_name=_taken_name(new, old, moves, region),
                )
            )
        for holder_lid, holder in old_resources.items():
            name = _taken_name(new, holder, moves, region) if holder_lid != lid else None
            if name is not None:
                collided.append(Collision(stack, lid, new["Type"], name, holder_lid, replacing=old is not None))
    removed = tuple(removals(before_template, after_template, stack=stack))
    return StackChanges(moves, done, tuple(replaced), tuple(collided), removed)


def actions(
    before_template: Mapping[str, Any],
    after_template: Mapping[str, Any],
    *,
    region: str = DEFAULT_REGION,
    changed_outputs: Iterable[tuple[str, str]] = (),
) -> dict[str, Action]:
    """Return what deploying AFTER_TEMPLATE over BEFORE_TEMPLATE does to each resource of either: logical id ->
    create, update, replace, same or delete."""
    return stack_changes(before_template, after_template, region=region, changed_outputs=changed_outputs).actions


def replacements(
    before_template: Mapping[str, Any],
    after_template: Mapping[str, Any],
    *,
    stack: str = "",
    region: str = DEFAULT_REGION,
    changed_outputs: Iterable[tuple[str, str]] = (),
) -> list[Replacement]:
    """Return the resources of one stack that deploying AFTER_TEMPLATE over BEFORE_TEMPLATE replaces; one that keeps
    its custom name in the same scope is refused (`Replacement.custom_name`)."""
    changes = stack_changes(
        before_template, after_template, stack=stack, region=region, changed_outputs=changed_outputs
    )
    return list(changes.replacements)


def collisions(
    before_template: Mapping[str, Any],
    after_template: Mapping[str, Any],
    *,
    stack: str = "",
    region: str = DEFAULT_REGION,
    changed_outputs: Iterable[tuple[str, str]] = (),
) -> list[Collision]:
    """Return the resources deploying AFTER_TEMPLATE creates (new ones and replacements) under a custom name another
    resource of BEFORE_TEMPLATE holds in the same scope: CloudFormation creates them before it deletes the old ones,
    so the create fails."""
    changes = stack_changes(
        before_template, after_template, stack=stack, region=region, changed_outputs=changed_outputs
    )
    return list(changes.collisions)


def removals(
    before_template: Mapping[str, Any], after_template: Mapping[str, Any], *, stack: str = ""
) -> list[Removal]:
    """Return the stateful resources of BEFORE_TEMPLATE that AFTER_TEMPLATE no longer has."""
    new_resources = after_template.get("Resources", {})
    return [
        Removal(stack=stack, logical_id=lid, type=old["Type"], kept=old.get("DeletionPolicy") in RETAINED)
        for lid, old in before_template.get("Resources", {}).items()
        if lid not in new_resources and old.get("Type") in STATEFUL
    ]
