"""Do the FSx for Lustre quotas leave room for the file system: its storage (per deployment type) and its count?"""

from __future__ import annotations

import re
from collections.abc import Iterable

from botocore.exceptions import ClientError

from kiln.aws.errors import error_code
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.checks.quotas import QuotaList, number, service_quotas_remedy
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan
from kiln.spec.models import Lustre

NAME = "lustre"
FSX = "fsx"
# PERSISTENT_2's throughput tiers (MB/s/TiB): a storage quota whose name carries one counts that tier only.
THROUGHPUT_TIERS = frozenset({125, 250, 500, 1000})
# Quota names are matched on their words: lower case, with '_' and '-' read as spaces ("Persistent_2" is
# "persistent 2"). A Scratch quota names no generation or generation 2, never 1.
DEPLOYMENT_WORDS = {
    "PERSISTENT_2": re.compile(r"\bpersistent 2\b"),
    "SCRATCH_2": re.compile(r"\bscratch\b(?! 1\b)"),
}
SCRATCH_2_WORDS = re.compile(r"\bscratch 2\b")
SCRATCH_DEPLOYMENTS = ("SCRATCH_1", "SCRATCH_2")
# Storage classes kiln never creates (its Lustre is SSD): their quotas are not this file system's.
OTHER_STORAGE_WORDS = ("hdd", "intelligent tiering")
LUSTRE_WORDS = re.compile(r"\blustre\b")
FILE_SYSTEMS_WORDS = re.compile(r"\blustre file systems\b")
NOT_FILE_SYSTEMS_WORDS = ("storage", "backup", "throughput")
# A file system that failed to create holds no storage.
NOT_COUNTED_LIFECYCLES = ("FAILED",)
SSD = "SSD"


def words(quota_name: str) -> str:
    """Return QUOTA_NAME as the patterns here read it: lower case, '_' and '-' as spaces, single-spaced."""
    return " ".join(re.split(r"[\s_-]+", quota_name.lower())).strip()


def is_lustre(quota_name: str) -> bool:
    """Return True for any quota about Lustre."""
    return LUSTRE_WORDS.search(words(quota_name)) is not None


def tiers(quota_name: str) -> frozenset[int]:
    """Return the throughput tiers (MB/s/TiB) QUOTA_NAME names; empty when the quota is not per tier."""
    return frozenset(int(n) for n in re.findall(r"\b[0-9]+\b", words(quota_name))) & THROUGHPUT_TIERS


def is_storage_quota(quota_name: str, deployment: str) -> bool:
    """Return True for a Lustre storage capacity quota of DEPLOYMENT (SSD storage; any or no tier)."""
    text = words(quota_name)
    return (
        LUSTRE_WORDS.search(text) is not None
        and "storage capacity" in text
        and not any(other in text for other in OTHER_STORAGE_WORDS)
        and DEPLOYMENT_WORDS[deployment].search(text) is not None
    )


def is_file_systems_quota(quota_name: str) -> bool:
    """Return True for the quota on how many Lustre file systems the account has."""
    text = words(quota_name)
    return FILE_SYSTEMS_WORDS.search(text) is not None and not any(w in text for w in NOT_FILE_SYSTEMS_WORDS)


def counted_deployments(quota_name: str, deployment: str) -> tuple[str, ...]:
    """Return the deployment types whose storage the quota QUOTA_NAME (a DEPLOYMENT quota) counts.

    A Scratch quota that names no generation counts both scratch generations.
    """
    if deployment == "SCRATCH_2" and SCRATCH_2_WORDS.search(words(quota_name)) is None:
        return SCRATCH_DEPLOYMENTS
    return (deployment,)


def storage_quotas(quotas: Iterable[dict], lustre: Lustre) -> list[dict]:
    """Return the quotas among QUOTAS (all for the deployment type) that count LUSTRE's storage.

    Where quotas are per throughput tier, the one naming the plan's tier; else the ones naming no tier.
    """
    quotas = list(quotas)
    tier = lustre.effective_throughput_per_tib
    tiered = [q for q in quotas if tier is not None and tier in tiers(q["QuotaName"])]
    return tiered or [q for q in quotas if not tiers(q["QuotaName"])]


