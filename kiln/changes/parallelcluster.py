"""ParallelCluster's update of a running cluster: which settings changed between two cluster configurations, and
which of those changes its update check refuses on a cluster in use, with what to do instead.

Pure: ParallelCluster configurations in (a Custom::PclusterCluster's ClusterConfiguration, read from a synthesized
or deployed template), lines out; no CDK and no AWS call. `kiln diff` (kiln/cli/diff.py, backend_refusals) runs
it beside CloudFormation's own findings, since the provider's custom resource fails an update ParallelCluster
refuses and CloudFormation rolls it back. Each setting's update policy is data (platforms.json,
parallelcluster.update_policies), and update_verdicts judges a change the way ParallelCluster's own check
(pcluster.config.config_patch.ConfigPatch) does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kiln.catalog.platforms import service_fact

# The update policy of every setting kiln.constructs.parallelcluster writes, by path (a list of sections keyed as
# List[Key]).
UPDATE_POLICIES: dict[str, str] = dict(service_fact("parallelcluster", "update_policies").value)

# The keyed lists of the configuration (path -> the key that matches their items across an update), from the
# paths of UPDATE_POLICIES: Scheduling/SlurmQueues[Name] is the list of queues, matched by Name.
_KEYED_LIST = re.compile(r"^(?P<list>.+)\[(?P<key>\w+)\]$")
KEYED_LISTS: dict[str, str] = {
    match["list"]: match["key"] for path in UPDATE_POLICIES if (match := _KEYED_LIST.match(path)) is not None
}
# The remedy for each kind of refusal, as ParallelCluster's update documentation gives it (platforms.json,
# parallelcluster.update_policy_conditions).
_NEW_CLUSTER = "ParallelCluster never changes it on an existing cluster: keep it, or delete the cluster and deploy anew"
_FLEET_STOP = (
    "stop the compute fleet first (pcluster update-compute-fleet --cluster-name {cluster} --status STOP_REQUESTED), "
    "deploy, then start it (--status START_REQUESTED)"
)
_LOGIN_STOP = (
    "scale the login pool to 0 nodes and deploy first, then, once its nodes are gone, deploy this change with the "
    "count back"
)
_UNKNOWN = "kiln knows no update policy for this setting: keep it, or delete the cluster and deploy anew"
# SUPPORTED_UNLESS_ADC (the cluster's Tags) refuses in the ADC regions, those whose name begins so (3.16.1's
# pcluster.config.update_policy._is_adc_region): ParallelCluster blocks tag updates there until CloudFormation's
# behaviour in them is fixed.
ADC_REGION_PREFIX = "us-iso"
# Clusters made by kiln releases before issue 44 ran an OnNodeConfigured Script from CDK's file-asset bucket,
# cdk-<qualifier>-assets-<account>-<region> (DefaultStackSynthesizer's DEFAULT_FILE_ASSETS_BUCKET_NAME,
# https://docs.aws.amazon.com/cdk/api/v2/python/aws_cdk/DefaultStackSynthesizer.html), which whoever may publish
# assets may overwrite; kiln now deploys it into the cluster's own bucket, a Script change ParallelCluster takes only
# on a new cluster.
_CDK_ASSET_BUCKET = re.compile(r"cdk-[a-z0-9]+-assets-")
_BOOTSTRAP_MOVED = (
    "this kiln release moves every node's OnNodeConfigured script out of CDK's shared asset bucket, where whoever may "
    "publish CDK assets could rewrite it, into the cluster's own bucket; ParallelCluster takes that only on a new "
    "cluster, once: destroy the compute stack (data in FSx and S3 stays) and deploy anew, or keep deploying this "
    "cluster with the earlier kiln release until you can"
)

# ParallelCluster's update takes a changed Iam/PermissionsBoundary (UPDATE_POLICIES: SUPPORTED), but its provider
# cannot carry it out on a running cluster: none of the policies its role holds grants iam:PutRolePermissionsBoundary or
# iam:DeleteRolePermissionsBoundary (platforms.json, parallelcluster.provider_policies_actions), and with a boundary
# kiln runs the provider as a role of its own whose IAM-admin statements act only on roles carrying that boundary
# (iam:PermissionsBoundary on CreateRole, PutRolePolicy, DeleteRolePolicy, AttachRolePolicy, DetachRolePolicy), so
# roles the cluster made without it could not even be cleaned up at deletion. Read from the 3.12 policies template;
# the safe verdict is a new cluster.
BOUNDARY_SETTING = "Iam/PermissionsBoundary"
_BOUNDARY_CHANGED = (
    "ParallelCluster's provider may neither set nor remove a role's permissions boundary (iam.permissions_boundary, "
    "or a CI environment's), and with a boundary it runs as kiln's role, whose IAM rights reach only roles carrying "
    "that boundary: the cluster's roles could neither take the change nor be deleted with the cluster; destroy the "
    "compute stack (data in FSx and S3 stays) and deploy anew, or keep the boundary the cluster was made with"
)


@dataclass(frozen=True)
class ConfigChange:
    """One setting that differs between two ParallelCluster configurations, as ParallelCluster compares them.

    segments: where it is, list items by their key: ("Scheduling", "SlurmQueues[p5]", "ComputeResources[p5-nodes]",
        "MinCount"); an item added or removed ends with the item ("Scheduling", "SlurmQueues[p5]").
    pattern: the same place as UPDATE_POLICIES names it (Scheduling/SlurmQueues[Name]/ComputeResources[Name]/...).
    old / new: its values (None where absent); for an item added to or removed from a keyed list, the item.
    """

    segments: tuple[str, ...]
    pattern: str
    old: Any
    new: Any

    @property
    def path(self) -> str:
        return "/".join(self.segments)

    @property
    def policy(self) -> str | None:
        return UPDATE_POLICIES.get(self.pattern)

    @property
    def is_item(self) -> bool:
        """An item added to or removed from a keyed list."""
        return self.pattern.endswith("]")

    @property
    def parents(self) -> tuple[str, ...]:
        return self.segments[:-1]

    @property
    def key(self) -> str:
        """The setting's own name: for an item, its list's."""
        return self.segments[-1].split("[", 1)[0]


def cluster_configuration(template: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return the ClusterConfiguration of TEMPLATE's Custom::PclusterCluster (a synthesized or deployed template)."""
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "Custom::PclusterCluster":
            return resource["Properties"]["ClusterConfiguration"]
    return None


