"""Teardown: `cdk destroy --all` deletes the stacks in reverse dependency order, and each stack's resources but the
retained ones; a redeploy of the same spec creates them again, and must find no retained one in its way."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kiln.changes.schemas import DEFAULT_REGION, name_properties
from kiln.changes.templates import RETAINED, exports, imports, references, stack_outputs_read, value_at


@dataclass(frozen=True)
class Dangling:
    """A retained resource that refers to one the teardown deletes: the kept one loses what it needs, or keeps the
    deleted one from going (a security group its network interfaces use, a subnet)."""

    stack: str
    logical_id: str
    type: str
    # The deleted resource: its stack, logical id and type, and the export or output it is reached through.
    target_stack: str
    target: str
    target_type: str
    via: str = ""

    def line(self) -> str:
        via = f" through {self.via}" if self.via else ""
        where = "its own stack" if self.target_stack == self.stack else self.target_stack
        return (
            f"{self.stack} {self.logical_id} ({self.type}) is retained but refers{via} to {self.target} "
            f"({self.target_type}), which is deleted with {where}"
        )


def retained(resource: Mapping[str, Any]) -> bool:
    """Return whether RESOURCE outlives its stack (DeletionPolicy Retain or RetainExceptOnCreate)."""
    return resource.get("DeletionPolicy") in RETAINED


def deletion_order(dependencies: Mapping[str, Iterable[str]]) -> list[str]:
    """Return the stacks in the order `cdk destroy --all` deletes them: every stack before the ones it depends on."""
    needs = {stack: set(deps) & set(dependencies) for stack, deps in dependencies.items()}
    deploy: list[str] = []
    while len(deploy) < len(needs):
        ready = [s for s in needs if s not in deploy and needs[s] <= set(deploy)]
        if not ready:
            raise ValueError(
                f"the stacks depend on each other in a cycle: {', '.join(sorted(set(needs) - set(deploy)))}"
            )
        deploy.extend(ready)
    return deploy[::-1]


def _depends_on(stack: str, other: str, dependencies: Mapping[str, Iterable[str]]) -> bool:
    seen, todo = set(), list(dependencies.get(stack, ()))
    while todo:
        current = todo.pop()
        if current == other:
            return True
        if current not in seen:
            seen.add(current)
            todo.extend(dependencies.get(current, ()))
    return False


def dangling_references(templates: Mapping[str, Mapping[str, Any]]) -> list[Dangling]:
    """Return every retained resource of TEMPLATES that refers (Ref, GetAtt, Sub, ImportValue, GetStackOutput) to a
    resource the teardown deletes."""
    export_values = {name: (s, value) for s, t in templates.items() for name, (_, value) in exports(t).items()}
    found = []
    for stack, template in templates.items():
        resources = template.get("Resources", {})
        for lid, resource in resources.items():
            if not retained(resource):
                continue
            properties = resource.get("Properties", {})
            reached = [(stack, target, "") for target in sorted(references(properties))]
            for name in sorted(imports(properties)):
                if name in export_values:
                    producer, value = export_values[name]
                    reached += [(producer, target, f"export {name}") for target in sorted(references(value))]
            for producer, output in sorted(stack_outputs_read(properties)):
                value = templates.get(producer, {}).get("Outputs", {}).get(output, {}).get("Value")
                reached += [(producer, target, f"output {producer} {output}") for target in sorted(references(value))]
            for target_stack, target, via in reached:
                other = templates.get(target_stack, {}).get("Resources", {}).get(target)
                if other is not None and not retained(other):
                    found.append(Dangling(stack, lid, resource["Type"], target_stack, target, other["Type"], via))
    return found


def imports_out_of_order(
    templates: Mapping[str, Mapping[str, Any]], dependencies: Mapping[str, Iterable[str]]
) -> list[str]:
    """Return one line per import whose exporting stack the teardown could delete before the importing one."""
    producer_of = {name: s for s, t in templates.items() for name in exports(t)}
    lines = []
    for stack, template in templates.items():
        for name in sorted(imports(template.get("Resources", {})) | imports(template.get("Outputs", {}))):
            producer = producer_of.get(name)
            if producer is None:
                lines.append(f"{stack} imports {name}, which no stack of the app exports")
            elif not _depends_on(stack, producer, dependencies):
                lines.append(f"{stack} imports {name} from {producer} without depending on it: {producer} may go first")
    return lines


def fixed_names(
    resource: Mapping[str, Any],
    resources: Mapping[str, Any],
    region: str = DEFAULT_REGION,
    *,
    _seen: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Return RESOURCE's custom names that a stack created again would reuse: name property -> value. A name that
    holds the stack id, or a resource's generated id, is new with every stack."""
    found = {}
    for path in name_properties(resource.get("Type", ""), region):
        value = value_at(resource.get("Properties", {}), path)
        if value is None:
            continue
        targets = references(value) - _seen
        unique = "AWS::StackId" in json.dumps(value) or any(
            t in resources and not fixed_names(resources[t], resources, region, _seen=_seen | {t}) for t in targets
        )
        if not unique:
            found[path.rsplit("/", 1)[-1]] = value
    return found
