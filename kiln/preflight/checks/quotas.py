"""Do the account's quotas leave room for every node? EC2 vCPU quotas per instance class, HyperPod per-type quotas."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from botocore.exceptions import ClientError

from kiln.aws.errors import error_code
from kiln.catalog import UnknownInstanceType, instance_type
from kiln.catalog.names import hyperpod_type_name
from kiln.preflight.aws import AwsClients
from kiln.preflight.check import Check
from kiln.preflight.findings import Finding
from kiln.preflight.plan import NodeNeed, Plan

NAME = "quotas"
EC2 = "ec2"
SAGEMAKER = "sagemaker"
PAGE_SIZE = 100  # ListServiceQuotas' largest page (sagemaker alone lists thousands of quotas)
DESCRIBE_TYPES_MAX = 100  # DescribeInstanceTypes' largest InstanceTypes list
LIVE_STATES = ("pending", "running")  # instances whose vCPUs count against the running-instance quotas
ON_DEMAND = "On-Demand"
SPOT = "Spot"
# How each capacity type is bought, as the vCPU quotas see it; capacity blocks count against none of them.
MARKETS = {"on-demand": ON_DEMAND, "reservation": ON_DEMAND, "spot": SPOT, "capacity-block": None}
# InstanceLifecycle of a running instance that counts against no vCPU quota, or against the Spot one.
LIFECYCLE_OUTSIDE_QUOTAS = "capacity-block"
LIFECYCLE_SPOT = "spot"
CLUSTER_USAGE = re.compile(r"(ml\.[a-z0-9-]+\.[a-z0-9]+) for cluster usage")


@dataclass(frozen=True, kw_only=True)
class QuotaClass:
    """An EC2 instance class the vCPU quotas count by: the family prefixes in it and its two quota codes."""

    name: str
    prefixes: tuple[str, ...]
    on_demand: str
    spot: str | None  # None: Service Quotas has no Spot quota for the class

    def code(self, market: str) -> str | None:
        """Return the quota code for MARKET (On-Demand or Spot), None where there is none."""
        return self.on_demand if market == ON_DEMAND else self.spot


# Service Quotas, service code ec2: "Running On-Demand <class> instances" and "All <class> Spot Instance Requests".
STANDARD = QuotaClass(
    name="Standard (A, C, D, H, I, M, R, T, Z)", prefixes=(), on_demand="L-1216C47A", spot="L-34B43A08"
)
QUOTA_CLASSES: tuple[QuotaClass, ...] = (
    STANDARD,
    QuotaClass(name="G and VT", prefixes=("g", "gr", "vt"), on_demand="L-DB2E81BA", spot="L-3819A6DF"),
    QuotaClass(name="P", prefixes=("p",), on_demand="L-417A185B", spot="L-7212CCBC"),
    QuotaClass(name="Trn", prefixes=("trn",), on_demand="L-2C3B7624", spot="L-6B0D517C"),
    QuotaClass(name="Inf", prefixes=("inf",), on_demand="L-1945791B", spot="L-B5D1601B"),
    QuotaClass(name="DL", prefixes=("dl",), on_demand="L-6E869C2A", spot="L-85EED4F7"),
    QuotaClass(name="X", prefixes=("x",), on_demand="L-7295265B", spot="L-E3A00192"),
    QuotaClass(name="F", prefixes=("f",), on_demand="L-74FC7D96", spot="L-88CF9481"),
    # u-6tb1 and u7i-12tb alike; no other family starts with u.
    QuotaClass(name="High Memory", prefixes=("u-", "u7"), on_demand="L-43DA4232", spot=None),
    QuotaClass(name="HPC", prefixes=("hpc",), on_demand="L-F7808C92", spot=None),
)
# Standard takes every family no prefix claims (so i4i, d3, h1 and t3 are Standard while inf2, dl1, hpc7a and trn2
# are not); prefixes are tried longest first, so a longer claim always wins over a shorter one.
_BY_PREFIX = sorted(((p, c) for c in QUOTA_CLASSES for p in c.prefixes), key=lambda pc: len(pc[0]), reverse=True)


def quota_class(name: str) -> QuotaClass:
    """Return the vCPU quota class of the EC2 instance type (or family) NAME."""
    family = name.split(".", 1)[0].lower()
    return next((cls for prefix, cls in _BY_PREFIX if family.startswith(prefix)), STANDARD)


def number(value: float) -> str:
    """Return VALUE as Service Quotas shows it: whole numbers without a decimal point."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def service_quotas_remedy(total: float, code: str, service: str, region: str, unit: str = "") -> str:
    """Return what to ask Service Quotas for: TOTAL (rounded up) for quota CODE of SERVICE in REGION."""
    return f"request at least {number(math.ceil(total))}{unit} for {code} in Service Quotas ({service}, {region})"


