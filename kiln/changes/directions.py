"""Properties CloudFormation updates in place but the service changes in one direction only (platforms.json,
cloudformation.one_way_properties): a change the other way fails the update and rolls the deploy back.

A rule is a number that only increases (FSx for Lustre's storage capacity), or a version that only moves to a newer
one: by one minor version at a time (EKS), or to the versions a table allows from the current one (PCS's Slurm).
`one_way_changes` judges two templates of a stack (`kiln diff`); `spec_one_way_changes` judges two specs by the same
rules, through the spec field each rule's value comes from (`kiln validate --before`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from kiln.catalog.platforms import service_fact, version_key
from kiln.changes.replacement import updated_in_place

Direction = Literal["increase", "newer"]


@dataclass(frozen=True)
class OneWayRule:
    """A property of a resource type that its service changes in one direction only, and the spec field it mirrors."""

    type: str
    # The property's path below Properties, parts joined by "/": StorageCapacity, Scheduler/Version.
    property: str
    direction: Direction
    why: str
    source: str
    # "minor": a version moves up by one minor version at a time.
    step: Literal["minor"] | None = None
    # Per current version, the versions it may move to (a version missing here: any newer one).
    targets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # The spec field the value comes from (as a user writes it), the ClusterSpec attribute path that holds it with its
    # default, and the spec fields whose change replaces the resource instead (then any value goes); None: no field.
    spec_field: str | None = None
    spec_value: str | None = None
    replaced_by: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return f"/properties/{self.property}"

    def refusal(self, before: Any, after: Any) -> str | None:
        """Return what to do instead when the service refuses moving the value from BEFORE to AFTER; None when it
        takes the change, or when either value is not known before deploy (a parameter, an intrinsic)."""
        if self.direction == "increase":
            old, new = _number(before), _number(after)
            return f"keep {before} or more" if old is not None and new is not None and new < old else None
        old, new = _version(before), _version(after)
        if old is None or new is None or old == new:
            return None
        if version_key(new) < version_key(old):
            return f"keep {old} or a newer version"
        if old in self.targets and new not in self.targets[old]:
            allowed = self.targets[old]
            if not allowed:
                return f"keep {old}: it moves to no other version"
            return f"from {old} it moves only to {' or '.join(allowed)}: deploy one of those first"
        if self.step == "minor":
            following = _next_minor(old)
            if following is not None and version_key(new) > version_key(following):
                return f"deploy {following} first, then {new}"
        return None


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
    remedy: str

    def line(self) -> str:
        name = self.path.removeprefix("/properties/")
        return (
            f"{self.stack} {self.logical_id} ({self.type}) {name} {self.before} -> {self.after}: {self.why} "
            f"({self.source}), so the update fails and rolls the deploy back; {self.remedy}"
        )


@cache
def one_way_rules() -> tuple[OneWayRule, ...]:
    """Return the one-way rules of platforms.json (cloudformation.one_way_properties), each with its source."""
    rules = []
    for raw in service_fact("cloudformation", "one_way_properties").value:
        spec = raw.get("spec", {})
        rules.append(
            OneWayRule(
                type=raw["type"],
                property=raw["property"],
                direction=raw["direction"],
                why=raw["why"],
                source=raw["source"],
                step=raw.get("step"),
                targets={old: tuple(new) for old, new in raw.get("targets", {}).items()},
                spec_field=spec.get("field"),
                spec_value=spec.get("value", spec.get("field")),
                replaced_by=tuple(spec.get("replaced_by", ())),
            )
        )
    return tuple(rules)


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


def _version(value: Any) -> str | None:
    # A version is dotted numbers written as text (1.36, 25.11); a number would have lost its trailing zeros.
    return value if isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)+", value) else None


def _next_minor(version: str) -> str | None:
    major, _, rest = version.partition(".")
    minor = rest.split(".", 1)[0]
    return f"{major}.{int(minor) + 1}" if minor.isdigit() else None


def one_way_changes(
    before_resources: Mapping[str, Any],
    after_resources: Mapping[str, Any],
    updated: Mapping[str, str],
    *,
    stack: str = "",
) -> list[OneWayChange]:
    """Return the one-way properties that deploying AFTER_RESOURCES over BEFORE_RESOURCES (one stack's) moves the way
    their service refuses, on a resource the deploy updates in place (UPDATED: logical id -> action; a replaced
    resource starts anew)."""
    found = []
    for lid, old, new in updated_in_place(before_resources, after_resources, updated):
        for rule in one_way_rules():
            if rule.type != new.get("Type"):
                continue
            was = _value(old.get("Properties", {}), rule.path)
            now = _value(new.get("Properties", {}), rule.path)
            remedy = rule.refusal(was, now)
            if remedy is not None:
                found.append(OneWayChange(stack, lid, rule.type, rule.path, was, now, rule.why, rule.source, remedy))
    return found


def _attribute(spec: Any, dotted: str) -> Any:
    node = spec
    for name in dotted.split("."):
        if node is None:
            return None
        node = getattr(node, name)
    return node


def spec_one_way_changes(before: Any, after: Any) -> list[str]:
    """Return one line per spec field whose change from spec BEFORE (deployed) to AFTER its service refuses, by the
    rules `kiln diff` judges templates with; a rule whose resource either spec lacks, or whose resource the change
    replaces (a field of the rule's replaced_by changes), judges nothing."""
    lines = []
    for rule in one_way_rules():
        if rule.spec_field is None or rule.spec_value is None:
            continue
        if any(_attribute(before, name) != _attribute(after, name) for name in rule.replaced_by):
            continue
        was, now = _attribute(before, rule.spec_value), _attribute(after, rule.spec_value)
        if was is None or now is None:
            continue
        remedy = rule.refusal(was, now)
        if remedy is not None:
            lines.append(
                f"{rule.spec_field} {was} -> {now}: {rule.why} ({rule.source}), so deploying it over the cluster "
                f"made from the old spec fails and rolls back; {remedy}"
            )
    return lines