def cluster_name_of(template: Mapping[str, Any]) -> str:
    """Return the cluster name TEMPLATE's Custom::PclusterCluster gives ParallelCluster ("" when it has none)."""
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == "Custom::PclusterCluster":
            name = resource["Properties"].get("ClusterName")
            return name if isinstance(name, str) else ""
    return ""


def config_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[ConfigChange]:
    """Return every setting that differs from BEFORE to AFTER, compared the way ParallelCluster's update does:
    sections recursively, keyed lists item by item, and other values (lists of strings too) whole. Values may be
    CloudFormation intrinsics (a template's): they compare as written."""
    return list(_changes(before, after, (), ""))


def _section(value: Any) -> bool:
    """Return whether VALUE is a section of the configuration, not a value: a CloudFormation intrinsic (a template's
    {"Ref": ...} or {"Fn::...": ...}) is one value, compared whole."""
    if not isinstance(value, dict):
        return False
    return not (len(value) == 1 and (next(iter(value)) == "Ref" or next(iter(value)).startswith("Fn::")))


def _item_name(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))


def _changes(
    old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, at: tuple[str, ...], pattern: str
) -> Iterator:
    old, new = old or {}, new or {}
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        shape = f"{pattern}/{key}".lstrip("/")
        if shape in KEYED_LISTS:
            item = KEYED_LISTS[shape]
            olds = {_item_name(entry.get(item)): entry for entry in before or []}
            news = {_item_name(entry.get(item)): entry for entry in after or []}
            for name in [*olds, *(name for name in news if name not in olds)]:
                where = (*at, f"{key}[{name}]")
                if name in olds and name in news:
                    yield from _changes(olds[name], news[name], where, f"{shape}[{item}]")
                else:
                    yield ConfigChange(where, f"{shape}[{item}]", olds.get(name), news.get(name))
        elif _section(before) and _section(after):
            yield from _changes(before, after, (*at, key), shape)
        elif UPDATE_POLICIES.get(shape) == "IGNORED" and _section(before or after):
            # ParallelCluster looks into a section that is not analyzed for what was added or removed in it.
            yield from _changes(before, after, (*at, key), shape)
        else:
            yield ConfigChange((*at, key), shape, before, after)


