"""What deploying an app's new templates over its deployed ones does, across stacks: each stack's changes, the exports
another stack imports that CloudFormation refuses to change or remove, and changed outputs a weak reference
(Fn::GetStackOutput) carries into the stacks reading them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kiln.changes.directions import one_way_changes
from kiln.changes.findings import Action, BlockedExport, Plan
from kiln.changes.links import link_collisions
from kiln.changes.replacement import Moves, StackChanges, stack_changes, value_change
from kiln.changes.rolls import (
    deleted_groups,
    node_rolls,
    resizes,
    retyped_instance_groups,
    shrunk_instance_groups,
)
from kiln.changes.schemas import DEFAULT_REGION
from kiln.changes.subnets import subnet_collisions
from kiln.changes.templates import exports, importers, imports, references


def _output_changes(
    before_template: Mapping[str, Any], after_template: Mapping[str, Any], moves: Moves
) -> dict[str, str]:
    """Return the outputs of one stack whose values the deploy changes or removes: output key -> what happens."""
    new_outputs = after_template.get("Outputs", {})
    found = {}
    for key, output in before_template.get("Outputs", {}).items():
        if key not in new_outputs:
            found[key] = "is removed"
            continue
        value = new_outputs[key].get("Value")
        why = value_change(output.get("Value"), value, moves)
        if why == "":
            found[key] = "would change value"
        elif why is not None:
            hit = sorted(references(value) & set(moves.replaced))
            because = "; ".join(f"{lid} is replaced: {', '.join(moves.replaced[lid])} create-only" for lid in hit)
            found[key] = f"would change value ({because or why})"
    return found


def _importers_first(
    name: str,
    importing: tuple[str, ...],
    before_templates: Mapping[str, Mapping[str, Any]],
    after_templates: Mapping[str, Mapping[str, Any]],
) -> bool:
    """Return whether deploying the stacks IMPORTING export NAME first, alone, removes the import: their new templates
    no longer import it, and import only what the deployed stacks (BEFORE_TEMPLATES) export already."""
    exported = {export for template in before_templates.values() for export in exports(template)}
    for stack in importing:
        template = after_templates.get(stack)
        if template is None:
            return False
        wanted = imports(template.get("Resources", {})) | imports(template.get("Outputs", {}))
        if name in wanted or not wanted <= exported:
            return False
    return True


def _blocked(
    before_templates: Mapping[str, Mapping[str, Any]],
    after_templates: Mapping[str, Mapping[str, Any]],
    users: Mapping[str, tuple[str, ...]],
    outputs: Mapping[tuple[str, str], str],
) -> list[BlockedExport]:
    """Return the exports another stack imports (USERS) that go, or whose outputs change (OUTPUTS)."""
    blocked = []
    for s in after_templates:
        if s not in before_templates:
            continue
        new_exports = exports(after_templates[s])
        for name, (key, _) in exports(before_templates[s]).items():
            importing = tuple(u for u in users.get(name, ()) if u != s)
            if not importing:
                continue
            if name not in new_exports:
                reason = "would be removed"
            elif (s, key) in outputs:
                reason = outputs[(s, key)]
            else:
                continue
            first = _importers_first(name, importing, before_templates, after_templates)
            blocked.append(
                BlockedExport(
                    stack=s, export=name, output=key, importers=importing, reason=reason, importers_first=first
                )
            )
    return blocked


def plan(
    before_templates: Mapping[str, Mapping[str, Any]],
    after_templates: Mapping[str, Mapping[str, Any]],
    *,
    region: str = DEFAULT_REGION,
    imported_by: Mapping[str, Iterable[str]] | None = None,
) -> Plan:
    """Return what deploying AFTER_TEMPLATES (stack name -> template) over BEFORE_TEMPLATES does.

    A stack only in AFTER_TEMPLATES is new; one only in BEFORE_TEMPLATES is left alone (CDK deletes no stack that
    leaves the app). IMPORTED_BY: export name -> the stacks importing it, as deployed; default: BEFORE_TEMPLATES'.
    """
    users = (
        {name: tuple(sorted(stacks)) for name, stacks in imported_by.items()}
        if imported_by is not None
        else importers(before_templates)
    )
    both = [s for s in after_templates if s in before_templates]
    changed_outputs: set[tuple[str, str]] = set()
    # A weak reference (Fn::GetStackOutput) carries a changed output into its reader: repeat until nothing moves.
    while True:
        stacks: dict[str, StackChanges] = {
            s: stack_changes(
                before_templates[s], after_templates[s], stack=s, region=region, changed_outputs=changed_outputs
            )
            for s in both
        }
        outputs = {
            (s, key): why
            for s in both
            for key, why in _output_changes(before_templates[s], after_templates[s], stacks[s].moves).items()
        }
        if set(outputs) <= changed_outputs:
            break
        changed_outputs |= set(outputs)
    new: dict[str, dict[str, Action]] = {
        s: dict.fromkeys(template.get("Resources", {}), "create")
        for s, template in after_templates.items()
        if s not in before_templates
    }

    def per_stack(
        judge: Callable[..., Iterable[Any]], *, with_moves: bool = False, with_outputs: bool = False
    ) -> tuple:
        """Return what JUDGE finds in each stack both sides have: its old and new resources, what the deploy does to
        each (and, WITH_MOVES, why; WITH_OUTPUTS, the old template's outputs)."""
        found = []
        for s in both:
            old, new = before_templates[s].get("Resources", {}), after_templates[s].get("Resources", {})
            extra: dict[str, Any] = {"outputs": before_templates[s].get("Outputs", {})} if with_outputs else {}
            moves = (stacks[s].moves,) if with_moves else ()
            found += judge(old, new, stacks[s].actions, *moves, stack=s, **extra)
        return tuple(found)

    return Plan(
        replacements=tuple(r for s in both for r in stacks[s].replacements),
        removals=tuple(r for s in both for r in stacks[s].removals),
        blocked=tuple(_blocked(before_templates, after_templates, users, outputs)),
        collisions=tuple(c for s in both for c in stacks[s].collisions),
        actions={**{s: stacks[s].actions for s in both}, **new},
        one_way=per_stack(one_way_changes),
        rolls=per_stack(node_rolls, with_moves=True),
        subnets=subnet_collisions(before_templates, after_templates),
        links=per_stack(link_collisions, with_outputs=True),
        resizes=per_stack(resizes),
        deleted_groups=per_stack(deleted_groups, with_moves=True),
        shrunk_groups=per_stack(shrunk_instance_groups),
        retyped_groups=per_stack(retyped_instance_groups),
    )


def blocked_exports(
    before_templates: Mapping[str, Mapping[str, Any]],
    after_templates: Mapping[str, Mapping[str, Any]],
    *,
    region: str = DEFAULT_REGION,
    imported_by: Mapping[str, Iterable[str]] | None = None,
) -> list[BlockedExport]:
    """Return the exports of BEFORE_TEMPLATES that deploying AFTER_TEMPLATES would change or remove while a stack
    imports them (IMPORTED_BY, export name -> stacks; default: the importers among BEFORE_TEMPLATES)."""
    return list(plan(before_templates, after_templates, region=region, imported_by=imported_by).blocked)
