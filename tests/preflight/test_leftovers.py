"""The leftovers check and `kiln leftovers`: what an earlier deploy kept, found by kiln's tags in a moto account.

moto answers the tagging API (S3, FSx, EC2, KMS, CloudWatch Logs), AMP's listing, FSx, EC2, KMS, S3 and
CloudFormation. Its file systems lack the VPC, interfaces and mount name FSx reports; where a test needs those, FSx
answers through a Stubber. moto has no data repository associations: `_linked` adds a kiln-tagged link to the
tagging API's answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.stub import ANY

from kiln.cli.main import main
from kiln.contracts.tags import TAG_CLUSTER, TAG_ENVIRONMENT
from kiln.preflight.checks import leftovers
from kiln.preflight.run import run_check
from tests.support.fake_aws import REGION
from tests.support.preflight import BASE_SPEC, client_error, make_plan, merged, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

OURS = {TAG_CLUSTER: "pf"}
DATA, LOGS = "pf-storage-data2d4b752f-abc", "pf-storage-dataaccesslogsc0c-def"


def _tags(tags: dict[str, str], key: str = "Key", value: str = "Value") -> list[dict[str, str]]:
    return [{key: k, value: v} for k, v in tags.items()]


@dataclass
class Kept:
    """What `cdk destroy` of cluster pf left in the moto account."""

    vpc: str
    subnet: str
    servers: str
    clients: str
    file_system: str
    backup: str
    key: str
    workspace: str


def _keep(aws, tags: dict[str, str] = OURS, name: str = "pf") -> Kept:
    """Make in moto what a destroyed cluster NAME keeps, each tagged TAGS."""
    data, logs = DATA.replace("pf", name, 1), LOGS.replace("pf", name, 1)
    ec2 = aws.ec2

    def tagged(kind: str) -> list[dict]:
        return [{"ResourceType": kind, "Tags": _tags(tags)}]

    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16", TagSpecifications=tagged("vpc"))["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24", TagSpecifications=tagged("subnet"))["Subnet"]
    servers = ec2.create_security_group(
        GroupName="servers",
        Description="FSx for Lustre file servers",
        VpcId=vpc,
        TagSpecifications=tagged("security-group"),
    )["GroupId"]
    clients = ec2.create_security_group(
        GroupName="clients", Description="Lustre clients", VpcId=vpc, TagSpecifications=tagged("security-group")
    )["GroupId"]
    # As kiln's file servers' group: itself on 988-1023, the clients on 988 and 1018-1023.
    ec2.authorize_security_group_ingress(
        GroupId=servers,
        IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 988, "ToPort": 1023, "UserIdGroupPairs": [{"GroupId": servers}]},
            {"IpProtocol": "tcp", "FromPort": 988, "ToPort": 988, "UserIdGroupPairs": [{"GroupId": clients}]},
        ],
    )
    fs = aws.fsx.create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=2400,
        SubnetIds=[subnet["SubnetId"]],
        SecurityGroupIds=[servers],
        LustreConfiguration={"DeploymentType": "PERSISTENT_2"},
        Tags=_tags(tags),
    )["FileSystem"]["FileSystemId"]
    backup = aws.fsx.create_backup(FileSystemId=fs, Tags=_tags(tags))["Backup"]["BackupId"]
    for bucket in (data, logs):
        aws.s3.create_bucket(Bucket=bucket)
        aws.s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": _tags(tags)})
    policy = {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "logging.s3.amazonaws.com"},
                "Action": "s3:PutObject",
                "Resource": f"arn:aws:s3:::{logs}/*",
            }
        ]
    }
    aws.s3.put_bucket_policy(Bucket=logs, Policy=json.dumps(policy))
    aws.s3.put_bucket_logging(
        Bucket=data, BucketLoggingStatus={"LoggingEnabled": {"TargetBucket": logs, "TargetPrefix": "data-bucket/"}}
    )
    key = aws.kms.create_key(Description="kiln: encrypts the VPC flow logs", Tags=_tags(tags, "TagKey", "TagValue"))
    # A key its stack deleted is already on its way out: KMS deletes it after its waiting period.
    going = aws.kms.create_key(Tags=_tags(tags, "TagKey", "TagValue"))["KeyMetadata"]["KeyId"]
    aws.kms.schedule_key_deletion(KeyId=going, PendingWindowInDays=7)
    boto3.client("logs", region_name=REGION).create_log_group(logGroupName=f"{name}-network-VpcFlowLogs-abc", tags=tags)
    workspace = aws.amp.create_workspace(alias="pf-metrics", tags=tags)["workspaceId"]
    return Kept(
        vpc=vpc,
        subnet=subnet["SubnetId"],
        servers=servers,
        clients=clients,
        file_system=fs,
        backup=backup,
        key=key["KeyMetadata"]["KeyId"],
        workspace=workspace,
    )


LINK = "dra-0123456789abcdef0"


def _linked(aws, file_system: str):
    """Return AWS whose tagging API also answers the kiln-tagged link of FILE_SYSTEM to S3, as kiln makes every file
    system with one (its ARN: association/<file system id>/<link id>)."""
    found = aws.tagging.get_resources(
        TagFilters=[{"Key": TAG_CLUSTER, "Values": ["pf"]}], ResourceTypeFilters=list(leftovers.RESOURCE_TYPES)
    )["ResourceTagMappingList"]
    link = {"ResourceARN": f"arn:aws:fsx:{REGION}:{aws.account}:association/{file_system}/{LINK}", "Tags": _tags(OURS)}
    tagged, stubber = stubbed(aws, "tagging")
    stubber.add_response(
        "get_resources", {"ResourceTagMappingList": [*found, link]}, {"TagFilters": ANY, "ResourceTypeFilters": ANY}
    )
    stubber.activate()
    return tagged


@pytest.fixture
def clients(aws):
    """Preflight's clients on the moto account."""
    return aws