def lustre_file_systems(aws: AwsClients) -> list[dict]:
    """Return the account's Lustre file systems in the region that hold storage."""
    pages = aws.fsx.get_paginator("describe_file_systems").paginate()
    return [
        fs
        for page in pages
        for fs in page["FileSystems"]
        if fs["FileSystemType"] == "LUSTRE" and fs.get("Lifecycle") not in NOT_COUNTED_LIFECYCLES
    ]


def storage_in_use(file_systems: Iterable[dict], quota_name: str, deployment: str) -> tuple[int, int]:
    """Return (GiB, file systems) of FILE_SYSTEMS that the storage quota QUOTA_NAME counts."""
    deployments = counted_deployments(quota_name, deployment)
    quota_tiers = tiers(quota_name)
    counted = [
        fs
        for fs in file_systems
        if fs.get("StorageType", SSD) == SSD
        and fs.get("LustreConfiguration", {}).get("DeploymentType") in deployments
        and (not quota_tiers or fs["LustreConfiguration"].get("PerUnitStorageThroughput") in quota_tiers)
    ]
    return sum(fs["StorageCapacity"] for fs in counted), len(counted)


def _kind(lustre: Lustre) -> str:
    """Return the spec's file system kind as a message names it: deployment type and throughput tier."""
    tier = lustre.effective_throughput_per_tib
    throughput = f", {tier} MB/s/TiB" if tier is not None else ""
    return f"storage.lustre {lustre.deployment}{throughput}"


def _storage_finding(plan: Plan, quota: dict, file_systems: list[dict]) -> Finding:
    """Return whether the storage quota QUOTA leaves room for the plan's file system beside those in use."""
    lustre = plan.lustre
    name, code, value = quota["QuotaName"], quota["QuotaCode"], quota["Value"]
    used, count = storage_in_use(file_systems, name, lustre.deployment)
    message = (
        f"needs {lustre.storage_gib} GiB ({_kind(lustre)}), {used} GiB in use by {count} file system(s) "
        f"it counts, quota {number(value)} GiB ({code})"
    )
    total = used + lustre.storage_gib
    if total <= value:
        return Finding(check=NAME, status="ok", subject=name, message=message)
    remedy = service_quotas_remedy(total, code, FSX, plan.region, unit=" GiB")
    return Finding(check=NAME, status="fail", subject=name, message=message, remedy=remedy)


def _file_systems_finding(plan: Plan, quota: dict, file_systems: list[dict]) -> Finding:
    """Return whether the file-system count quota QUOTA leaves room for one more."""
    name, code, value = quota["QuotaName"], quota["QuotaCode"], quota["Value"]
    used = len(file_systems)
    message = f"needs 1 more Lustre file system, {used} in use, quota {number(value)} ({code})"
    if used + 1 <= value:
        return Finding(check=NAME, status="ok", subject=name, message=message)
    remedy = service_quotas_remedy(used + 1, code, FSX, plan.region)
    return Finding(check=NAME, status="fail", subject=name, message=message, remedy=remedy)


def _unmatched_tier(plan: Plan, fits: list[dict]) -> Finding:
    """Return the warning for storage quotas listed per tier, none of them the plan's."""
    lustre = plan.lustre
    listed = sorted({tier for quota in fits for tier in tiers(quota["QuotaName"])})
    offered = ", ".join(str(tier) for tier in listed)
    return Finding(
        check=NAME,
        status="warn",
        subject="storage.lustre.throughput_per_tib",
        message=f"Service Quotas lists {lustre.deployment} storage quotas in {plan.region} for {offered} MB/s/TiB "
        f"but none for {lustre.effective_throughput_per_tib}: that tier may not be offered here",
        remedy=f"set storage.lustre.throughput_per_tib to one of {offered}, or confirm FSx for Lustre offers "
        f"{lustre.effective_throughput_per_tib} MB/s/TiB in {plan.region}",
    )