def update_verdicts(
    before: Mapping[str, Any], after: Mapping[str, Any], cluster_name: str
) -> list[tuple[ConfigChange, str | None]]:
    """Return each change from BEFORE to AFTER with the line refusing it, or None where the update takes it.

    The cluster is taken to be in use: its compute fleet running (ParallelCluster's state until someone stops it)
    and its login pools up where BEFORE gives them nodes; AFTER's QueueUpdateStrategy applies. Each change is judged
    by the update policy of its setting (UPDATE_POLICIES) the way ParallelCluster's own check does; a setting kiln
    has no policy for is refused.
    """
    changes = config_changes(before, after)
    verdicts: list[tuple[ConfigChange, str | None]] = []
    for change in changes:
        remedy = _refusal(change, changes, before, after)
        if remedy == _NEW_CLUSTER and _moves_script_out_of_cdk_assets(change):
            remedy = _BOOTSTRAP_MOVED
        if change.pattern == BOUNDARY_SETTING:
            remedy = _BOUNDARY_CHANGED
        line = None
        if remedy is not None:
            what = "added" if change.old is None else "removed" if change.new is None else "changed"
            if not change.is_item and what == "changed":
                what = f"{_brief(change.old)} -> {_brief(change.new)}"
            line = (
                f"ParallelCluster {cluster_name}: {change.path} {what}: update policy {change.policy or 'unknown'}; "
                + remedy.format(cluster=cluster_name)
            )
        verdicts.append((change, line))
    return verdicts


def update_refusals(before: Mapping[str, Any], after: Mapping[str, Any], cluster_name: str) -> list[str]:
    """Return one line for each change from BEFORE to AFTER that ParallelCluster's update of a cluster in use
    refuses, with what to do instead (none: the update goes through); see update_verdicts."""
    return [line for _, line in update_verdicts(before, after, cluster_name) if line is not None]


def _moves_script_out_of_cdk_assets(change: ConfigChange) -> bool:
    """Return whether CHANGE moves an OnNodeConfigured Script from CDK's asset bucket to another place (kiln's move
    of resolve-bootstrap.sh into the cluster's own bucket)."""
    if not change.pattern.endswith("OnNodeConfigured/Script"):
        return False
    old, new = (json.dumps(value) for value in (change.old, change.new))
    return bool(_CDK_ASSET_BUCKET.search(old)) and not _CDK_ASSET_BUCKET.search(new)


