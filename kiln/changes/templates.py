"""Reading CloudFormation templates: a cloud assembly's stacks, and what a value refers to, imports or exports."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# DeletionPolicy and UpdateReplacePolicy values that keep the resource outside the stack.
RETAINED = ("Retain", "RetainExceptOnCreate")
_SUB_NAME = re.compile(r"\$\{([^!}][^}]*)\}")


def assembly_templates(outdir: Path) -> dict[str, dict[str, Any]]:
    """Return the templates of the cloud assembly at OUTDIR by CloudFormation stack name, in the manifest's order."""
    return {name: template for name, (template, _) in _assembly(outdir).items()}


def assembly_dependencies(outdir: Path) -> dict[str, tuple[str, ...]]:
    """Return, per stack of the cloud assembly at OUTDIR, the stacks it depends on (deployed before it)."""
    return {name: needs for name, (_, needs) in _assembly(outdir).items()}


def _assembly(outdir: Path) -> dict[str, tuple[dict[str, Any], tuple[str, ...]]]:
    manifest = json.loads((Path(outdir) / "manifest.json").read_text())
    artifacts = manifest.get("artifacts", {})
    stacks = {aid: a for aid, a in artifacts.items() if a.get("type") == "aws:cloudformation:stack"}

    def name(artifact_id: str) -> str:
        return stacks[artifact_id].get("properties", {}).get("stackName", artifact_id)

    return {
        name(aid): (
            json.loads((Path(outdir) / artifact["properties"]["templateFile"]).read_text()),
            tuple(name(d) for d in artifact.get("dependencies", ()) if d in stacks),
        )
        for aid, artifact in stacks.items()
    }


def value_at(properties: Any, path: str) -> Any:
    """Return the value at PATH (/properties/A/B, * for every item of a list) in PROPERTIES; None where absent."""
    value = properties
    for index, part in enumerate(path.split("/")[2:]):
        if part == "*":
            rest = "/properties/" + "/".join(path.split("/")[2 + index + 1 :])
            return [value_at(item, rest) for item in value] if isinstance(value, list) else None
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def attribute_references(value: Any) -> set[tuple[str, str | None]]:
    """Return what VALUE refers to: (logical id, attribute, or None for Ref), from Ref, Fn::GetAtt and Fn::Sub;
    pseudo parameters left out."""
    found: set[tuple[str, str | None]] = set()
    if isinstance(value, dict):
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref" and isinstance(arg, str):
                return set() if arg.startswith("AWS::") else {(arg, None)}
            if key == "Fn::GetAtt":
                parts = arg if isinstance(arg, list) else str(arg).split(".", 1)
                return {(str(parts[0]), str(parts[1]) if len(parts) > 1 else None)}
            if key == "Fn::Sub":
                text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
                names = [m.split(".", 1) for m in _SUB_NAME.findall(text)]
                return {
                    (n[0], n[1] if len(n) > 1 else None)
                    for n in names
                    if n[0] not in variables and not n[0].startswith("AWS::")
                } | attribute_references(variables)
        for child in value.values():
            found |= attribute_references(child)
    elif isinstance(value, list):
        for child in value:
            found |= attribute_references(child)
    return found


def references(value: Any) -> set[str]:
    """Return the logical ids VALUE refers to (Ref, Fn::GetAtt, Fn::Sub), pseudo parameters left out."""
    return {target for target, _ in attribute_references(value)}


def imports(value: Any) -> set[str]:
    """Return the export names VALUE imports with Fn::ImportValue (literal names: what CDK writes)."""
    found: set[str] = set()
    if isinstance(value, dict):
        if len(value) == 1 and "Fn::ImportValue" in value and isinstance(value["Fn::ImportValue"], str):
            return {value["Fn::ImportValue"]}
        for child in value.values():
            found |= imports(child)
    elif isinstance(value, list):
        for child in value:
            found |= imports(child)
    return found


def stack_outputs_read(value: Any) -> set[tuple[str, str]]:
    """Return the (stack, output) pairs VALUE reads with Fn::GetStackOutput (a weak reference)."""
    found: set[tuple[str, str]] = set()
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get("Fn::GetStackOutput"), dict):
            arg = value["Fn::GetStackOutput"]
            if isinstance(arg.get("StackName"), str) and isinstance(arg.get("OutputName"), str):
                return {(arg["StackName"], arg["OutputName"])}
        for child in value.values():
            found |= stack_outputs_read(child)
    elif isinstance(value, list):
        for child in value:
            found |= stack_outputs_read(child)
    return found


def exports(template: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """Return TEMPLATE's exports: export name -> (output key, value)."""
    found = {}
    for key, output in template.get("Outputs", {}).items():
        name = output.get("Export", {}).get("Name")
        if isinstance(name, str):
            found[name] = (key, output.get("Value"))
    return found


def importers(templates: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Return, per export name, the stacks of TEMPLATES that import it."""
    found: dict[str, set[str]] = {}
    for stack, template in templates.items():
        for name in imports(template.get("Resources", {})) | imports(template.get("Outputs", {})):
            found.setdefault(name, set()).add(stack)
    return {name: tuple(sorted(stacks)) for name, stacks in found.items()}
