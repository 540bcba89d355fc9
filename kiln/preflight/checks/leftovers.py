"""What an earlier deploy of this cluster kept after `cdk destroy`, and what a deploy of the spec does with each.

kiln tags everything its stacks make with kiln:cluster (and a short-lived environment's with kiln:environment).
A tagged resource that none of the cluster's live stacks holds is a leftover: a kept bucket, file system (and its
final backups), security group, VPC, subnet, log group, KMS key or Prometheus workspace. Each is reported with what
a deploy of this spec does with it and the commands that attach or delete it (`kiln leftovers` prints the same).
Read-only: nothing is deleted. Leftovers never block a deploy (a fixed bucket name that collides is the bucket
check's FAIL), so an AWS refusal here is a WARN, not UNCHECKED.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from kiln.aws.errors import error_code
from kiln.catalog.platforms import service_fact
from kiln.contracts.environment import DELETE_ORDER, stack_name
from kiln.contracts.image import image_stack_name
from kiln.contracts.tags import TAG_CLUSTER, TAG_ENVIRONMENT
from kiln.preflight.aws import AWS_ERRORS, AwsClients, unchecked
from kiln.preflight.check import Check
from kiln.preflight.checks.bucket import stack_alive
from kiln.preflight.checks.kept_vpc import adopt_lines, kept_problems
from kiln.preflight.checks.lustre import admits_lustre
from kiln.preflight.findings import Finding
from kiln.preflight.plan import Plan

NAME = "leftovers"
# What the tagging API is asked for (a service alone stands for all its types; EC2's instances are never kept).
RESOURCE_TYPES = ("s3", "fsx", "ec2:security-group", "ec2:vpc", "ec2:subnet", "kms", "logs")
# States in which a resource is already on its way out.
GOING = {"DELETING", "DELETED", "PendingDeletion", "PendingReplicaDeletion"}
# The order the delete commands run in: what uses a thing before the thing.
DELETE_RANK = {
    "Prometheus workspace": 0,
    "log group": 1,
    "file system": 2,
    "file system backup": 3,
    "security group": 4,
    "subnet": 5,
    "VPC": 6,
    "KMS key": 7,
    "bucket": 8,
}
# Which file systems FSx backs up, so which a delete may leave a final backup of (platforms.json, fsx_lustre.backups
# and fsx_lustre.final_backup): persistent ones not linked to S3.
BACKUPS = service_fact("fsx_lustre", "backups")
FINAL_BACKUP = service_fact("fsx_lustre", "final_backup")


@dataclass(frozen=True, kw_only=True)
class Leftover:
    """One resource an earlier deploy kept, what a deploy of the spec does with it, and how to attach or delete it."""

    kind: str
    ident: str
    about: str
    redeploy: str
    attached: bool = False
    attach: str = ""
    delete: tuple[str, ...] = ()
    # Where its delete commands go among the others': DELETE_RANK, then after what must go first.
    rank: tuple[int, int] = (0, 0)

    @property
    def subject(self) -> str:
        return f"{self.kind} {self.ident}"

    def finding(self) -> Finding:
        """Return this leftover as one preflight line: OK when the spec attaches it, else WARN with what to do."""
        message = f"{self.about}; {self.redeploy}"
        if self.attached:
            return Finding(check=NAME, status="ok", subject=self.subject, message=message)
        commands = "; then ".join(self.delete)
        remedy = f"attach it ({self.attach}), or delete it: {commands}" if self.attach else f"delete it: {commands}"
        return Finding(check=NAME, status="warn", subject=self.subject, message=message, remedy=remedy)


@dataclass
class _Found:
    """The tagged resources of one kind, by id, with what describing them added."""

    arns: dict[str, str] = field(default_factory=dict)
    details: dict[str, dict] = field(default_factory=dict)


def _tag_filter(plan: Plan) -> tuple[str, str]:
    """Return the (key, value) of the tag that marks this plan's resources."""
    return (TAG_ENVIRONMENT, plan.environment) if plan.environment else (TAG_CLUSTER, plan.name)


def _ours(plan: Plan, tags: dict[str, str]) -> bool:
    key, value = _tag_filter(plan)
    # A cluster's own resources carry no environment tag: its short-lived environments' do, with its cluster tag.
    return tags.get(key) == value and (plan.environment is not None or TAG_ENVIRONMENT not in tags)


