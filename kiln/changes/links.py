"""Links between an FSx for Lustre file system and S3 (data repository associations) that a deploy would create on a
directory a link still existing holds: FSx refuses the create and the deploy rolls back.

FSx gives each link a directory of its own: two links' file system paths may not overlap, and '/' may be only a file
system's one link (platforms.json, fsx_lustre.data_repository_links). CloudFormation creates a replacement before it
deletes the resource it replaces, and a new resource before it deletes one the template drops, so a link replaced on
the same directory (a new data repository path is create-only) always meets its old self there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kiln.catalog.platforms import service_fact
from kiln.changes.templates import RETAINED, references

LINK = "AWS::FSx::DataRepositoryAssociation"


@dataclass(frozen=True)
class LinkCollision:
    """A link the deploy creates (new, or a replacement) on a directory of a file system a link still holds."""

    stack: str
    logical_id: str
    path: str
    # The link still holding the directory (the old self of a replaced link) and its path.
    holder: str
    holder_path: str
    replacing: bool
    # The holder stays on the file system after the deploy (Retain), so every later deploy meets it too.
    kept: bool
    # The stack output whose value is the file system's id, where the old template has one.
    file_system_output: str | None = None

    def line(self) -> str:
        fact = service_fact("fsx_lustre", "data_repository_links")
        what = f"{self.stack} {self.logical_id} ({LINK})"
        if self.replacing:
            happens = (
                f"{what} would be replaced by a link on {self.path} while the old one still links {self.holder_path} "
                "of the same file system"
            )
        else:
            happens = f"{what} would link {self.path} while {self.holder} still links {self.holder_path} of it"
        kept = (
            "; the old link is kept (Retain), so every later deploy fails the same way until it is deleted"
            if self.kept
            else ""
        )
        file_system = (
            f"the {self.file_system_output} output of {self.stack}" if self.file_system_output else "its file system"
        )
        return (
            f"{happens}: CloudFormation creates a link before it deletes the one it replaces, and FSx takes no "
            f"second link on an overlapping directory ({fact.value['root']} only as a file system's one link; "
            f"{fact.source}), so the create fails and rolls the deploy back{kept}; delete the old link first "
            f"(`aws fsx describe-data-repository-associations --filters Name=file-system-id,Values=<{file_system}>` "
            "names it; `aws fsx delete-data-repository-association --association-id <its dra- id> "
            "--no-delete-data-in-file-system` keeps its files), then deploy, or leave this change out"
        )


def _parts(path: str) -> tuple[str, ...]:
    return tuple(part for part in path.split("/") if part)


def overlaps(a: str, b: str) -> bool:
    """Return whether file system paths A and B overlap as FSx judges two links' paths: the same directory, or one
    inside the other ('/' holds every other)."""
    if service_fact("fsx_lustre", "data_repository_links").value["paths_overlap"]:
        return False
    first, second = _parts(a), _parts(b)
    shorter = min(len(first), len(second))
    return first[:shorter] == second[:shorter]


def _property(resource: Mapping[str, Any], name: str) -> Any:
    return resource.get("Properties", {}).get(name)


def _output_of(outputs: Mapping[str, Any], file_system: Any) -> str | None:
    """Return the key of the output (of OUTPUTS) whose value is the FILE_SYSTEM expression a link names."""
    for key, output in outputs.items():
        if json.dumps(output.get("Value"), sort_keys=True) == json.dumps(file_system, sort_keys=True):
            return key
    return None


def link_collisions(
    before_resources: Mapping[str, Any],
    after_resources: Mapping[str, Any],
    actions: Mapping[str, str],
    *,
    stack: str = "",
    outputs: Mapping[str, Any] | None = None,
) -> list[LinkCollision]:
    """Return the links that deploying AFTER_RESOURCES over BEFORE_RESOURCES (one stack's; ACTIONS: logical id ->
    what the deploy does) creates on a file system it keeps, on a directory overlapping one an old link holds.

    OUTPUTS: the old template's outputs, to name the one carrying the file system's id. A link whose path is only
    known at deploy time is not judged, nor one on a file system the deploy creates or replaces (a new file system
    has no link yet).
    """
    found = []
    for lid, new in after_resources.items():
        if new.get("Type") != LINK or actions.get(lid) not in ("create", "replace"):
            continue
        path, file_system = _property(new, "FileSystemPath"), _property(new, "FileSystemId")
        new_file_system = any(actions.get(ref) in ("create", "replace") for ref in references(file_system))
        if not isinstance(path, str) or new_file_system:
            continue
        same = json.dumps(file_system, sort_keys=True)
        holders = [
            (hlid, old)
            for hlid, old in before_resources.items()
            if old.get("Type") == LINK
            and json.dumps(_property(old, "FileSystemId"), sort_keys=True) == same
            and isinstance(_property(old, "FileSystemPath"), str)
            and overlaps(path, _property(old, "FileSystemPath"))
        ]
        if not holders:
            continue
        # A replaced link meets its old self first.
        hlid, holder = next(((h, old) for h, old in holders if h == lid), holders[0])
        replacing = hlid == lid
        if replacing:
            kept = holder.get("UpdateReplacePolicy") in RETAINED and new.get("UpdateReplacePolicy") in RETAINED
        else:
            kept = hlid not in after_resources and holder.get("DeletionPolicy") in RETAINED
        found.append(
            LinkCollision(
                stack=stack,
                logical_id=lid,
                path=path,
                holder=hlid,
                holder_path=_property(holder, "FileSystemPath"),
                replacing=replacing,
                kept=kept,
                file_system_output=_output_of(outputs or {}, file_system),
            )
        )
    return found