def test_everything_a_destroy_kept_is_listed_in_delete_order_with_what_a_deploy_does(clients) -> None:
    kept = _keep(clients)
    linked = _linked(clients, kept.file_system)
    found = leftovers.find_leftovers(make_plan(storage={"lustre": {"deployment": "PERSISTENT_2"}}), linked)
    assert [item.subject for item in found] == [
        f"Prometheus workspace {kept.workspace}",
        "log group pf-network-VpcFlowLogs-abc",
        f"file system {kept.file_system}",
        f"file system backup {kept.backup}",
        # The servers' group names the clients' group in its rules: it goes first.
        f"security group {kept.servers}",
        f"security group {kept.clients}",
        f"subnet {kept.subnet}",
        f"VPC {kept.vpc}",
        f"KMS key {kept.key}",
        # The data bucket before the bucket it logs to.
        f"bucket {DATA}",
        f"bucket {LOGS}",
    ]
    by_subject = {item.subject: item for item in found}
    fs = by_subject[f"file system {kept.file_system}"]
    assert fs.redeploy == "a deploy of this spec creates another file system beside it and leaves this one"
    # The clients' group is the one the file servers' group admits on TCP 988.
    assert fs.attach == (
        f"storage.lustre: {{file_system_id: {kept.file_system}, mount_name: <its mount name>, security_group_id: "
        f"{kept.clients}}} and network: {{vpc_id: <its VPC>, private_subnet_id: {kept.subnet}}}"
    )
    # Linked to S3: FSx takes no final backup of it (platforms.json, fsx_lustre.backups).
    assert fs.delete == (
        f"aws fsx delete-file-system --file-system-id {kept.file_system} --region {REGION}  # linked to S3 ({LINK}): "
        "FSx keeps no backup of it, so first let its last changes reach S3 (AgeOfOldestQueuedMessage at 0, or an "
        "export data repository task)",
    )
    assert by_subject[f"security group {kept.clients}"].about.startswith(
        f"the Lustre clients' group of {kept.file_system}"
    )
    data, logs = by_subject[f"bucket {DATA}"], by_subject[f"bucket {LOGS}"]
    assert data.attach == f"storage.bucket: {{name: {DATA}, existing: true}}"
    assert data.redeploy == "a deploy of this spec makes a new bucket beside it (generated names never collide)"
    assert (logs.about, logs.attach) == (f"the access logs of bucket {DATA}", "")
    assert by_subject[f"KMS key {kept.key}"].about == "kiln: encrypts the VPC flow logs (Enabled)"
    assert all(item.finding().status == "warn" for item in found)