def _kind(arn: str) -> tuple[str, str] | None:
    """Return (kind, id) of a tagged resource's ARN, or None for a kind kiln does not keep."""
    service, resource = arn.split(":", 5)[2], arn.split(":", 5)[5]
    if service == "s3":
        return "bucket", resource
    if service == "logs":
        return "log group", resource.removeprefix("log-group:").removesuffix(":*")
    kind, _, ident = resource.partition("/")
    kinds = {
        ("fsx", "file-system"): "file system",
        # A link to S3 (association/<file system id>/<dra id>): it says its file system is linked.
        ("fsx", "association"): "data repository link",
        ("fsx", "backup"): "file system backup",
        ("ec2", "security-group"): "security group",
        ("ec2", "vpc"): "VPC",
        ("ec2", "subnet"): "subnet",
        ("kms", "key"): "KMS key",
        ("aps", "workspace"): "Prometheus workspace",
    }
    return (kinds[(service, kind)], ident) if (service, kind) in kinds else None


def _tagged(plan: Plan, aws: AwsClients) -> dict[str, _Found]:
    """Return every resource with this plan's tag, by kind (the tagging API, and AMP's own listing)."""
    key, value = _tag_filter(plan)
    found: dict[str, _Found] = {}

    def add(arn: str, tags: dict[str, str]) -> None:
        kind = _kind(arn)
        if kind is not None and _ours(plan, tags):
            found.setdefault(kind[0], _Found()).arns[kind[1]] = arn

    pages = aws.tagging.get_paginator("get_resources").paginate(
        TagFilters=[{"Key": key, "Values": [value]}], ResourceTypeFilters=list(RESOURCE_TYPES)
    )
    for page in pages:
        for item in page["ResourceTagMappingList"]:
            add(item["ResourceARN"], {tag["Key"]: tag["Value"] for tag in item.get("Tags", [])})
    for page in aws.amp.get_paginator("list_workspaces").paginate():
        for workspace in page["workspaces"]:
            if workspace.get("status", {}).get("statusCode") not in GOING:
                add(workspace["arn"], workspace.get("tags", {}))
    return found


def cluster_stacks(plan: Plan) -> tuple[str, ...]:
    """Return the names of every stack the plan's cluster (or environment) deploys."""
    return (*(stack_name(plan.name, part) for part in DELETE_ORDER), image_stack_name(plan.name))


def _held(plan: Plan, aws: AwsClients) -> set[str]:
    """Return the physical ids of every resource the cluster's live stacks hold."""
    held: set[str] = set()
    for stack in cluster_stacks(plan):
        if not stack_alive(aws, stack):
            continue
        for page in aws.cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack):
            held |= {r["PhysicalResourceId"] for r in page["StackResourceSummaries"] if r.get("PhysicalResourceId")}
    return held


def _each(idents: Iterable[str], describe: Callable[[str], dict | None], missing: str) -> dict[str, dict]:
    """Return DESCRIBE(ident) for each of IDENTS, leaving out what AWS answers MISSING (gone since it was tagged)."""
    described = {}
    for ident in idents:
        try:
            details = describe(ident)
        except ClientError as error:
            if error_code(error) == missing:
                continue
            raise
        if details is not None:
            described[ident] = details
    return described