class QuotaList:
    """The quotas Service Quotas lists for one service, each listing read at most once.

    ListServiceQuotas leaves out quotas whose applied value it does not have, so a search that finds nothing
    among the applied values looks among AWS's defaults.
    """

    def __init__(self, aws: AwsClients, service_code: str) -> None:
        self._client = aws.service_quotas
        self._service_code = service_code
        self._applied: list[dict] | None = None
        self._defaults: list[dict] | None = None

    def _list(self, operation: str) -> list[dict]:
        """Return every quota of the service that OPERATION lists, page by page."""
        pages = self._client.get_paginator(operation).paginate(
            ServiceCode=self._service_code, PaginationConfig={"PageSize": PAGE_SIZE}
        )
        return [quota for page in pages for quota in page["Quotas"]]

    def _search(self, quotas: list[dict], wanted: Callable[[str], bool]) -> list[dict]:
        return [quota for quota in quotas if wanted(quota["QuotaName"])]

    def matching(self, wanted: Callable[[str], bool]) -> list[dict]:
        """Return the quotas whose name WANTED accepts: applied values, or AWS's defaults when none is applied."""
        if self._applied is None:
            self._applied = self._list("list_service_quotas")
        found = self._search(self._applied, wanted)
        if found:
            return found
        if self._defaults is None:
            self._defaults = self._list("list_aws_default_service_quotas")
        return self._search(self._defaults, wanted)

    def listed(self, wanted: Callable[[str], bool]) -> list[dict]:
        """Return the quotas WANTED accepts among those read already (an optional quota is not worth a listing)."""
        found = self._search(self._applied or [], wanted)
        return found or self._search(self._defaults or [], wanted)


# ---- EC2: vCPUs per instance class, On-Demand and Spot ----


@dataclass(frozen=True, kw_only=True)
class Demand:
    """The nodes of one quota class bought one way, and the quota that counts them."""

    quota_class: QuotaClass
    market: str
    nodes: tuple[NodeNeed, ...]

    @property
    def subject(self) -> str:
        """Return the finding's subject: which vCPUs of which class."""
        return f"EC2 {self.market} {self.quota_class.name} vCPUs"

    def vcpus(self, vcpus_of: dict[str, int]) -> int:
        """Return the vCPUs the nodes take at their largest."""
        return sum(vcpus_of[node.instance_type] * node.count for node in self.nodes)

    def parts(self) -> str:
        """Return the nodes as a message lists them: 'group gpu: 2 × p5.48xlarge'."""
        return ", ".join(f"{node.role}: {node.count} × {node.instance_type}" for node in self.nodes)


def _demands(nodes: Iterable[NodeNeed]) -> list[Demand]:
    """Group the EC2 nodes bought against a vCPU quota by (class, market), in the plan's order."""
    grouped: dict[tuple[QuotaClass, str], list[NodeNeed]] = {}
    for node in nodes:
        market = MARKETS[node.capacity]
        if market is not None:
            grouped.setdefault((quota_class(node.instance_type), market), []).append(node)
    return [Demand(quota_class=cls, market=market, nodes=tuple(found)) for (cls, market), found in grouped.items()]


def _running(aws: AwsClients) -> list[tuple[str, str]]:
    """Return (instance type, market) of every pending or running instance the vCPU quotas count."""
    pages = aws.ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": list(LIVE_STATES)}]
    )
    running = []
    for page in pages:
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                lifecycle = instance.get("InstanceLifecycle")
                if lifecycle != LIFECYCLE_OUTSIDE_QUOTAS:
                    running.append((instance["InstanceType"], SPOT if lifecycle == LIFECYCLE_SPOT else ON_DEMAND))
    return running