def test_a_spec_that_attaches_them_is_told_so(clients) -> None:
    kept = _keep(clients)
    plan = make_plan(
        storage={
            "bucket": {"name": DATA, "existing": True},
            "lustre": {"file_system_id": kept.file_system, "mount_name": "abcdefgh", "security_group_id": kept.clients},
        },
        network={"vpc_id": kept.vpc, "private_subnet_id": kept.subnet},
    )
    findings = {finding.subject: finding for finding in leftovers.check(plan, clients)}
    attached = {subject: f.message for subject, f in findings.items() if f.status == "ok"}
    assert attached == {
        f"bucket {DATA}": "kept data; this spec attaches it (storage.bucket.existing)",
        f"file system {kept.file_system}": "PERSISTENT_2, 2400 GiB, state unknown, billed while it exists; this spec "
        "attaches it (storage.lustre.file_system_id)",
        f"security group {kept.clients}": f"the Lustre clients' group of {kept.file_system}, in {kept.vpc}; this "
        "spec's nodes join it (storage.lustre.security_group_id)",
        f"subnet {kept.subnet}": "kept because a kept file system's interfaces were in it; this spec deploys into it "
        "(network.private_subnet_id)",
        f"VPC {kept.vpc}": "kept because a kept file system's interfaces were in it; this spec deploys into it "
        "(network.vpc_id)",
    }
    workspace = findings[f"Prometheus workspace {kept.workspace}"]
    assert workspace.remedy == f"delete it: aws amp delete-workspace --workspace-id {kept.workspace} --region {REGION}"


def test_a_spec_that_names_a_kept_bucket_without_attaching_it_is_told_to(clients) -> None:
    _keep(clients)
    plan = make_plan(storage={"bucket": {"name": DATA}})
    (data,) = [item for item in leftovers.find_leftovers(plan, clients) if item.ident == DATA]
    assert data.redeploy == "a deploy of this spec fails: CloudFormation cannot create a bucket of this name"
    assert data.attach == "storage.bucket.existing: true"


def test_what_a_live_stack_holds_and_other_clusters_resources_are_not_leftovers(clients) -> None:
    _keep(clients, {TAG_CLUSTER: "other"}, "other")
    _keep(clients, {TAG_CLUSTER: "pf", TAG_ENVIRONMENT: "pf-pr1"}, "pf-pr1")  # a short-lived environment of pf
    template = {"Resources": {"Data": {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "pf-live-data"}}}}
    clients.cloudformation.create_stack(StackName="pf-storage", TemplateBody=json.dumps(template))
    clients.s3.put_bucket_tagging(Bucket="pf-live-data", Tagging={"TagSet": _tags(OURS)})
    (finding,) = leftovers.check(make_plan(), clients)
    assert (
        finding.line()
        == "OK        leftovers: kept resources: none tagged kiln:cluster=pf outside the cluster's stacks"
    )


def test_an_environments_leftovers_are_found_by_its_own_tag(clients) -> None:
    from kiln.preflight.plan import plan_for
    from kiln.spec import parse_spec

    kept = _keep(clients, {TAG_CLUSTER: "pf", TAG_ENVIRONMENT: "pf-pr1"}, "pf-pr1")
    spec = parse_spec(merged(BASE_SPEC, {"region": REGION}))
    plan = plan_for(spec, spec_path="spec.yaml", region=REGION, environment="pf-pr1", account=clients.account)
    subjects = {item.subject for item in leftovers.find_leftovers(plan, clients)}
    assert f"file system {kept.file_system}" in subjects
    assert not leftovers.find_leftovers(make_plan(), clients)


def test_aws_refusing_the_listing_is_a_warning_that_names_the_action(clients) -> None:
    refused, stubber = stubbed(clients, "tagging")
    stubber.add_client_error("get_resources", **client_error("AccessDenied", status=403))
    with stubber:
        (finding,) = run_check(leftovers.CHECK, make_plan(), refused)
    assert finding.status == "warn"
    assert finding.message == "tag:GetResources was denied (AccessDenied)"
    assert finding.remedy == (
        "allow tag:GetResources (read-only) for the identity running kiln, or pass --skip leftovers (leftovers never "
        "block a deploy)"
    )


