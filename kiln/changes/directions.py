"""Properties CloudFormation updates in place but the service changes in one direction only (platforms.json,
cloudformation.increase_only_properties): a change the other way fails the update and rolls the deploy back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kiln.catalog.platforms import service_fact


@dataclass(frozen=True)
class OneWayChange:
    """A property of a resource the deploy updates, changed in the direction its service refuses."""

    stack: str
    logical_id: str
    type: str
    path: str
    before: Any
    after: Any
    why: str
    source: str

    def line(self) -> str:
        name = self.path.removeprefix("/properties/")
        return (
            f"{self.stack} {self.logical_id} ({self.type}) {name} {self.before} -> {self.after}: {self.why} "
            f"({self.source}), so the update fails and rolls the deploy back; keep {self.before} or more"
        )


def increase_only() -> dict[str, dict[str, str]]:
    """Return, per resource type, the property paths its service only increases, with why."""
    return {t: dict(paths) for t, paths in service_fact("cloudformation", "increase_only_properties").value.items()}


def _value(properties: Mapping[str, Any], path: str) -> Any:
    node: Any = properties
    for part in path.removeprefix("/properties/").split("/"):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _number(value: Any) -> float | None:
    # A template holds a number as a number or as its text; anything else (a parameter, an intrinsic) is unknown here.
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def one_way_changes(
    before_resources: Mapping[str, Any],
    after_resources: Mapping[str, Any],
    updated: Mapping[str, str],
    *,
    stack: str = "",
) -> list[OneWayChange]:
    """Return the one-way properties that deploying AFTER_RESOURCES over BEFORE_RESOURCES (one stack's) lowers on a
    resource the deploy updates in place (UPDATED: logical id -> action; a replaced resource starts anew)."""
    fact = service_fact("cloudformation", "increase_only_properties")
    found = []
    for lid, new in after_resources.items():
        old = before_resources.get(lid)
        if updated.get(lid) != "update" or old is None or old.get("Type") != new.get("Type"):
            continue
        for path, why in increase_only().get(new.get("Type", ""), {}).items():
            was = _value(old.get("Properties", {}), path)
            now = _value(new.get("Properties", {}), path)
            a, b = _number(was), _number(now)
            if a is not None and b is not None and b < a:
                found.append(OneWayChange(stack, lid, new["Type"], path, was, now, why, fact.source))
    return found