def _vcpus_of(aws: AwsClients, names: Iterable[str]) -> dict[str, int]:
    """Return the default vCPUs of each instance type in NAMES: the catalog's, else EC2's."""
    vcpus, unknown = {}, []
    for name in dict.fromkeys(names):
        try:
            vcpus[name] = instance_type(name).vcpus
        except UnknownInstanceType:
            unknown.append(name)
    for start in range(0, len(unknown), DESCRIBE_TYPES_MAX):
        answer = aws.ec2.describe_instance_types(InstanceTypes=unknown[start : start + DESCRIBE_TYPES_MAX])
        vcpus |= {t["InstanceType"]: t["VCpuInfo"]["DefaultVCpus"] for t in answer["InstanceTypes"]}
    return vcpus


def ec2_quota_value(aws: AwsClients, code: str) -> float:
    """Return the applied value of the ec2 quota CODE, or AWS's default where none is applied."""
    try:
        return aws.service_quotas.get_service_quota(ServiceCode=EC2, QuotaCode=code)["Quota"]["Value"]
    except ClientError as error:
        if error_code(error) != "NoSuchResourceException":
            raise
    return aws.service_quotas.get_aws_default_service_quota(ServiceCode=EC2, QuotaCode=code)["Quota"]["Value"]


def _no_spot_quota(demand: Demand) -> Finding:
    """Return the warning for Spot nodes of a class Service Quotas has no Spot quota for."""
    roles = ", ".join(node.role for node in demand.nodes)
    return Finding(
        check=NAME,
        status="warn",
        subject=demand.subject,
        message=f"{demand.parts()}: Service Quotas has no Spot quota for {demand.quota_class.name} instances, "
        "so EC2 may not sell them as Spot",
        remedy=f"buy {roles} On-Demand (capacity.type on-demand), or confirm EC2 offers them as Spot",
    )


def _demand_finding(plan: Plan, aws: AwsClients, demand: Demand, vcpus_of: dict[str, int], in_use: int) -> Finding:
    """Return whether DEMAND's quota leaves room for its vCPUs beside the IN_USE ones."""
    code = demand.quota_class.code(demand.market)
    if code is None:
        return _no_spot_quota(demand)
    need = demand.vcpus(vcpus_of)
    quota = ec2_quota_value(aws, code)
    message = f"needs {need} vCPUs ({demand.parts()}), {in_use} in use, quota {number(quota)} ({code})"
    if in_use + need <= quota:
        return Finding(check=NAME, status="ok", subject=demand.subject, message=message)
    remedy = service_quotas_remedy(in_use + need, code, EC2, plan.region)
    return Finding(check=NAME, status="fail", subject=demand.subject, message=message, remedy=remedy)


def _capacity_blocks(nodes: Iterable[NodeNeed]) -> Finding | None:
    """Return the line saying capacity blocks are left to the reservations check, None without blocks."""
    blocks = [node for node in nodes if node.capacity == "capacity-block"]
    if not blocks:
        return None
    parts = ", ".join(f"{node.role}: {node.count} × {node.instance_type}" for node in blocks)
    return Finding(
        check=NAME,
        status="ok",
        subject="EC2 capacity blocks",
        message=f"{parts}: capacity blocks count against no vCPU quota; the reservations check proves the blocks",
    )