def _describe(aws: AwsClients, found: dict[str, _Found]) -> None:
    """Add what each kind's own service says, and drop what is gone or going."""

    def file_system(ident: str) -> dict | None:
        (fs,) = aws.fsx.describe_file_systems(FileSystemIds=[ident])["FileSystems"] or [None]
        return fs if fs is not None and fs.get("Lifecycle") not in GOING else None

    def backup(ident: str) -> dict | None:
        (found_backup,) = aws.fsx.describe_backups(BackupIds=[ident])["Backups"] or [None]
        # Automatic backups go with their file system: only user-initiated and final ones outlive it.
        keep = found_backup is not None and found_backup.get("Type") != "AUTOMATIC"
        return found_backup if keep and found_backup.get("Lifecycle") not in GOING else None

    def key(ident: str) -> dict | None:
        metadata = aws.kms.describe_key(KeyId=ident)["KeyMetadata"]
        return metadata if metadata.get("KeyState") not in GOING else None

    def bucket(ident: str) -> dict:
        return aws.s3.get_bucket_logging(Bucket=ident).get("LoggingEnabled", {})

    for kind, describe, missing in (
        ("file system", file_system, "FileSystemNotFound"),
        ("file system backup", backup, "BackupNotFound"),
        ("KMS key", key, "NotFoundException"),
        ("bucket", bucket, "NoSuchBucket"),
    ):
        if kind in found:
            found[kind].details = _each(found[kind].arns, describe, missing)
    if (groups := found.get("security group")) and groups.arns:
        for page in aws.ec2.get_paginator("describe_security_groups").paginate(
            Filters=[{"Name": "group-id", "Values": list(groups.arns)}]
        ):
            groups.details |= {g["GroupId"]: g for g in page["SecurityGroups"]}
    for kind, call, key, ident_key in (
        ("VPC", "describe_vpcs", "Vpcs", "VpcId"),
        ("subnet", "describe_subnets", "Subnets", "SubnetId"),
    ):
        if (items := found.get(kind)) and items.arns:
            ident_filter = "vpc-id" if kind == "VPC" else "subnet-id"
            pages = aws.ec2.get_paginator(call).paginate(Filters=[{"Name": ident_filter, "Values": list(items.arns)}])
            items.details = {item[ident_key]: item for page in pages for item in page[key]}
    for kind in ("log group", "Prometheus workspace"):
        if kind in found:
            found[kind].details = {ident: {} for ident in found[kind].arns}


def _server_groups(aws: AwsClients, file_system: dict, groups: dict[str, dict]) -> dict[str, dict]:
    """Return the groups the file system's interfaces carry, described; unknown interfaces: the kept groups that
    admit themselves on TCP 988 (kiln's file servers' group does)."""
    interfaces = file_system.get("NetworkInterfaceIds", [])
    if interfaces:
        found = aws.ec2.describe_network_interfaces(Filters=[{"Name": "network-interface-id", "Values": interfaces}])
        carried = sorted({g["GroupId"] for eni in found["NetworkInterfaces"] for g in eni.get("Groups", [])})
        if carried:
            described = aws.ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": carried}])
            return {g["GroupId"]: g for g in described["SecurityGroups"]}
    return {ident: group for ident, group in groups.items() if admits_lustre(group, ident)}


def _clients_group(servers: dict[str, dict], groups: dict[str, dict]) -> str | None:
    """Return the one kept group the servers' groups admit Lustre clients from, if exactly one."""
    clients = {
        ident
        for ident in groups
        if ident not in servers and any(admits_lustre(server, ident) for server in servers.values())
    }
    return clients.pop() if len(clients) == 1 else None


