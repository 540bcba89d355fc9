"""Walk synthesized templates as CloudFormation deletes them: what a kept (Retain) resource still needs.

A resource needs every resource its properties Ref, GetAtt or Sub, every one it DependsOn, and, through
Fn::ImportValue, the resource another stack's export names. CloudFormation skips a Retain resource on deletion and
deletes the rest; a kept resource that needs a deleted one either breaks (a group whose VPC is gone) or blocks
that deletion (a subnet still holding a kept file system's interfaces).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

SUB_REFERENCE = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")
Key = tuple[str, str]  # (stack name, logical id)


def _references(node: Any) -> Iterator[tuple[str, str]]:
    """Yield ("local", logical id) and ("import", export name) for every reference in NODE."""
    if isinstance(node, dict):
        if len(node) == 1:
            ((fn, arg),) = node.items()
            if fn == "Ref" and isinstance(arg, str):
                yield ("local", arg)
                return
            if fn == "Fn::GetAtt":
                target = arg[0] if isinstance(arg, list) else arg.split(".")[0]
                yield ("local", target)
                return
            if fn == "Fn::ImportValue" and isinstance(arg, str):
                yield ("import", arg)
                return
            if fn == "Fn::Sub":
                text = arg[0] if isinstance(arg, list) else arg
                yield from (("local", name) for name in SUB_REFERENCE.findall(text))
                if isinstance(arg, list):
                    yield from _references(arg[1])
                return
        for value in node.values():
            yield from _references(value)
    elif isinstance(node, list):
        for value in node:
            yield from _references(value)


def _exports(templates: Mapping[str, dict]) -> dict[str, Key]:
    """Return each export name -> the (stack, logical id) its value refers to."""
    exports = {}
    for stack, template in templates.items():
        for output in template.get("Outputs", {}).values():
            name = output.get("Export", {}).get("Name")
            if isinstance(name, str):
                ((_, target),) = list(_references(output["Value"]))
                exports[name] = (stack, target)
    return exports


def kept(templates: Mapping[str, dict]) -> set[Key]:
    """Return every resource CloudFormation keeps when its stack is deleted."""
    return {
        (stack, logical_id)
        for stack, template in templates.items()
        for logical_id, resource in template["Resources"].items()
        if resource.get("DeletionPolicy") == "Retain"
    }


def needs(templates: Mapping[str, dict], key: Key) -> set[Key]:
    """Return the resources (of any of TEMPLATES) the resource KEY refers to or depends on."""
    stack, logical_id = key
    resource = templates[stack]["Resources"][logical_id]
    exports = _exports(templates)
    found: set[Key] = set()
    for kind, name in _references(resource.get("Properties", {})):
        target = exports[name] if kind == "import" else (stack, name)
        if target[1] in templates[target[0]]["Resources"]:
            found.add(target)
    depends = resource.get("DependsOn", [])
    found |= {(stack, other) for other in ([depends] if isinstance(depends, str) else depends)}
    return found


def kept_needing_deleted(templates: Mapping[str, dict]) -> dict[Key, set[Key]]:
    """Return each kept resource that needs a resource CloudFormation deletes, with those it needs."""
    keep = kept(templates)
    return {key: missing for key in sorted(keep) if (missing := needs(templates, key) - keep)}
