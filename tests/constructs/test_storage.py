"""DataBucket and LustreFileSystem."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Match, Template

from kiln.constructs import (
    DataBucket,
    DataBucketProps,
    DataRepositoryLink,
    EfaSecurityGroup,
    EfaSecurityGroupProps,
    LustreFileSystem,
    LustreFileSystemAttributes,
    LustreFileSystemProps,
    TrainingVpc,
    TrainingVpcProps,
)
from kiln.constructs.lustre import file_system_dns_name
from tests.support.constructs import get_att, imported_vpc, logical_id, ref, stack


@pytest.fixture(scope="module")
def storage():
    st = stack("Storage")
    net = TrainingVpc(st, "Vpc", TrainingVpcProps(availability_zone="us-east-1a"))
    efa = EfaSecurityGroup(st, "Efa", EfaSecurityGroupProps(vpc=net.vpc))
    bucket = DataBucket(st, "Data")
    role = iam.Role(st, "Reader", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
    bucket.grant_read(role, "datasets/*")
    persistent = LustreFileSystem(
        st,
        "Persistent",
        LustreFileSystemProps(
            vpc=net.vpc,
            subnet=net.compute_subnet,
            storage_gib=2400,
            efa=True,
            efa_security_group=efa.security_group,
            data_repository=DataRepositoryLink(bucket=bucket.bucket),
        ),
    )
    client = ec2.SecurityGroup(st, "Client", vpc=net.vpc)
    persistent.allow_from(client)
    scratch = LustreFileSystem(
        st,
        "Scratch",
        LustreFileSystemProps(
            vpc=net.vpc,
            subnet=net.compute_subnet,
            deployment="SCRATCH_2",
            compression="NONE",
            retain=False,
            data_repository=DataRepositoryLink(
                bucket=bucket.bucket, prefix="team/", file_system_path="/data", auto_export=False
            ),
        ),
    )
    return {
        "net": net,
        "bucket": bucket,
        "role": role,
        "persistent": persistent,
        "scratch": scratch,
        "client": client,
        "efa": efa,
        "template": Template.from_stack(st),
    }


def _bucket(storage) -> dict:
    return storage["template"].find_resources("AWS::S3::Bucket")[
        logical_id(storage["bucket"].bucket.node.default_child)
    ]


def test_bucket_is_encrypted_versioned_private_and_retained(storage) -> None:
    bucket = _bucket(storage)
    props = bucket["Properties"]
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert props["LoggingConfiguration"]["DestinationBucketName"] == ref(
        storage["bucket"].access_log_bucket.node.default_child
    )


def test_bucket_aborts_incomplete_uploads_and_expires_old_versions(storage) -> None:
    rules = {r["Id"]: r for r in _bucket(storage)["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert rules["AbortIncompleteUploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    assert rules["ExpireOldVersions"]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}


def test_access_log_bucket_is_versioned_and_expires_old_versions_like_the_data(storage) -> None:
    logs = storage["template"].find_resources("AWS::S3::Bucket")[
        logical_id(storage["bucket"].access_log_bucket.node.default_child)
    ]
    assert logs["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    (rule,) = logs["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}
    assert (logs["DeletionPolicy"], logs["UpdateReplacePolicy"]) == ("Retain", "Retain")


def test_bucket_refuses_plain_http_and_old_tls(storage) -> None:
    bucket_id = logical_id(storage["bucket"].bucket.node.default_child)
    storage["template"].has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": bucket_id},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}),
                        Match.object_like({"Effect": "Deny", "Condition": {"NumericLessThan": {"s3:TlsVersion": 1.2}}}),
                    ]
                )
            },
        },
    )


def test_grant_read_is_scoped_to_the_prefix(storage) -> None:
    bucket_id = logical_id(storage["bucket"].bucket.node.default_child)
    storage["template"].has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [ref(storage["role"].node.default_child)],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": Match.array_with(["s3:GetObject*"]),
                                "Resource": Match.array_with(
                                    [{"Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, "/datasets/*"]]}]
                                ),
                            }
                        )
                    ]
                )
            },
        },
    )


def test_unretained_bucket_is_emptied_and_deleted() -> None:
    st = stack("Ephemeral")
    bucket = DataBucket(st, "Data", DataBucketProps(retain=False, access_logs=False))
    template = Template.from_stack(st)
    resource = template.find_resources("AWS::S3::Bucket")[logical_id(bucket.bucket.node.default_child)]
    assert resource["DeletionPolicy"] == "Delete"
    template.resource_count_is("Custom::S3AutoDeleteObjects", 1)
    assert "LoggingConfiguration" not in resource["Properties"]


def _fs(storage, name: str) -> dict:
    construct = storage[name].file_system.node.default_child
    return storage["template"].find_resources("AWS::FSx::FileSystem")[logical_id(construct)]


def test_persistent_lustre_throughput_compression_and_backups(storage) -> None:
    fs = _fs(storage, "persistent")
    config = fs["Properties"]["LustreConfiguration"]
    assert fs["Properties"]["StorageCapacity"] == 2400
    assert fs["Properties"]["FileSystemTypeVersion"] == "2.15"
    assert config["DeploymentType"] == "PERSISTENT_2"
    assert config["PerUnitStorageThroughput"] == 250
    assert config["DataCompressionType"] == "LZ4"
    # Linked to the bucket: FSx backs it up not at all (tests/constructs/test_lustre_backups.py).
    assert (config["AutomaticBackupRetentionDays"], config["CopyTagsToBackups"]) == (0, True)
    assert fs["DeletionPolicy"] == "Retain"


def test_efa_lustre_has_metadata_config_and_joins_the_efa_group(storage) -> None:
    fs = _fs(storage, "persistent")
    config = fs["Properties"]["LustreConfiguration"]
    assert config["EfaEnabled"] is True
    assert config["MetadataConfiguration"] == {"Mode": "AUTOMATIC"}
    assert fs["Properties"]["SecurityGroupIds"] == [
        get_att(storage["persistent"].security_group.node.default_child, "GroupId"),
        get_att(storage["efa"].security_group.node.default_child, "GroupId"),
    ]


def test_scratch_lustre_has_no_throughput_backups_or_retention(storage) -> None:
    fs = _fs(storage, "scratch")
    config = fs["Properties"]["LustreConfiguration"]
    assert config["DeploymentType"] == "SCRATCH_2" and config["DataCompressionType"] == "NONE"
    assert not {"PerUnitStorageThroughput", "AutomaticBackupRetentionDays", "EfaEnabled"} & set(config)
    assert fs["DeletionPolicy"] == "Delete"


def test_lustre_ports_open_between_servers_and_to_clients(storage) -> None:
    group = get_att(storage["persistent"].security_group.node.default_child, "GroupId")
    client = get_att(storage["client"].node.default_child, "GroupId")
    ingress = [
        r["Properties"]
        for r in storage["template"].find_resources("AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == group
    ]
    opened = {
        (r["SourceSecurityGroupId"] == group, r["FromPort"], r["ToPort"]) for r in ingress if r["IpProtocol"] == "tcp"
    }
    # FSx's page asks for 988 and 1018-1023 among the file servers too, never the L2's 988-1023.
    assert opened == {(True, 988, 988), (True, 1018, 1023), (False, 988, 988), (False, 1018, 1023)}
    assert all(r["SourceSecurityGroupId"] in (group, client) for r in ingress)


def test_data_repository_imports_and_exports_the_bucket(storage) -> None:
    bucket_ref = ref(storage["bucket"].bucket.node.default_child)
    storage["template"].has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemId": ref(storage["persistent"].file_system.node.default_child),
            "FileSystemPath": "/",
            "DataRepositoryPath": {"Fn::Join": ["", ["s3://", bucket_ref, "/"]]},
            "BatchImportMetaDataOnCreate": True,
            "S3": {
                "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
                "AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
            },
        },
    )
    storage["template"].has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemPath": "/data",
            "DataRepositoryPath": {"Fn::Join": ["", ["s3://", bucket_ref, "/team/"]]},
            "S3": {"AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}},
        },
    )


def test_attributes_resolve_to_the_file_system(storage) -> None:
    fs = storage["persistent"]
    cfn = fs.file_system.node.default_child
    resolve = fs.file_system.stack.resolve
    assert resolve(fs.file_system_id) == ref(cfn)
    assert resolve(fs.dns_name) == get_att(cfn, "DNSName")
    assert resolve(fs.mount_name) == get_att(cfn, "LustreMountName")
    assert fs.connections.security_groups == [fs.security_group]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"storage_gib": 2000}, "storage_gib: got 2000; allowed: 1200 or a multiple of 2400"),
        ({"throughput_per_tib": 300}, "throughput_per_tib: got 300; allowed: 125, 250, 500, 1000"),
        (
            {"deployment": "SCRATCH_2", "throughput_per_tib": 125},
            "throughput_per_tib: got 125; allowed: unset for SCRATCH_2",
        ),
        ({"deployment": "SCRATCH_2", "efa": True}, "efa: got True; allowed: False for SCRATCH_2"),
        ({"efa": True}, "efa_security_group: got None; allowed: the EFA security group"),
        ({"deployment": "PERSISTENT_1"}, "deployment: got 'PERSISTENT_1'; allowed: PERSISTENT_2, SCRATCH_2"),
        ({"compression": "GZIP"}, "compression: got 'GZIP'; allowed: LZ4, NONE"),
    ],
)
def test_invalid_lustre_props_name_value_and_allowed(storage, change: dict, message: str) -> None:
    vpc = storage["net"].vpc
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        LustreFileSystemProps(vpc=vpc, subnet=vpc.private_subnets[0], **change)


def _policies(storage, kind: str) -> list[tuple[str, str]]:
    return [
        (r.get("DeletionPolicy"), r.get("UpdateReplacePolicy"))
        for r in storage["template"].find_resources(kind).values()
    ]


def test_a_kept_file_system_keeps_its_group_every_rule_on_it_and_its_s3_link(storage) -> None:
    resources = storage["template"].to_json()["Resources"]
    group = logical_id(storage["persistent"].security_group.node.default_child)
    rules = [k for k, r in resources.items() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]
    persistent_rules = [k for k in rules if resources[k]["Properties"]["GroupId"] == get_att_of(group)]
    # The servers' own two rules and the two a client got through allow_from after the file system was made.
    assert len(persistent_rules) == 4
    for kept in (group, *persistent_rules):
        assert (resources[kept]["DeletionPolicy"], resources[kept]["UpdateReplacePolicy"]) == ("Retain", "Retain")
    links = {
        r["Properties"]["FileSystemPath"]: r.get("DeletionPolicy")
        for r in resources.values()
        if r["Type"] == "AWS::FSx::DataRepositoryAssociation"
    }
    assert links == {"/": "Retain", "/data": None}  # the scratch file system's link goes with it


def get_att_of(logical: str) -> dict:
    return {"Fn::GetAtt": [logical, "GroupId"]}


def test_a_deleted_file_system_keeps_nothing_of_its_network(storage) -> None:
    resources = storage["template"].to_json()["Resources"]
    group = logical_id(storage["scratch"].security_group.node.default_child)
    assert "DeletionPolicy" not in resources[group]
    assert all(
        "DeletionPolicy" not in r
        for r in resources.values()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress" and r["Properties"]["GroupId"] == get_att_of(group)
    )


def test_a_kept_bucket_keeps_its_policies_and_a_deleted_one_does_not(storage) -> None:
    assert _policies(storage, "AWS::S3::BucketPolicy") == [("Retain", "Retain"), ("Retain", "Retain")]
    st = stack("Ephemeral")
    DataBucket(st, "Data", DataBucketProps(retain=False))
    policies = Template.from_stack(st).find_resources("AWS::S3::BucketPolicy").values()
    assert len(policies) == 2 and all("DeletionPolicy" not in p for p in policies)


def test_an_attached_file_system_without_its_servers_group_refuses_allow_from() -> None:
    st = stack("Attached")
    fs = LustreFileSystem.from_lustre_attributes(
        st,
        "Fs",
        LustreFileSystemAttributes(file_system_id="fs-0123456789abcdef0", dns_name="d", mount_name="abcdefgh"),
    )
    assert fs.connections.security_groups == []
    client = ec2.SecurityGroup(st, "Client", vpc=imported_vpc(st))
    with pytest.raises(ValueError, match="allow_from needs the file servers' security_group"):
        fs.allow_from(client)


@pytest.mark.parametrize(
    ("region", "expected"),
    [
        ("us-east-1", "fs-0123456789abcdef0.fsx.us-east-1.amazonaws.com"),
        # ParallelCluster's cookbook: amazonaws.com in China too (platforms.json services.fsx_lustre.dns_name).
        ("cn-north-1", "fs-0123456789abcdef0.fsx.cn-north-1.amazonaws.com"),
        ("us-gov-west-1", "fs-0123456789abcdef0.fsx.us-gov-west-1.amazonaws.com"),
    ],
)
def test_the_dns_name_of_a_file_system_id(region: str, expected: str) -> None:
    st = stack("Names", env=cdk.Environment(account="111111111111", region=region))
    assert file_system_dns_name(st, "fs-0123456789abcdef0") == expected


def test_a_partition_whose_fsx_names_kiln_does_not_know_is_refused() -> None:
    st = stack("Iso", env=cdk.Environment(account="111111111111", region="us-iso-east-1"))
    with pytest.raises(ValueError, match="region: got 'us-iso-east-1'; allowed: a region of a partition"):
        file_system_dns_name(st, "fs-0123456789abcdef0")


def test_an_env_agnostic_stack_maps_the_partition_to_the_fsx_domain() -> None:
    st = stack("Agnostic", env=None)
    name = st.resolve(file_system_dns_name(st, "fs-0123456789abcdef0"))
    assert name == {
        "Fn::Join": [
            "",
            [
                "fs-0123456789abcdef0.fsx.",
                {"Ref": "AWS::Region"},
                ".",
                {"Fn::FindInMap": ["FsxDnsDomain", {"Ref": "AWS::Partition"}, "domain"]},
            ],
        ]
    }
    assert Template.from_stack(st).to_json()["Mappings"]["FsxDnsDomain"] == {
        partition: {"domain": "amazonaws.com"} for partition in ("aws", "aws-cn", "aws-us-gov")
    }


@pytest.mark.parametrize("retain", [True, False])
def test_a_vpc_kept_for_data_keeps_itself_and_its_compute_subnet_alone(retain: bool) -> None:
    st = stack("KeptNetwork")
    net = TrainingVpc(st, "Vpc", TrainingVpcProps(availability_zone="us-east-1a", retain_for_data=retain))
    resources = Template.from_stack(st).to_json()["Resources"]
    kept = {
        lid
        for lid, r in resources.items()
        if r.get("DeletionPolicy") == "Retain" and r["Type"] not in ("AWS::KMS::Key", "AWS::Logs::LogGroup")
    }
    expected = {logical_id(net.vpc.node.default_child), logical_id(net.compute_subnet.node.default_child)}
    assert kept == (expected if retain else set())
