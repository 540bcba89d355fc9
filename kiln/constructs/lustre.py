"""LustreFileSystem: FSx for Lustre in the compute subnet, linked to the data bucket."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol, get_args, runtime_checkable

from aws_cdk import Aws, CfnMapping, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_fsx as fsx
from aws_cdk import aws_s3 as s3
from constructs import Construct

from kiln.catalog.limits import (
    LUSTRE_BACKUP_RETENTION_MAX_DAYS,
    LUSTRE_MIN_STORAGE_GIB,
    LUSTRE_STORAGE_STEP_GIB,
    PERSISTENT_2_DEFAULT_THROUGHPUT,
    PERSISTENT_2_THROUGHPUTS,
    is_lustre_storage,
)
from kiln.catalog.names import regions_by_partition
from kiln.catalog.platforms import service_fact
from kiln.constructs._checks import PropError, refuse, require, require_in, unresolved
from kiln.constructs.children import l1_of
from kiln.constructs.retention import retain_all

LustreDeployment = Literal["PERSISTENT_2", "SCRATCH_2"]
DEPLOYMENTS: tuple[str, ...] = get_args(LustreDeployment)
LustreCompression = Literal["LZ4", "NONE"]
COMPRESSIONS: tuple[str, ...] = get_args(LustreCompression)
FILE_SYSTEM_ID = re.compile(r"fs-[0-9a-f]{8,17}")
# What FSx for Lustre's access-control page asks of the file servers' and the clients' groups (platforms.json,
# fsx_lustre.security_group_rules): TCP 988 and 1018-1023, among the file servers, between them and their clients, and
# among the clients.
LUSTRE_RULES = service_fact("fsx_lustre", "security_group_rules").value
LUSTRE_PORTS = tuple(
    ec2.Port.tcp(low) if low == high else ec2.Port.tcp_range(low, high) for low, high in LUSTRE_RULES["ports"]
)
# Which file systems FSx backs up (platforms.json, fsx_lustre.backups): persistent ones not linked to S3.
BACKUPS = service_fact("fsx_lustre", "backups")
DEFAULT_BACKUP_RETENTION_DAYS = 7


@runtime_checkable
class ILustreFileSystem(Protocol):
    """What a cluster needs to mount a Lustre file system: kiln's LustreFileSystem, or one from
    LustreFileSystem.from_lustre_attributes."""

    @property
    def file_system_id(self) -> str: ...

    @property
    def dns_name(self) -> str: ...

    @property
    def mount_name(self) -> str: ...

    @property
    def connections(self) -> ec2.Connections: ...


@dataclass(frozen=True, kw_only=True)
class DataRepositoryLink:
    """A data repository association between the file system and S3.

    bucket: the linked bucket.
    prefix: key prefix inside the bucket; default the whole bucket.
    file_system_path: where the repository appears in Lustre; default "/", which FSx takes only as a file system's one
        link (platforms.json, fsx_lustre.data_repository_links; kiln.changes.links refuses a replacement on it).
    auto_import: new, changed and deleted S3 objects show up in Lustre; default True.
    auto_export: new, changed and deleted Lustre files go back to S3; default True.
    """

    bucket: s3.IBucket
    prefix: str = ""
    file_system_path: str = "/"
    auto_import: bool = True
    auto_export: bool = True

    def __post_init__(self) -> None:
        require(
            self,
            self.file_system_path.startswith("/"),
            "file_system_path",
            self.file_system_path,
            "an absolute path such as /",
        )
        require(self, not self.prefix.startswith("/"), "prefix", self.prefix, "a key prefix without a leading /")


@dataclass(frozen=True, kw_only=True)
class LustreFileSystemProps:
    """Props for LustreFileSystem.

    vpc: the VPC of the file servers.
    subnet: the subnet of the file servers (the compute subnet, for one-AZ EFA clusters).
    deployment: PERSISTENT_2 (replicated; backed up when not linked to S3) or SCRATCH_2; default PERSISTENT_2.
    storage_gib: 1200 or a multiple of 2400; default 1200.
    throughput_per_tib: PERSISTENT_2 only, 125/250/500/1000 MB/s per TiB; default 250.
    compression: LZ4 or NONE; default LZ4.
    efa: EFA-enabled file servers (PERSISTENT_2 only); needs efa_security_group; default False.
    efa_security_group: the EFA security group the file servers join when efa is on; default none: only
        efa False allows that.
    data_repository: link to S3; default none: the file system holds only what nodes write to it.
    backup_retention_days: PERSISTENT_2 daily backups kept this many days, 0 for none; default 7 without a
        data_repository, 0 with one: FSx backs up persistent file systems not linked to S3 only (BACKUPS).
    retain: keep the file system on stack deletion; default: PERSISTENT_2 yes, SCRATCH_2 no (scratch holds
        no durable copy, so a retained one is only a bill). A kept file system keeps what it needs to keep working:
        its security group, every rule on that group (the clients' rules allow_from adds included) and its link to
        S3. Its subnet, VPC and efa_security_group are its caller's to keep.
    """

    vpc: ec2.IVpc
    subnet: ec2.ISubnet
    deployment: LustreDeployment = "PERSISTENT_2"
    storage_gib: int = 1200
    throughput_per_tib: int | None = None
    compression: LustreCompression = "LZ4"
    efa: bool = False
    efa_security_group: ec2.ISecurityGroup | None = None
    data_repository: DataRepositoryLink | None = None
    backup_retention_days: int | None = None
    retain: bool | None = None

    def __post_init__(self) -> None:
        require_in(self, "deployment", self.deployment, DEPLOYMENTS)
        require_in(self, "compression", self.compression, COMPRESSIONS)
        if not unresolved(self.storage_gib):
            require(
                self,
                is_lustre_storage(self.storage_gib),
                "storage_gib",
                self.storage_gib,
                f"{LUSTRE_MIN_STORAGE_GIB} or a multiple of {LUSTRE_STORAGE_STEP_GIB}",
            )
        if self.deployment == "PERSISTENT_2":
            if self.throughput_per_tib is not None:
                require_in(self, "throughput_per_tib", self.throughput_per_tib, PERSISTENT_2_THROUGHPUTS)
            require(
                self,
                0 <= self.effective_backup_retention_days <= LUSTRE_BACKUP_RETENTION_MAX_DAYS,
                "backup_retention_days",
                self.backup_retention_days,
                f"0 to {LUSTRE_BACKUP_RETENTION_MAX_DAYS}",
            )
            require(
                self,
                self.data_repository is None or not self.backup_retention_days,
                "backup_retention_days",
                self.backup_retention_days,
                f"0 with a data_repository: FSx backs up no file system linked to S3 ({BACKUPS.source})",
            )
        else:
            require(
                self,
                self.throughput_per_tib is None,
                "throughput_per_tib",
                self.throughput_per_tib,
                "unset for SCRATCH_2",
            )
            require(self, not self.efa, "efa", self.efa, "False for SCRATCH_2 (EFA needs PERSISTENT_2)")
        if self.efa:
            require(
                self,
                self.efa_security_group is not None,
                "efa_security_group",
                None,
                "the EFA security group when efa is True",
            )

    @property
    def effective_retain(self) -> bool:
        return self.deployment == "PERSISTENT_2" if self.retain is None else self.retain

    @property
    def effective_backup_retention_days(self) -> int:
        """Return the days FSx keeps daily backups: 0 (none) for a file system FSx takes no backups of."""
        backed_up = self.deployment in BACKUPS.value["deployments"] and (
            self.data_repository is None or BACKUPS.value["linked_to_s3"]
        )
        if not backed_up:
            off: int = BACKUPS.value["off"]
            return off
        return DEFAULT_BACKUP_RETENTION_DAYS if self.backup_retention_days is None else self.backup_retention_days

    @property
    def effective_throughput_per_tib(self) -> int | None:
        if self.deployment != "PERSISTENT_2":
            return None
        return self.throughput_per_tib or PERSISTENT_2_DEFAULT_THROUGHPUT


class LustreFileSystem(Construct):
    """FSx for Lustre with LZ4, Lustre-port security group, optional EFA, and an S3 link or daily backups."""

    def __init__(self, scope: Construct, construct_id: str, props: LustreFileSystemProps) -> None:
        super().__init__(scope, construct_id)
        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=props.vpc, description="FSx for Lustre file servers and their clients"
        )
        persistent = props.deployment == "PERSISTENT_2"
        # A linked persistent file system says 0 (off) rather than nothing: FSx's references give two defaults. It
        # keeps CopyTagsToBackups, which asks for no backup: the property is create-only, and dropping it would
        # replace every persistent file system deployed with it.
        days = props.effective_backup_retention_days
        config = fsx.LustreConfiguration(
            deployment_type=fsx.LustreDeploymentType(props.deployment),
            per_unit_storage_throughput=props.effective_throughput_per_tib,
            data_compression_type=fsx.LustreDataCompressionType(props.compression),
            automatic_backup_retention=Duration.days(days) if persistent else None,
            copy_tags_to_backups=True if persistent else None,
            daily_automatic_backup_start_time=fsx.DailyAutomaticBackupStartTime(hour=3, minute=0) if days else None,
        )
        self.file_system = fsx.LustreFileSystem(
            self,
            "Resource",
            vpc=props.vpc,
            vpc_subnet=props.subnet,
            storage_capacity_gib=props.storage_gib,
            lustre_configuration=config,
            file_system_type_version=fsx.FileSystemTypeVersion.V_2_15,
            security_group=self.security_group,
            removal_policy=RemovalPolicy.RETAIN if props.effective_retain else RemovalPolicy.DESTROY,
        )
        self._admit_file_servers()
        # The props refuse efa without efa_security_group.
        if props.efa and props.efa_security_group is not None:
            self._enable_efa(props.efa_security_group)
        self.data_repository = self._link(props.data_repository) if props.data_repository else None
        if props.effective_retain:
            # The file servers' interfaces keep the group in use, so deleting it would fail the stack's deletion;
            # the link keeps auto-export and auto-import running.
            retain_all(self.security_group)
            if self.data_repository is not None:
                self.data_repository.apply_removal_policy(RemovalPolicy.RETAIN)

    def _admit_file_servers(self) -> None:
        """Admit the file servers to each other on the Lustre ports FSx documents (LUSTRE_RULES), in place of the L2's
        one rule for all of 988-1023, which opens 989-1017 too."""
        group = self.security_group
        (l2_rule,) = (child for child in group.node.children if isinstance(child, ec2.CfnSecurityGroupIngress))
        group.node.try_remove_child(l2_rule.node.id)
        for port in LUSTRE_PORTS:
            group.add_ingress_rule(group, port, "Lustre file server to file server")

    def _enable_efa(self, efa_group: ec2.ISecurityGroup) -> None:
        # The L2 has no EFA or metadata settings yet; EFA-enabled file systems need both.
        cfn = l1_of(self.file_system, fsx.CfnFileSystem)
        cfn.add_property_override("LustreConfiguration.EfaEnabled", True)
        cfn.add_property_override("LustreConfiguration.MetadataConfiguration", {"Mode": "AUTOMATIC"})
        cfn.add_property_override(
            "SecurityGroupIds", [self.security_group.security_group_id, efa_group.security_group_id]
        )

    def _link(self, link: DataRepositoryLink) -> fsx.CfnDataRepositoryAssociation:
        events = ["NEW", "CHANGED", "DELETED"]
        s3_config = fsx.CfnDataRepositoryAssociation.S3Property(
            auto_import_policy=fsx.CfnDataRepositoryAssociation.AutoImportPolicyProperty(events=events)
            if link.auto_import
            else None,
            auto_export_policy=fsx.CfnDataRepositoryAssociation.AutoExportPolicyProperty(events=events)
            if link.auto_export
            else None,
        )
        prefix = link.prefix.rstrip("/")
        return fsx.CfnDataRepositoryAssociation(
            self,
            "DataRepository",
            file_system_id=self.file_system.file_system_id,
            file_system_path=link.file_system_path,
            data_repository_path=f"s3://{link.bucket.bucket_name}/{prefix + '/' if prefix else ''}",
            batch_import_meta_data_on_create=True,
            s3=s3_config,
        )

    @staticmethod
    def from_lustre_attributes(
        scope: Construct, construct_id: str, attributes: LustreFileSystemAttributes
    ) -> ImportedLustreFileSystem:
        """Refer to a file system made outside this app."""
        return ImportedLustreFileSystem(scope, construct_id, attributes)

    def allow_from(self, peer: ec2.IConnectable) -> None:
        """Let PEER (nodes, their security group) mount the file system."""
        allow_lustre_clients(self.connections, peer)

    @property
    def connections(self) -> ec2.Connections:
        return self.security_group.connections

    @property
    def file_system_id(self) -> str:
        return self.file_system.file_system_id

    @property
    def dns_name(self) -> str:
        # FSx's own answer (CloudFormation's DNSName attribute), not a name spelled from the region.
        return l1_of(self.file_system, fsx.CfnFileSystem).attr_dns_name

    @property
    def mount_name(self) -> str:
        return self.file_system.mount_name


def allow_lustre_clients(servers: ec2.Connections, peer: ec2.IConnectable) -> None:
    """Open the Lustre ports between SERVERS and the clients PEER, both ways, and among the clients, as FSx for Lustre's
    access-control page asks (LUSTRE_RULES): each group admits the other and the clients admit themselves, and a
    group that does not allow all outbound traffic gets the matching outbound rules. A group imported immutable (one
    kiln did not make) gets none."""
    clients = peer.connections
    # A group that allows all outbound traffic takes no outbound rule (CDK would drop it with a warning).
    restricted = not all(group.allow_all_outbound for group in clients.security_groups)
    for port in LUSTRE_PORTS:
        servers.allow_from(peer, port, "Lustre client")
        clients.allow_from(servers, port, "Lustre file servers to client")
        if restricted:
            clients.allow_internally(port, "Lustre client to client")
        else:
            clients.allow_from(peer, port, "Lustre client to client")


def file_system_dns_name(scope: Construct, file_system_id: str) -> str:
    """Return the DNS name FSx gives FILE_SYSTEM_ID in the region of SCOPE's stack (catalog fact fsx_lustre.dns_name).

    An env-agnostic stack gets it from a mapping of the partitions the fact covers: a deploy to any other partition
    fails at that mapping rather than mounting a name that does not resolve.
    """
    fact = service_fact("fsx_lustre", "dns_name").value
    domains: dict[str, str] = fact["domains"]
    stack = Stack.of(scope)
    region = stack.region
    if unresolved(region):
        mapping = CfnMapping(scope, "FsxDnsDomain", mapping={p: {"domain": d} for p, d in domains.items()})
        domain, region = mapping.find_in_map(Aws.PARTITION, "domain"), Aws.REGION
    else:
        partition = next((p for p, names in regions_by_partition().items() if region in names), None)
        if partition is None or partition not in domains:
            refuse(stack, "region", region, f"a region of a partition whose FSx DNS names kiln knows: {domains}")
        domain = domains[partition]
    pattern: str = fact["pattern"]
    return pattern.format(file_system_id=file_system_id, region=region, domain=domain)


@dataclass(frozen=True, kw_only=True)
class LustreFileSystemAttributes:
    """A file system made elsewhere.

    file_system_id: the file system's id, as FSx reports it (a string or a token).
    dns_name: its DNS name, as FSx reports it; file_system_dns_name() spells the DNS name FSx gives a file system id.
    mount_name: its Lustre mount name, as FSx reports it.
    security_group: the group its file servers carry (allow_from lets clients in through it); default none: the file
        system already admits its clients through groups made elsewhere, and allow_from is refused.
    """

    file_system_id: str
    dns_name: str
    mount_name: str
    security_group: ec2.ISecurityGroup | None = None

    def __post_init__(self) -> None:
        if not unresolved(self.file_system_id):
            require(
                self,
                FILE_SYSTEM_ID.fullmatch(self.file_system_id) is not None,
                "file_system_id",
                self.file_system_id,
                "an FSx id such as fs-0123456789abcdef0",
            )


class ImportedLustreFileSystem(Construct):
    """A Lustre file system made elsewhere (see LustreFileSystem.from_lustre_attributes)."""

    def __init__(self, scope: Construct, construct_id: str, attributes: LustreFileSystemAttributes) -> None:
        super().__init__(scope, construct_id)
        self.file_system_id = attributes.file_system_id
        self.dns_name = attributes.dns_name
        self.mount_name = attributes.mount_name
        groups = [attributes.security_group] if attributes.security_group is not None else []
        self.connections = ec2.Connections(security_groups=groups)

    def allow_from(self, peer: ec2.IConnectable) -> None:
        """Let PEER (nodes, their security group) mount the file system."""
        if not self.connections.security_groups:
            raise PropError(
                f"{self.node.path}: allow_from needs the file servers' security_group; without it, PEER joins a "
                "group the file system already admits"
            )
        allow_lustre_clients(self.connections, peer)