def _unmatched_deployment(plan: Plan, listed: list[dict]) -> Finding:
    """Return the warning for Lustre quotas listed, none of them for the plan's deployment type."""
    deployment = plan.lustre.deployment
    return Finding(
        check=NAME,
        status="warn",
        subject="storage.lustre.deployment",
        message=f"Service Quotas lists {len(listed)} Lustre quota(s) in {plan.region} but no {deployment} storage "
        "capacity quota: the deployment type may not be offered here",
        remedy=f"check that FSx for Lustre offers {deployment} in {plan.region} (its user guide lists deployment "
        "types by region), or choose another deployment type or region",
    )


def _nothing_listed(plan: Plan) -> Finding:
    """Return the unchecked line for a region whose Service Quotas list nothing about Lustre."""
    return Finding(
        check=NAME,
        status="unchecked",
        subject="storage.lustre",
        message=f"Service Quotas lists no FSx for Lustre quota in {plan.region} (service code {FSX})",
        remedy=f"make sure the Lustre {plan.lustre.deployment} storage capacity quota in the Service Quotas console "
        f"(Amazon FSx, {plan.region}) leaves room for {plan.lustre.storage_gib} GiB, or pass --skip {NAME}",
    )


def _storage_findings(plan: Plan, quotas: QuotaList, file_systems: list[dict]) -> list[Finding]:
    """Return one finding per storage quota that counts the plan's file system, or why there is none."""
    fits = quotas.matching(lambda name: is_storage_quota(name, plan.lustre.deployment))
    if not fits:
        listed = quotas.matching(is_lustre)
        return [_unmatched_deployment(plan, listed) if listed else _nothing_listed(plan)]
    chosen = storage_quotas(fits, plan.lustre)
    if not chosen:
        return [_unmatched_tier(plan, fits)]
    return [_storage_finding(plan, quota, file_systems) for quota in chosen]


# A file system nodes can mount now (UPDATING: a change in progress, still serving).
MOUNTABLE = ("AVAILABLE", "UPDATING")
# Lustre clients reach the file servers on TCP 988 (kiln.constructs.lustre.LUSTRE_PORTS).
LUSTRE_PORT = 988


def _describe_file_system(aws: AwsClients, file_system_id: str) -> dict | None:
    """Return FSx's description of FILE_SYSTEM_ID, or None when it has none."""
    try:
        found = aws.fsx.describe_file_systems(FileSystemIds=[file_system_id])["FileSystems"]
    except ClientError as error:
        if error_code(error) == "FileSystemNotFound":
            return None
        raise
    return found[0] if found else None


def _client_group_findings(plan: Plan, aws: AwsClients, fs: dict) -> list[Finding]:
    """Return whether security_group_id exists in the file system's VPC and its groups admit it on TCP 988."""
    lustre = plan.lustre
    subject = f"storage.lustre.security_group_id {lustre.security_group_id}"
    groups = aws.ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": [lustre.security_group_id]}])
    if not groups["SecurityGroups"]:
        return [
            Finding(
                check=NAME,
                status="fail",
                subject=subject,
                message=f"does not exist in {plan.region}",
                remedy="name a group the file system admits Lustre clients from (`kiln leftovers` names a kept one)",
            )
        ]
    (group,) = groups["SecurityGroups"]
    if fs.get("VpcId") and group.get("VpcId") != fs["VpcId"]:
        return [
            Finding(
                check=NAME,
                status="fail",
                subject=subject,
                message=f"is in {group.get('VpcId')}, the file system in {fs['VpcId']}: nodes cannot join it there",
                remedy="name a group of the file system's VPC that it admits Lustre clients from",
            )
        ]
    interfaces = fs.get("NetworkInterfaceIds", [])
    server_groups: set[str] = set()
    if interfaces:
        enis = aws.ec2.describe_network_interfaces(Filters=[{"Name": "network-interface-id", "Values": interfaces}])
        server_groups = {g["GroupId"] for eni in enis["NetworkInterfaces"] for g in eni.get("Groups", [])}
    if server_groups:
        described = aws.ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": sorted(server_groups)}])
        if any(admits_lustre(g, lustre.security_group_id) for g in described["SecurityGroups"]):
            return [
                Finding(
                    check=NAME,
                    status="ok",
                    subject=subject,
                    message=f"the file system's groups admit it on TCP {LUSTRE_PORT}: nodes join it to mount",
                )
            ]
    return [
        Finding(
            check=NAME,
            status="warn",
            subject=subject,
            message=f"no rule of the file system's groups ({', '.join(sorted(server_groups)) or 'unknown'}) names it "
            f"on TCP {LUSTRE_PORT}: the nodes may not mount the file system",
            remedy="make sure the file system's groups admit Lustre clients (TCP 988 and 1018-1023) from it, by this "
            "group or by the nodes' addresses",
        )
    ]