def ec2_findings(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Return one finding per (class, market) the EC2 nodes need, and one for capacity blocks."""
    nodes = [node for node in plan.nodes if not node.hyperpod]
    demands = _demands(nodes)
    findings = []
    if demands:
        running = _running(aws)
        vcpus_of = _vcpus_of(aws, [node.instance_type for node in nodes] + [name for name, _ in running])
        in_use = Counter()
        for name, market in running:
            in_use[(quota_class(name), market)] += vcpus_of[name]
        for demand in demands:
            used = in_use[(demand.quota_class, demand.market)]
            findings.append(_demand_finding(plan, aws, demand, vcpus_of, used))
    blocks = _capacity_blocks(nodes)
    return findings + ([blocks] if blocks else [])


# ---- SageMaker HyperPod: instances per ml. type, and in total ----


def cluster_usage_type(quota_name: str) -> str | None:
    """Return the ml. type of a quota named like 'ml.p5.48xlarge for cluster usage', else None."""
    match = CLUSTER_USAGE.fullmatch(quota_name.strip().lower())
    return match.group(1) if match else None


def is_total_instances(quota_name: str) -> bool:
    """Return True for the quota on instances across all HyperPod clusters of the account."""
    name = quota_name.lower()
    return "total number of instances" in name and ("hyperpod" in name or "cluster" in name)


def _hyperpod_needs(nodes: Iterable[NodeNeed]) -> dict[str, list[NodeNeed]]:
    """Group NODES by their ml. type, in the plan's order."""
    needs: dict[str, list[NodeNeed]] = {}
    for node in nodes:
        needs.setdefault(hyperpod_type_name(node.instance_type), []).append(node)
    return needs


def _count_finding(plan: Plan, subject: str, nodes: list[NodeNeed], quota: dict) -> Finding:
    """Return whether QUOTA (a count of instances) leaves room for NODES; usage is not read (see the message)."""
    need = sum(node.count for node in nodes)
    parts = ", ".join(f"{node.role}: {node.count} × {hyperpod_type_name(node.instance_type)}" for node in nodes)
    code, value = quota["QuotaCode"], quota["Value"]
    message = (
        f"needs {need} instances ({parts}), quota {number(value)} ({code}); "
        "the quota counts the instances of every HyperPod cluster in the account, and existing clusters share it"
    )
    if need <= value:
        return Finding(check=NAME, status="ok", subject=subject, message=message)
    remedy = service_quotas_remedy(need, code, SAGEMAKER, plan.region)
    return Finding(check=NAME, status="fail", subject=subject, message=message, remedy=remedy)


def _type_finding(plan: Plan, quotas: QuotaList, ml_name: str, nodes: list[NodeNeed]) -> Finding:
    """Return the finding for one ml. type: its cluster-usage quota, or what its absence means."""
    subject = f"HyperPod {ml_name}"
    found = quotas.matching(lambda name: cluster_usage_type(name) == ml_name)
    if found:
        return _count_finding(plan, subject, nodes, found[0])
    need = sum(node.count for node in nodes)
    if quotas.matching(lambda name: cluster_usage_type(name) is not None):
        return Finding(
            check=NAME,
            status="fail",
            subject=subject,
            message=f"HyperPod offers no {ml_name} in {plan.region} (no cluster-usage quota)",
            remedy=f"choose a type with an 'ml.* for cluster usage' quota in SageMaker's Service Quotas in "
            f"{plan.region}, or another region",
        )
    return Finding(
        check=NAME,
        status="unchecked",
        subject=subject,
        message=f"Service Quotas lists no SageMaker cluster-usage quota in {plan.region}, so {ml_name}'s is unknown",
        remedy=f"look up '{ml_name} for cluster usage' in the Service Quotas console (Amazon SageMaker, {plan.region}) "
        f"and make sure it is at least {need}, or pass --skip {NAME}",
    )


def hyperpod_findings(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Return one finding per ml. type the HyperPod nodes need, and one per total-instances quota listed."""
    nodes = [node for node in plan.nodes if node.hyperpod]
    if not nodes:
        return []
    quotas = QuotaList(aws, SAGEMAKER)
    findings = [_type_finding(plan, quotas, ml, needs) for ml, needs in _hyperpod_needs(nodes).items()]
    for quota in quotas.listed(is_total_instances):
        findings.append(_count_finding(plan, f"HyperPod: {quota['QuotaName']}", nodes, quota))
    return findings


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Check the EC2 vCPU quotas of the EC2 nodes and the HyperPod quotas of the HyperPod ones."""
    findings = ec2_findings(plan, aws) + hyperpod_findings(plan, aws)
    if not findings:
        findings.append(Finding(check=NAME, status="ok", subject="instances", message="the cluster launches no node"))
    return findings


CHECK = Check(name=NAME, about="instance quotas", run=check)