class _Describer:
    """Turns what was found into Leftovers, in the plan's terms."""

    def __init__(self, plan: Plan, aws: AwsClients, found: dict[str, _Found]) -> None:
        self.plan, self.aws, self.found = plan, aws, found
        self.region = f"--region {plan.region}"
        self.groups = found.get("security group", _Found()).details
        # The links to S3 found under kiln's tags, by file system: every file system kiln makes has one.
        self.links: dict[str, list[str]] = {}
        for ident in found.get("data repository link", _Found()).arns:
            file_system, _, link = ident.partition("/")
            self.links.setdefault(file_system, []).append(link)
        self.roles: dict[str, str] = {}

    def details(self, kind: str) -> dict[str, dict]:
        return self.found.get(kind, _Found()).details

    def all(self) -> list[Leftover]:
        leftovers = [
            *self.file_systems(),
            *self.backups(),
            *self.security_groups(),
            *self.network(),
            *self.buckets(),
            *self.logs_keys_workspaces(),
        ]
        return sorted(leftovers, key=lambda item: (item.rank, item.ident))

    def _rank(self, kind: str, within: int = 0) -> tuple[int, int]:
        return (DELETE_RANK[kind], within)

    def file_systems(self) -> Iterable[Leftover]:
        lustre = self.plan.lustre
        for ident, fs in self.details("file system").items():
            config = fs.get("LustreConfiguration", {})
            vpc, subnets = fs.get("VpcId"), fs.get("SubnetIds", [])
            servers = _server_groups(self.aws, fs, self.groups)
            clients = _clients_group(servers, self.groups)
            self.roles |= {s: f"the file servers' group of {ident}" for s in servers}
            if clients:
                self.roles[clients] = f"the Lustre clients' group of {ident}"
            where = f" in {vpc}" if vpc else ""
            about = (
                f"{config.get('DeploymentType', 'Lustre')}, {fs.get('StorageCapacity')} GiB, "
                f"{fs.get('Lifecycle', 'state unknown')}{where}, billed while it exists"
            )
            attached = lustre is not None and lustre.file_system_id == ident
            if attached:
                redeploy = "this spec attaches it (storage.lustre.file_system_id)"
            elif lustre is not None and not lustre.attached:
                redeploy = "a deploy of this spec creates another file system beside it and leaves this one"
            else:
                redeploy = "a deploy of this spec leaves it"
            mount = config.get("MountName", "<its mount name>")
            attach = (
                f"storage.lustre: {{file_system_id: {ident}, mount_name: {mount}, security_group_id: "
                f"{clients or '<a group it admits Lustre clients from>'}}} and network: {{vpc_id: "
                f"{vpc or '<its VPC>'}, private_subnet_id: {subnets[0] if subnets else '<its subnet>'}}}"
            )
            delete = (self._delete_file_system(ident, config),)
            yield Leftover(
                kind="file system",
                ident=ident,
                about=about,
                redeploy=redeploy,
                attached=attached,
                attach=attach,
                delete=delete,
                rank=self._rank("file system"),
            )

    def _delete_file_system(self, ident: str, config: dict) -> str:
        """Return the command that deletes file system IDENT (its LustreConfiguration CONFIG): with a final backup
        where FSx takes one (a persistent file system not linked to S3), else the plain delete and what is lost."""
        command = f"aws fsx delete-file-system --file-system-id {ident}"
        # Linked through a data repository association kiln tagged, or through an import path (older file systems).
        legacy = config.get("DataRepositoryConfiguration", {}).get("ImportPath")
        links = sorted(self.links.get(ident, [])) + ([legacy] if legacy else [])
        if config.get("DeploymentType") not in BACKUPS.value["deployments"]:
            return f"{command} {self.region}  # a scratch file system: FSx keeps no backup of it"
        if links and not BACKUPS.value["linked_to_s3"]:
            return (
                f"{command} {self.region}  # linked to S3 ({', '.join(links)}): FSx keeps no backup of it, so first "
                "let its last changes reach S3 (AgeOfOldestQueuedMessage at 0, or an export data repository task)"
            )
        option = FINAL_BACKUP.value["option"]
        return (
            f"{command} --lustre-configuration {option}=false {self.region}  # keeps a final backup; {option}=true "
            "keeps none"
        )

    def backups(self) -> Iterable[Leftover]:
        for ident, backup in self.details("file system backup").items():
            yield Leftover(
                kind="file system backup",
                ident=ident,
                about=f"a backup of {backup.get('FileSystemId', 'a file system')}, billed while it exists",
                redeploy="a deploy never uses it (aws fsx create-file-system-from-backup restores it)",
                delete=(f"aws fsx delete-backup --backup-id {ident} {self.region}",),
                rank=self._rank("file system backup"),
            )

    def security_groups(self) -> Iterable[Leftover]:
        # A group another kept group's rules name goes after that group.
        referenced = {
            ident: sum(_references(other, ident) for other_id, other in self.groups.items() if other_id != ident)
            for ident in self.groups
        }
        # Groups that name each other (the Lustre file servers' and clients' groups, as FSx asks) cannot go in any
        # order: before each group goes, the rules of the groups deleted after it that name it are revoked.
        order = sorted(self.groups, key=lambda ident: (referenced[ident], ident))
        lustre = self.plan.lustre
        for position, ident in enumerate(order):
            group = self.groups[ident]
            revokes = tuple(
                command
                for later in order[position + 1 :]
                for command in _revoke_commands(self.groups[later], later, ident, self.region)
            )
            attached = lustre is not None and lustre.security_group_id == ident
            role = self.roles.get(ident) or f"kept with a file system ({group.get('Description', 'no description')})"
            yield Leftover(
                kind="security group",
                ident=ident,
                about=f"{role}, in {group.get('VpcId', 'its VPC')}",
                redeploy="this spec's nodes join it (storage.lustre.security_group_id)"
                if attached
                else "a deploy of this spec makes its own groups and leaves this one",
                attached=attached,
                delete=(
                    *revokes,
                    f"aws ec2 delete-security-group --group-id {ident} {self.region}  # once no file system uses it",
                ),
                rank=self._rank("security group", position),
            )

    def _adoptable(self) -> dict[str, tuple[str, str]]:
        """Return, by VPC and by subnet id, the spec lines that adopt each kept VPC this cluster's network stack
        provably kept with its compute subnet (kept_vpc), and the subnet's and VPC's ids."""
        vpcs, subnets = self.details("VPC"), self.details("subnet")
        lines: dict[str, tuple[str, str]] = {}
        for vpc_id, vpc in vpcs.items():
            for subnet_id, subnet in subnets.items():
                if subnet.get("VpcId") == vpc_id and not kept_problems(self.plan, self.aws, vpc, subnet):
                    text = adopt_lines(vpc_id, subnet_id, vpc.get("CidrBlock", self.plan.vpc_cidr), self.plan)
                    lines[vpc_id] = lines[subnet_id] = (text, vpc_id)
        return lines

    def network(self) -> Iterable[Leftover]:
        adoptable = self._adoptable()
        for kind, spec_id, flag, command in (
            ("subnet", self.plan.subnet_id, "private_subnet_id", "delete-subnet --subnet-id"),
            ("VPC", self.plan.vpc_id, "vpc_id", "delete-vpc --vpc-id"),
        ):
            for ident in self.details(kind):
                attached = spec_id == ident
                attach, vpc_of = adoptable.get(ident, ("", ""))
                if attached:
                    redeploy = f"this spec deploys into it (network.{flag}" + (", kept)" if self.plan.kept else ")")
                elif attach:
                    redeploy = (
                        f"kept by this cluster's network stack: a deploy of this spec makes a new {kind} and leaves "
                        f"this one, unless the spec adopts {vpc_of} again (network.kept: no new VPC)"
                    )
                else:
                    redeploy = (
                        f"a deploy of this spec makes a new {kind} and leaves this one (its CloudFormation tags do not "
                        "prove it this cluster's network stack's, so kiln does not adopt it)"
                    )
                yield Leftover(
                    kind=kind,
                    ident=ident,
                    about="kept because a kept file system's interfaces were in it",
                    redeploy=redeploy,
                    attached=attached,
                    attach=attach,
                    delete=(f"aws ec2 {command} {ident} {self.region}  # once no file system is in it",),
                    rank=self._rank(kind),
                )

    def buckets(self) -> Iterable[Leftover]:
        details = self.details("bucket")
        log_of = {logging["TargetBucket"]: name for name, logging in details.items() if logging.get("TargetBucket")}
        for name in details:
            attached = self.plan.bucket_existing and self.plan.bucket_name == name
            attach = ""
            if name in log_of:
                about = f"the access logs of bucket {log_of[name]}"
                redeploy = "a deploy of this spec leaves it (keep it while that bucket logs to it)"
            elif attached:
                about, redeploy = "kept data", "this spec attaches it (storage.bucket.existing)"
            elif self.plan.bucket_name == name and self.plan.environment is None:
                about = "kept data"
                redeploy = "a deploy of this spec fails: CloudFormation cannot create a bucket of this name"
                attach = "storage.bucket.existing: true"
            else:
                about = "kept data"
                redeploy = "a deploy of this spec makes a new bucket beside it (generated names never collide)"
                attach = f"storage.bucket: {{name: {name}, existing: true}}"
            yield Leftover(
                kind="bucket",
                ident=name,
                about=about,
                redeploy=redeploy,
                attached=attached,
                attach=attach,
                delete=(
                    f"aws s3api delete-bucket --bucket {name} {self.region}  # once empty of every object version "
                    "(the S3 console's Empty does that)",
                ),
                # The data bucket before the bucket it logs to.
                rank=self._rank("bucket", 1 if name in log_of else 0),
            )

    def logs_keys_workspaces(self) -> Iterable[Leftover]:
        for name in self.details("log group"):
            yield Leftover(
                kind="log group",
                ident=name,
                about="kept logs",
                redeploy="a deploy of this spec writes to a new group and leaves this one",
                delete=(f"aws logs delete-log-group --log-group-name {name} {self.region}",),
                rank=self._rank("log group"),
            )
        for ident, key in self.details("KMS key").items():
            yield Leftover(
                kind="KMS key",
                ident=ident,
                about=f"{key.get('Description') or 'a key'} ({key.get('KeyState')})",
                redeploy="a deploy of this spec makes a new key and leaves this one",
                delete=(
                    f"aws kms schedule-key-deletion --key-id {ident} --pending-window-in-days 7 {self.region}  "
                    "# once what it encrypts is deleted: it becomes unreadable",
                ),
                rank=self._rank("KMS key"),
            )
        for ident in self.details("Prometheus workspace"):
            yield Leftover(
                kind="Prometheus workspace",
                ident=ident,
                about="kept metrics",
                redeploy="a deploy of this spec makes a new workspace and leaves this one",
                delete=(f"aws amp delete-workspace --workspace-id {ident} {self.region}",),
                rank=self._rank("Prometheus workspace"),
            )