def _brief(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 60 else text[:57] + "..."


def _queue_update_strategy(config: Mapping[str, Any]) -> str:
    settings = config.get("Scheduling", {}).get("SlurmSettings", {})
    return settings.get("QueueUpdateStrategy", "COMPUTE_FLEET_STOP")


def _running_pools(config: Mapping[str, Any]) -> set[str]:
    pools = config.get("LoginNodes", {}).get("Pools", [])
    return {pool.get("Name") for pool in pools if pool.get("Count", 0) > 0}


def _named(config: Mapping[str, Any], parents: Sequence[str], kind: str) -> Mapping[str, Any]:
    """Return the queue (kind SlurmQueues) or compute resource (ComputeResources) the change's path names."""
    node: Any = config
    for part in parents:
        name, _, item = part.partition("[")
        node = node.get(name, {}) if isinstance(node, Mapping) else {}
        if item:
            entries = node if isinstance(node, list) else []
            node = next((entry for entry in entries if _item_name(entry.get("Name")) == item[:-1]), {})
        if name == kind:
            return node
    return {}


def _managed_placement_group(queue: Mapping[str, Any], resource: Mapping[str, Any]) -> bool:
    chosen = resource.get("Networking", {}).get("PlacementGroup") or queue.get("Networking", {}).get("PlacementGroup")
    return bool(chosen and chosen.get("Enabled") and not (chosen.get("Name") or chosen.get("Id")))


def _managed_lustre(config: Mapping[str, Any]) -> set[str]:
    return {
        storage.get("Name")
        for storage in config.get("SharedStorage", [])
        if storage.get("StorageType") == "FsxLustre" and "FileSystemId" not in storage.get("FsxLustreSettings", {})
    }


def _refusal(
    change: ConfigChange, changes: list[ConfigChange], before: Mapping[str, Any], after: Mapping[str, Any]
) -> str | None:
    """Return the remedy when ParallelCluster refuses CHANGE on a cluster in use, else None."""
    policy = change.policy
    strategy = _queue_update_strategy(after)
    if policy is None:
        return _UNKNOWN
    in_queues = any(part.startswith("SlurmQueues[") for part in change.parents)
    strategy_applies = in_queues and strategy != "COMPUTE_FLEET_STOP"
    if policy in ("SUPPORTED", "IGNORED"):
        return None
    if policy == "SUPPORTED_UNLESS_ADC":
        region = after.get("Region")
        return _NEW_CLUSTER if isinstance(region, str) and region.startswith(ADC_REGION_PREFIX) else None
    if policy == "QUEUE_UPDATE_STRATEGY":
        return None if strategy_applies else _FLEET_STOP
    if policy == "MANAGED_PLACEMENT_GROUP":
        queues = [_named(config, change.segments, "SlurmQueues") for config in (before, after)]
        resources = [_named(config, change.segments, "ComputeResources") for config in (before, after)]
        deleted = _managed_placement_group(queues[0], resources[0]) and not _managed_placement_group(
            queues[1], resources[1]
        )
        return _FLEET_STOP if deleted or not strategy_applies else None
    if policy == "MANAGED_FSX":
        if _managed_lustre(before) & _managed_lustre(after):
            return _NEW_CLUSTER
        kept = isinstance(change.old, list) and all(value in (change.new or []) for value in change.old)
        return None if in_queues and (strategy != "COMPUTE_FLEET_STOP" or kept) else _FLEET_STOP
    if policy == "RESIZE_UPDATE_STRATEGY_ON_REMOVE":
        resizable = in_queues or change.key == "SlurmQueues"
        if resizable and (strategy == "TERMINATE" or (change.is_item and change.old is None)):
            return None
        if change.key == "MaxCount" and (change.new or 0) >= (change.old or 0):
            return None
        if change.key == "MinCount":
            sibling = next((c for c in changes if c.parents == change.parents and c.key == "MaxCount"), None)
            if sibling is not None and (sibling.new or 0) - (sibling.old or 0) >= (change.new or 0) - (change.old or 0):
                return None
        return _FLEET_STOP
    if policy == "SHARED_STORAGE_UPDATE_POLICY":
        # ParallelCluster mounts and unmounts a file system it did not make (FileSystemId) on running nodes.
        storage = change.new if change.new is not None else change.old
        external = (
            change.is_item
            and storage.get("StorageType") == "FsxLustre"
            and "FileSystemId" in storage.get("FsxLustreSettings", {})
            and storage.get("MountDir") not in ("home", "/home")
        )
        return None if external else _NEW_CLUSTER
    if policy == "LOGIN_NODES_STOP":
        return None if not _running_pools(before) else _LOGIN_STOP
    if policy == "LOGIN_NODES_POOLS_UPDATE_POLICY":
        return None if not _running_pools(before) or change.old is None else _LOGIN_STOP
    if policy == "LOGIN_NODES_POOL_STOP":
        pool = next((p[len("Pools[") : -1] for p in change.parents if p.startswith("Pools[")), None)
        return None if pool not in _running_pools(before) else _LOGIN_STOP
    if policy in ("COMPUTE_FLEET_STOP", "COMPUTE_AND_LOGIN_NODES_STOP"):
        return _FLEET_STOP if policy == "COMPUTE_FLEET_STOP" else _FLEET_STOP + "; " + _LOGIN_STOP
    return _NEW_CLUSTER