def admits_lustre(group: dict, source: str) -> bool:
    """Return True when GROUP has an ingress rule from group SOURCE covering TCP 988."""
    for rule in group.get("IpPermissions", []):
        protocol = rule.get("IpProtocol")
        covers = protocol == "-1" or (
            protocol == "tcp" and rule.get("FromPort", 0) <= LUSTRE_PORT <= rule.get("ToPort", -1)
        )
        if covers and any(pair.get("GroupId") == source for pair in rule.get("UserIdGroupPairs", [])):
            return True
    return False


def _attached(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Check the file system the spec attaches: it exists, is Lustre, mountable, in the cluster's VPC, with the mount
    name the spec gives, and admits the spec's client group."""
    lustre = plan.lustre
    subject = f"storage.lustre.file_system_id {lustre.file_system_id}"
    fs = _describe_file_system(aws, lustre.file_system_id)
    if fs is None:
        return [
            Finding(
                check=NAME,
                status="fail",
                subject=subject,
                message=f"does not exist in {plan.region}",
                remedy="correct file_system_id (`kiln leftovers` lists the ones an earlier deploy kept), or remove the "
                "attach fields so that kiln creates a file system",
            )
        ]
    problems = []
    if fs.get("FileSystemType", "LUSTRE") != "LUSTRE":
        problems.append(f"is an FSx for {fs['FileSystemType']} file system, not Lustre")
    if fs.get("Lifecycle") is not None and fs["Lifecycle"] not in MOUNTABLE:
        problems.append(f"is {fs['Lifecycle']}: nodes mount an AVAILABLE file system")
    mount = fs.get("LustreConfiguration", {}).get("MountName")
    if mount is not None and mount != lustre.mount_name:
        problems.append(f"has mount name {mount}, not storage.lustre.mount_name {lustre.mount_name}")
    if plan.vpc_id is not None and fs.get("VpcId") not in (None, plan.vpc_id):
        problems.append(f"is in {fs['VpcId']}, the cluster in network.vpc_id {plan.vpc_id}")
    if problems:
        return [
            Finding(
                check=NAME,
                status="fail",
                subject=subject,
                message="; ".join(problems),
                remedy="attach a Lustre file system of the cluster's VPC with the mount name FSx reports",
            )
        ]
    found = Finding(
        check=NAME,
        status="ok",
        subject=subject,
        message=f"{fs.get('LustreConfiguration', {}).get('DeploymentType', 'Lustre')}, {fs.get('StorageCapacity')} "
        "GiB: a deploy attaches it, and kiln neither changes nor deletes it",
    )
    return [found, *_client_group_findings(plan, aws, fs)]


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Check the Lustre storage quota for the plan's deployment type, and the file-system count quota if listed; or,
    for an attached file system, the file system itself."""
    if plan.lustre is None:
        return [Finding(check=NAME, status="ok", subject="storage.lustre", message="no Lustre file system")]
    if plan.lustre.attached:
        return _attached(plan, aws)
    quotas = QuotaList(aws, FSX)
    file_systems = lustre_file_systems(aws)
    findings = _storage_findings(plan, quotas, file_systems)
    findings += [_file_systems_finding(plan, q, file_systems) for q in quotas.listed(is_file_systems_quota)]
    return findings


CHECK = Check(name=NAME, about="FSx for Lustre quotas", run=check)