def _naming(rules: list[dict], ident: str) -> list[dict]:
    """Return RULES (IpPermissions) cut to their pairs naming group IDENT, as revoke-security-group-* takes them."""
    named = []
    for rule in rules:
        if any(pair.get("GroupId") == ident for pair in rule.get("UserIdGroupPairs", [])):
            ports = {key: rule[key] for key in ("FromPort", "ToPort") if key in rule}
            named.append({"IpProtocol": rule["IpProtocol"], **ports, "UserIdGroupPairs": [{"GroupId": ident}]})
    return named


def _revoke_commands(group: dict, group_id: str, ident: str, region: str) -> list[str]:
    """Return the commands that revoke GROUP's (GROUP_ID's) inbound and outbound rules naming group IDENT."""
    commands = []
    for direction, key in (("ingress", "IpPermissions"), ("egress", "IpPermissionsEgress")):
        if named := _naming(group.get(key, []), ident):
            permissions = json.dumps(named, separators=(",", ":"))
            commands.append(
                f"aws ec2 revoke-security-group-{direction} --group-id {group_id} --ip-permissions '{permissions}' "
                f"{region}"
            )
    return commands


def _references(group: dict, ident: str) -> int:
    """Return 1 when GROUP has a rule naming group IDENT, else 0."""
    rules = group.get("IpPermissions", []) + group.get("IpPermissionsEgress", [])
    return int(any(pair.get("GroupId") == ident for rule in rules for pair in rule.get("UserIdGroupPairs", [])))