def test_the_file_servers_group_is_read_from_the_interfaces_fsx_reports(clients) -> None:
    kept = _keep(clients)
    # Interfaces whose group is another one: the clients' group is then the one that group admits.
    other = clients.ec2.create_security_group(GroupName="o", Description="o", VpcId=kept.vpc)["GroupId"]
    clients.ec2.authorize_security_group_ingress(
        GroupId=other,
        IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": kept.servers}]}],
    )
    eni = clients.ec2.create_network_interface(SubnetId=kept.subnet, Groups=[other])["NetworkInterface"]
    answer = {
        "FileSystemId": kept.file_system,
        "FileSystemType": "LUSTRE",
        "Lifecycle": "AVAILABLE",
        "StorageCapacity": 2400,
        "VpcId": kept.vpc,
        "SubnetIds": [kept.subnet],
        "NetworkInterfaceIds": [eni["NetworkInterfaceId"]],
        "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "MountName": "abcdefgh"},
    }
    fsx_clients, fsx = stubbed(clients, "fsx")
    fsx.add_response("describe_file_systems", {"FileSystems": [answer]}, {"FileSystemIds": [kept.file_system]})
    fsx.add_response("describe_backups", {"Backups": []}, {"BackupIds": [kept.backup]})
    with fsx:
        found = leftovers.find_leftovers(make_plan(), fsx_clients)
    (fs,) = [item for item in found if item.kind == "file system"]
    assert fs.about == f"PERSISTENT_2, 2400 GiB, AVAILABLE in {kept.vpc}, billed while it exists"
    assert fs.attach == (
        f"storage.lustre: {{file_system_id: {kept.file_system}, mount_name: abcdefgh, security_group_id: "
        f"{kept.servers}}} and network: {{vpc_id: {kept.vpc}, private_subnet_id: {kept.subnet}}}"
    )
    # The backup FSx no longer has is gone, not left over.
    assert "file system backup" not in {item.kind for item in found}


def test_kiln_leftovers_prints_the_list_and_the_commands_and_deletes_nothing(
    clients, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = _keep(clients)
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(merged(BASE_SPEC, {"region": REGION})))
    assert main(["leftovers", "--spec", str(spec)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"kiln leftovers: pf in {REGION}: 11 kept by an earlier deploy (0 used by this spec)"
    assert (
        f"file system {kept.file_system}: PERSISTENT_2, 2400 GiB, state unknown, billed while it exists; a deploy of "
        "this spec leaves it"
    ) in out
    assert f"  attach: storage.bucket: {{name: {DATA}, existing: true}}" in out
    commands = out[out.index("To delete them (kiln deletes nothing), in this order:") + 1 :]
    assert commands[0] == f"  aws amp delete-workspace --workspace-id {kept.workspace} --region {REGION}"
    assert commands[-1].startswith(f"  aws s3api delete-bucket --bucket {LOGS} --region {REGION}")
    # Nothing was deleted.
    assert clients.fsx.describe_file_systems(FileSystemIds=[kept.file_system])["FileSystems"]
    assert main(["leftovers", "--spec", str(spec), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [item["subject"] for item in listed["leftovers"]][0] == f"Prometheus workspace {kept.workspace}"


def test_a_final_backup_is_asked_for_only_where_fsx_takes_one(clients) -> None:
    # Not linked to S3 and persistent: FSx keeps a final backup when asked (platforms.json, fsx_lustre.final_backup).
    kept = _keep(clients)
    scratch = clients.fsx.create_file_system(
        FileSystemType="LUSTRE",
        StorageCapacity=1200,
        SubnetIds=[kept.subnet],
        SecurityGroupIds=[kept.servers],
        LustreConfiguration={"DeploymentType": "SCRATCH_2"},
        Tags=_tags(OURS),
    )["FileSystem"]["FileSystemId"]
    found = {item.ident: item.delete for item in leftovers.find_leftovers(make_plan(), clients)}
    assert found[kept.file_system] == (
        f"aws fsx delete-file-system --file-system-id {kept.file_system} --lustre-configuration SkipFinalBackup=false "
        f"--region {REGION}  # keeps a final backup; SkipFinalBackup=true keeps none",
    )
    assert found[scratch] == (
        f"aws fsx delete-file-system --file-system-id {scratch} --region {REGION}  # a scratch file system: FSx keeps "
        "no backup of it",
    )