def find_leftovers(plan: Plan, aws: AwsClients) -> list[Leftover]:
    """Return every resource an earlier deploy of the plan's cluster kept that its live stacks do not hold, in the
    order their delete commands run."""
    found = _tagged(plan, aws)
    held = _held(plan, aws)
    for items in found.values():
        items.arns = {ident: arn for ident, arn in items.arns.items() if ident not in held and arn not in held}
    _describe(aws, found)
    return _Describer(plan, aws, found).all()


def check(plan: Plan, aws: AwsClients) -> list[Finding]:
    """Report each leftover: OK when the spec attaches it, else WARN with the attach or delete commands."""
    key, value = _tag_filter(plan)
    try:
        leftovers = find_leftovers(plan, aws)
    except AWS_ERRORS as error:
        operation = error.operation_name if isinstance(error, ClientError) else ""
        action = aws.iam_action(operation) if operation else CHECK.about
        refused = unchecked(NAME, CHECK.about, error, action=action, skip_hint=f"pass --skip {NAME}")
        # Advisory: a deploy never depends on what is found here.
        return [
            dataclasses.replace(refused, status="warn", remedy=f"{refused.remedy} (leftovers never block a deploy)")
        ]
    if not leftovers:
        return [
            Finding(
                check=NAME,
                status="ok",
                subject="kept resources",
                message=f"none tagged {key}={value} outside the cluster's stacks",
            )
        ]
    return [leftover.finding() for leftover in leftovers]


CHECK = Check(name=NAME, about="resources kept by an earlier deploy", run=check)
