"""ParallelCluster: the official schema loads kiln's config; the provider and custom resource are wired."""

from __future__ import annotations

import dataclasses
import json
from importlib.metadata import version
from pathlib import Path

import pytest
from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template

from kiln.bootstrap.fetch import FETCH_SCRIPT, RESOLVE_SCRIPT, file_sha256
from kiln.catalog.platforms import service_fact
from kiln.constructs import (
    NodeBootstrap,
    acknowledgements,
)
from kiln.constructs.node_scripts import DENY_SID
from kiln.constructs.parallelcluster import (
    BOOTSTRAP_PREFIX,
    PARALLELCLUSTER_VERSION,
    PROVIDER_ROLE,
    ParallelCluster,
    ParallelClusterProps,
    SlurmQueue,
    attachable_policy,
    is_attachable,
)
from kiln.contracts.iam_wildcards import template_wildcards
from kiln.stacks.app import new_app
from kiln.stacks.synth import nag_report
from tests.support.constructs import (
    PLAIN_BUNDLE_SHA256,
    imported_vpc,
    logical_id,
    plain_bootstrap,
    stack,
    synth_as_kiln,
)
from tests.support.parallelcluster import CAPACITIES, build, build_props
from tests.support.pcluster_schema import concrete, load_with_official_schema

STORAGE = {"fsx": "fs-0123456789abcdef0", "no-fsx": None}


@pytest.mark.parametrize("storage", STORAGE)
@pytest.mark.parametrize("capacity", CAPACITIES)
def test_official_schema_loads_the_config(capacity: str, storage: str) -> None:
    cluster = build(capacity, STORAGE[storage], login_count=0 if storage == "no-fsx" else 1)
    loaded = load_with_official_schema(concrete(Stack.of(cluster).resolve(cluster.config)), "llm-pcluster")
    p5 = loaded.scheduling.queues[0]
    assert (
        p5.capacity_type.value
        == {"on-demand": "ONDEMAND", "reservation": "ONDEMAND", "spot": "SPOT", "capacity-block": "CAPACITY_BLOCK"}[
            capacity
        ]
    )
    assert p5.compute_resources[0].efa.enabled is True
    assert loaded.scheduling.queues[1].compute_resources[0].efa.enabled is False
    assert bool(loaded.shared_storage) is (storage == "fsx")
    assert loaded.head_node.imds.secured is True


def test_the_parallelcluster_example_loads_with_the_official_schema(example_assemblies) -> None:
    template = example_assemblies["p5-parallelcluster"].templates()["llm-pcluster-compute"]
    (resource,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::PclusterCluster"]
    loaded = load_with_official_schema(concrete(resource["Properties"]["ClusterConfiguration"]), "llm-pcluster")
    assert [q.name for q in loaded.scheduling.queues] == ["p5", "debug"]
    assert loaded.scheduling.queues[0].capacity_reservation_target.capacity_reservation_id == "cr-0abcdef0123456789"


def test_ssh_reaches_head_and_login_nodes_from_the_vpc_only(example_assemblies) -> None:
    """ParallelCluster's default is 0.0.0.0/0 (platforms.json); kiln sets the VPC's CIDR on the head and login nodes."""
    assert service_fact("parallelcluster", "ssh_allowed_ips_default").value == "0.0.0.0/0"
    template = example_assemblies["p5-parallelcluster"].templates()["llm-pcluster-compute"]
    (resource,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::PclusterCluster"]
    config = resource["Properties"]["ClusterConfiguration"]
    head = config["HeadNode"]["Ssh"]["AllowedIps"]
    (pool,) = config["LoginNodes"]["Pools"]
    assert pool["Ssh"]["AllowedIps"] == head
    # The network stack's VPC's CIDR, exported to the compute stack.
    assert list(head) == ["Fn::ImportValue"] and "CidrBlock" in head["Fn::ImportValue"]
    loaded = load_with_official_schema(concrete(config), "llm-pcluster")
    assert loaded.head_node.ssh.allowed_ips == "10.0.0.0/16"


def test_the_head_nodes_metrics_policy_is_one_the_provider_may_attach(example_assemblies) -> None:
    template = example_assemblies["p5-parallelcluster"].templates()["llm-pcluster-compute"]
    policies = {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::IAM::ManagedPolicy"}
    [(logical, policy)] = [(k, r) for k, r in policies.items() if k.startswith("MetricsWriter")]
    assert policy["Properties"]["Path"] == "/parallelcluster/"
    (cluster,) = [r for r in template["Resources"].values() if r["Type"] == "Custom::PclusterCluster"]
    attached = [
        p["Policy"] for p in cluster["Properties"]["ClusterConfiguration"]["HeadNode"]["Iam"]["AdditionalIamPolicies"]
    ]
    assert {"Ref": logical} in attached
    # The ARN IAM gives a policy on that path, against the provider's documented condition.
    arn = f"arn:aws:iam::123456789012:policy/parallelcluster/{logical}-ABCDEF"
    assert is_attachable(iam.ManagedPolicy.from_managed_policy_arn(stack("Arn"), "P", arn))


def _props(st: Stack, **changes) -> ParallelClusterProps:
    """Return minimal props in stack ST, with CHANGES."""
    settings = {
        "cluster_name": "c",
        "subnet": imported_vpc(st).private_subnets[0],
        "queues": [SlurmQueue(name="cpu", instance_type="c5.4xlarge")],
        "bootstrap": plain_bootstrap(st, "on-node-configured.sh"),
        "cluster_env": {},
        "ssh_allowed_ips": "10.0.0.0/16",
    }
    return ParallelClusterProps(**(settings | changes))


def test_a_policy_the_provider_may_not_attach_is_refused() -> None:
    st = stack("Unattachable")
    policy = iam.ManagedPolicy(st, "Mine", statements=[iam.PolicyStatement(actions=["s3:ListBucket"], resources=["*"])])
    with pytest.raises(ValueError, match="head_node_policies: got 'Unattachable/Mine'; allowed: a policy the provider"):
        _props(st, head_node_policies=[policy])
    # Every node's own (session logging's) are held to the same rule.
    every = stack("UnattachableEverywhere")
    mine = iam.ManagedPolicy(
        every, "Mine", statements=[iam.PolicyStatement(actions=["s3:ListBucket"], resources=["*"])]
    )
    with pytest.raises(ValueError, match="node_policies: got 'UnattachableEverywhere/Mine'; allowed: a policy the"):
        _props(every, node_policies=[mine])
    assert not is_attachable(iam.ManagedPolicy.from_managed_policy_arn(st, "Other", "arn:aws:iam::1:policy/team/x"))
    other = stack("Attachable")
    ours = attachable_policy(other, "Ok", statements=[iam.PolicyStatement(actions=["s3:ListBucket"], resources=["*"])])
    assert is_attachable(ours)
    assert _props(other, head_node_policies=[ours]).head_node_policies == [ours]


def test_ssh_open_to_the_internet_is_refused() -> None:
    with pytest.raises(ValueError, match="ssh_allowed_ips: got '0.0.0.0/0'; allowed: a CIDR narrower"):
        _props(stack("OpenSsh"), ssh_allowed_ips="0.0.0.0/0")


@pytest.fixture(scope="module")
def on_demand():
    cluster = build("on-demand", "fs-0123456789abcdef0")
    return cluster, Template.from_stack(Stack.of(cluster))


def test_provider_nested_stack_at_the_pinned_version(on_demand) -> None:
    cluster, template = on_demand
    (nested,) = template.find_resources("AWS::CloudFormation::Stack").values()
    url = nested["Properties"]["TemplateURL"]["Fn::Sub"]
    assert url == (
        "https://${AWS::Region}-aws-parallelcluster.s3.${AWS::Region}.${AWS::URLSuffix}"
        f"/parallelcluster/{PARALLELCLUSTER_VERSION}/templates/custom_resource/cluster.yaml"
    )


BOUNDARY = "arn:aws:iam::111111111111:policy/kiln-permissions-boundary"


def _nested_stacks(resources: dict) -> dict[str, dict]:
    """The template's nested stacks by the end of their TemplateURL (custom_resource/cluster.yaml, ...)."""
    return {
        r["Properties"]["TemplateURL"]["Fn::Sub"].split("/templates/", 1)[1]: r
        for r in resources.values()
        if r["Type"] == "AWS::CloudFormation::Stack"
    }


def test_without_a_boundary_the_provider_makes_its_own_role(on_demand) -> None:
    cluster, template = on_demand
    assert cluster.provider_role is None
    (nested,) = _nested_stacks(template.to_json()["Resources"]).values()
    assert "Parameters" not in nested["Properties"]


def test_with_a_boundary_the_provider_runs_as_kilns_role_with_the_policies_stack_bounded(tmp_path) -> None:
    """ParallelCluster's provider template makes a role without a boundary unless CustomLambdaRole names one: kiln's
    role holds what that role would (cluster.yaml's PclusterLambdaRole), from a policies stack carrying the boundary."""
    app = new_app(str(tmp_path))
    st = stack("PcBounded", app)
    cluster = ParallelCluster(st, "Cluster", _props(st, permissions_boundary=BOUNDARY))
    resources = synth_as_kiln(app, tmp_path, [st])["PcBounded"].to_json()["Resources"]
    nested = _nested_stacks(resources)
    assert set(nested) == {"custom_resource/cluster.yaml", "policies/policies.yaml"}
    assert PARALLELCLUSTER_VERSION in nested["policies/policies.yaml"]["Properties"]["TemplateURL"]["Fn::Sub"]
    assert nested["policies/policies.yaml"]["Properties"]["Parameters"] == {
        "EnableIamAdminAccess": "true",
        "PermissionsBoundaryPolicy": BOUNDARY,
    }
    role_id = logical_id(cluster.provider_role.node.default_child)
    assert nested["custom_resource/cluster.yaml"]["Properties"]["Parameters"] == {
        "CustomLambdaRole": {"Fn::GetAtt": [role_id, "Arn"]}
    }
    role = resources[role_id]["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"] == [
        {"Action": "sts:AssumeRole", "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}}
    ]
    policies = logical_id(cluster.provider_policies)
    assert json.dumps(role["ManagedPolicyArns"][0]).endswith(
        ':iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"]]}'
    )
    assert role["ManagedPolicyArns"][1:] == [
        {"Fn::GetAtt": [policies, f"Outputs.{name}"]}
        for name in (
            "ParallelClusterClusterPolicy1",
            "ParallelClusterClusterPolicy2",
            "DefaultParallelClusterIamAdminPolicy",
        )
    ]
    (inline,) = role["Policies"]
    events, bucket = inline["PolicyDocument"]["Statement"]
    assert events["Action"] == ["events:DeleteRule", "events:PutRule", "events:PutTargets", "events:RemoveTargets"]
    assert json.dumps(events["Resource"]).endswith(':rule/*"]]}')
    assert bucket["Action"] == list(PROVIDER_ROLE["bucket_actions"])
    assert [json.dumps(r).split(":s3:::")[1] for r in bucket["Resource"]] == ['pcbounded-*"]]}', 'pcbounded-*/*"]]}']
    # Its wildcards are reviewed, and cdk-nag has nothing open.
    reasons = {u.reason for u in template_wildcards({"Resources": resources}) if u.logical_id == role_id}
    assert reasons == {grant.reason for grant in acknowledgements.PCLUSTER_PROVIDER_GRANTS}
    assert nag_report(tmp_path).violations == []


def test_custom_resource_gets_name_config_and_deletion_policy(on_demand) -> None:
    cluster, template = on_demand
    (resource,) = template.find_resources("Custom::PclusterCluster").values()
    props = resource["Properties"]
    assert props["ServiceToken"] == {"Fn::GetAtt": [logical_id(cluster.provider), "Outputs.ServiceToken"]}
    assert (props["ClusterName"], props["DeletionPolicy"]) == ("llm-pcluster", "Delete")
    assert props["ClusterConfiguration"]["Scheduling"]["SlurmQueues"][0]["Networking"]["PlacementGroup"] == {
        "Enabled": True
    }


def _node_kinds(config: dict) -> dict[str, dict]:
    (pool,) = config["LoginNodes"]["Pools"]
    return {"head": config["HeadNode"], "login": pool, **{q["Name"]: q for q in config["Scheduling"]["SlurmQueues"]}}


def _manifest(cluster: ParallelCluster) -> dict:
    """The JSON the bootstrap parameter holds, each deploy-time value as TOKEN."""
    template = Template.from_stack(Stack.of(cluster))
    parameter = logical_id(cluster.bootstrap_parameter.node.default_child)
    value = template.find_resources("AWS::SSM::Parameter")[parameter]["Properties"]["Value"]
    parts = value["Fn::Join"][1] if isinstance(value, dict) else [value]
    return json.loads("".join(p if isinstance(p, str) else "TOKEN" for p in parts))


RESOLVE_KEY = f"{BOOTSTRAP_PREFIX}resolve-bootstrap-{file_sha256(RESOLVE_SCRIPT)}.sh"


def test_every_node_resolves_the_bootstrap_from_the_parameter_on_node_configured(on_demand) -> None:
    """Script is resolve-bootstrap.sh in the cluster's own bucket, named by its digest; Args name the region, the
    parameter and the role."""
    cluster, _ = on_demand
    st = Stack.of(cluster)
    config = st.resolve(cluster.config)
    parameter = logical_id(cluster.bootstrap_parameter.node.default_child)
    bucket = logical_id(cluster.bootstrap_bucket.node.default_child)
    script = {"Fn::Join": ["", ["s3://", {"Ref": bucket}, f"/{RESOLVE_KEY}"]]}
    # ParallelCluster fetches a custom action's Script only over these (platforms.json): an S3 key that never changes.
    schemes = service_fact("parallelcluster", "custom_action_script_schemes").value
    assert "s3" in schemes
    for kind, node in _node_kinds(config).items():
        action = node["CustomActions"]["OnNodeConfigured"]
        assert action["Script"] == script, kind
        role = {"head": "controller", "login": "login"}.get(kind, "worker")
        assert action["Args"] == ["us-east-1", {"Ref": parameter}, "--role", role], kind
    # The manifest in the parameter: fetch.sh and the bundle, each with its digest, and cluster.env.
    manifest = _manifest(cluster)
    fetch_url = f"s3://cdk-hnb659fds-assets-111111111111-us-east-1/{cluster.fetch_script.s3_object_key}"
    assert manifest["fetch"] == {"url": fetch_url, "sha256": file_sha256(FETCH_SCRIPT)}
    assert manifest["bundle"] == {
        "url": "s3://kiln-bundles-111111111111/bundles/node.zip",
        "entry_point": "on-node-configured.sh",
        "sha256": PLAIN_BUNDLE_SHA256,
    }
    assert manifest["env"] == {"KILN_CLUSTER_NAME": "llm-pcluster", "KILN_REGION": "us-east-1"}
    assert "S3Access" not in json.dumps(config)


def test_every_node_may_read_exactly_the_parameter_the_scripts_and_the_bundle(on_demand) -> None:
    cluster, template = on_demand
    st = Stack.of(cluster)
    config = st.resolve(cluster.config)
    read = logical_id(cluster.bootstrap_read_policy.node.default_child)
    for kind, node in _node_kinds(config).items():
        assert {"Policy": {"Ref": read}} in node["Iam"]["AdditionalIamPolicies"], kind
    properties = template.find_resources("AWS::IAM::ManagedPolicy")[read]["Properties"]
    assert properties["Path"] == "/parallelcluster/"
    parameter, objects = properties["PolicyDocument"]["Statement"]
    assert parameter["Action"] == "ssm:GetParameter"
    assert parameter["Resource"] == st.resolve(cluster.bootstrap_parameter.parameter_arn)
    assert objects["Action"] == "s3:GetObject" and len(objects["Resource"]) == 3
    bucket = logical_id(cluster.bootstrap_bucket.node.default_child)
    assert {"Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, f"/{RESOLVE_KEY}"]]} in objects["Resource"]
    keys = json.dumps(objects["Resource"])
    assert cluster.fetch_script.s3_object_key in keys
    assert "bundles/node.zip" in keys
    assert "*" not in keys.replace("${AWS::Partition}", "")


def test_the_bundles_digest_reaches_the_parameter_and_a_bundle_without_one_is_refused() -> None:
    st = stack("PcDigest")
    digest = "ab" * 32
    props = _props(st)
    bootstrap = dataclasses.replace(props.bootstrap, content_sha256=digest)
    cluster = ParallelCluster(st, "Cluster", dataclasses.replace(props, bootstrap=bootstrap))
    assert _manifest(cluster)["bundle"]["sha256"] == digest
    with pytest.raises(ValueError, match="content_sha256: got 'nope'; allowed: 64 lowercase hex digits"):
        dataclasses.replace(bootstrap, content_sha256="nope")
    with pytest.raises(ValueError, match=r"^NodeBootstrap.content_sha256: got None; allowed: 64 lowercase hex"):
        dataclasses.replace(bootstrap, content_sha256=None)
    with pytest.raises(TypeError, match="content_sha256"):
        NodeBootstrap(bucket=bootstrap.bucket, object_key="k.zip", entry_point="on-node-configured.sh")


def test_the_on_node_configured_script_is_written_by_the_stacks_deployment_alone(on_demand) -> None:
    """ParallelCluster runs the Script unchecked: it is in a bucket of the cluster's own, which the stack's
    BucketDeployment fills with resolve-bootstrap.sh, and which no other role in the stack may write."""
    cluster, template = on_demand
    st = Stack.of(cluster)
    bucket = logical_id(cluster.bootstrap_bucket.node.default_child)
    (deployment,) = template.find_resources("Custom::CDKBucketDeployment").values()
    properties = deployment["Properties"]
    assert properties["DestinationBucketName"] == {"Ref": bucket}
    assert properties["DestinationBucketKeyPrefix"] == BOOTSTRAP_PREFIX
    # The source the handler copies: one file, resolve-bootstrap.sh as it is, under the key the Script names.
    (key,) = properties["SourceObjectKeys"]
    staged = Path(st.node.root.synth().directory) / f"asset.{key.removesuffix('.zip')}"
    assert sorted(p.name for p in staged.iterdir()) == [RESOLVE_KEY.removeprefix(BOOTSTRAP_PREFIX)]
    assert (staged / RESOLVE_KEY.removeprefix(BOOTSTRAP_PREFIX)).read_bytes() == RESOLVE_SCRIPT.read_bytes()
    # The cluster (and so its first node) waits for the script.
    (resource_id,) = template.find_resources("Custom::PclusterCluster")
    depends = template.to_json()["Resources"][resource_id].get("DependsOn", [])
    assert any(d.startswith("ClusterBootstrapScripts") for d in depends), depends
    # Writers: only the deployment's handler role holds s3:PutObject on the bucket.
    handler_role = cluster.bootstrap_scripts.handler_role.node.default_child
    writers = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if any(a in ("s3:PutObject", "s3:*", "*") for a in actions) and bucket in json.dumps(statement):
                writers |= {r["Ref"] for r in policy["Properties"]["Roles"]}
    assert writers == {logical_id(handler_role)}
    assert "cdk-hnb659fds-assets" not in json.dumps(st.resolve(cluster.config)["HeadNode"]["CustomActions"])
    # And the bucket refuses object writes under the prefix to any other principal, whatever its own policies allow.
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in template.find_resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": bucket}
    ]
    (deny,) = [s for s in policy["Statement"] if s.get("Sid") == DENY_SID]
    assert deny == {
        "Sid": DENY_SID,
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "s3:PutObject",
        "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, f"/{BOOTSTRAP_PREFIX}*"]]},
        "Condition": {"ArnNotEquals": {"aws:PrincipalArn": {"Fn::GetAtt": [logical_id(handler_role), "Arn"]}}},
    }


def test_queues_drain_on_an_update_and_the_strategy_is_one_parallelcluster_knows(on_demand) -> None:
    """DRAIN lets running jobs finish before ParallelCluster replaces a changed queue's nodes (platforms.json)."""
    from pcluster.config.cluster_config import QueueUpdateStrategy

    cluster, _ = on_demand
    strategy = service_fact("parallelcluster", "queue_update_strategy").value
    assert cluster.config["Scheduling"]["SlurmSettings"]["QueueUpdateStrategy"] == strategy["kiln"] == "DRAIN"
    assert sorted(strategy["allowed"]) == sorted(s.value for s in QueueUpdateStrategy)
    with pytest.raises(ValueError, match="queue_update_strategy: got 'NOW'; allowed: COMPUTE_FLEET_STOP, DRAIN"):
        _props(stack("PcStrategy"), queue_update_strategy="NOW")
    with pytest.raises(ValueError, match=r"slurm_settings: got \['QueueUpdateStrategy'\]"):
        _props(stack("PcStrategyTwice"), slurm_settings={"QueueUpdateStrategy": "TERMINATE"})


def test_every_node_holds_ssm_agents_own_actions_not_the_managed_policy(on_demand) -> None:
    cluster, template = on_demand
    config = Stack.of(cluster).resolve(cluster.config)
    (pool,) = config["LoginNodes"]["Pools"]
    kinds = [config["HeadNode"], pool, *config["Scheduling"]["SlurmQueues"]]
    agent = Stack.of(cluster).resolve(cluster.ssm_agent_policy.managed_policy_arn)
    for kind in kinds:
        assert {"Policy": agent} in kind["Iam"]["AdditionalIamPolicies"]
    assert "AmazonSSMManagedInstanceCore" not in json.dumps(config)
    # A policy the provider's Lambda role may attach, granting exactly SSM Agent's calls (platforms.json).
    assert is_attachable(cluster.ssm_agent_policy)
    properties = template.find_resources("AWS::IAM::ManagedPolicy")[
        logical_id(cluster.ssm_agent_policy.node.default_child)
    ]["Properties"]
    heartbeat, channels = properties["PolicyDocument"]["Statement"]
    documented = service_fact("systems_manager", "instance_actions").value
    granted = sorted([heartbeat["Action"], *channels["Action"]])
    assert granted == sorted(documented["session_manager"] + documented["run_command"])
    # The heartbeat on the account's instances in the region; the channels, which take no resource, on *.
    assert heartbeat["Resource"] == "arn:aws:ec2:us-east-1:111111111111:instance/*"
    assert channels["Resource"] == "*"


def test_cdk_nag_has_no_open_finding_and_the_ssm_wildcard_is_reviewed(tmp_path) -> None:
    app = new_app(str(tmp_path))
    st = stack("PcNag", app)
    cluster = ParallelCluster(st, "Cluster", _props(st))
    template = synth_as_kiln(app, tmp_path, [st])["PcNag"]
    policy = logical_id(cluster.ssm_agent_policy.node.default_child)
    uses = [u for u in template_wildcards(template.to_json()) if u.logical_id == policy]
    assert {(u.action, u.resource) for u in uses} == {
        (action, "*") for action in acknowledgements.NODE_SSM_CHANNELS
    } | {("ssm:UpdateInstanceInformation", "arn:aws:ec2:us-east-1:111111111111:instance/*")}
    assert {u.reason for u in uses} == {grant.reason for grant in acknowledgements.NODE_SSM_GRANTS}
    assert nag_report(tmp_path).violations == []


def test_parallelcluster_secures_imds_on_head_and_login_nodes_and_sets_no_hop_limit(on_demand) -> None:
    """kiln's bootstrap leaves IMDS to ParallelCluster on the roles it restricts itself (HeadNode/Imds/Secured),
    and ParallelCluster's configuration has no hop limit to set (platforms.json, parallelcluster.*)."""
    cluster, _ = on_demand
    config = Stack.of(cluster).resolve(cluster.config)
    assert config["HeadNode"]["Imds"] == {"Secured": True}
    assert config["Imds"] == {"ImdsSupport": "v2.0"}
    assert service_fact("parallelcluster", "imds_secured_roles").value == ["controller", "login"]
    # The pinned release's schema: HeadNode/Imds takes Secured alone, Imds ImdsSupport alone.
    from pcluster.schemas.cluster_schema import ImdsSchema as HeadNodeImdsSchema
    from pcluster.schemas.common_schema import ImdsSchema

    assert set(HeadNodeImdsSchema().fields) == {"secured"}
    assert set(ImdsSchema().fields) == {"imds_support"}
    assert service_fact("parallelcluster", "launch_template_hop_limit").value is None


def test_head_node_ip_is_an_output(on_demand) -> None:
    cluster, template = on_demand
    outputs = template.find_outputs("*")
    (ip,) = [o for name, o in outputs.items() if name.startswith("ClusterHeadNodePrivateIp")]
    assert ip["Value"] == {"Fn::GetAtt": [logical_id(cluster.cluster.node.default_child), "headNode.privateIpAddress"]}


def test_config_is_a_plain_dict_users_can_read(on_demand) -> None:
    cluster, _ = on_demand
    assert isinstance(cluster.config, dict)
    assert cluster.config["Scheduling"]["Scheduler"] == "slurm"
    assert cluster.config["SharedStorage"][0]["FsxLustreSettings"]["FileSystemId"] == "fs-0123456789abcdef0"


def test_installed_schema_is_the_pinned_version() -> None:
    assert version("aws-parallelcluster") == PARALLELCLUSTER_VERSION


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"capacity": CAPACITIES["capacity-block"], "min_count": 0, "max_count": 2},
            "equal and above 0 for a capacity block",
        ),
        ({"name": "GPU"}, "queue name: got 'GPU'"),
        ({"min_count": 3, "max_count": 1}, r"min_count/max_count: got \(3, 1\)"),
    ],
)
def test_bad_queues_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SlurmQueue(**{"name": "gpu", "instance_type": "p5.48xlarge", **kwargs})


def test_a_longer_setup_stretches_the_timeouts_and_an_unknown_one_is_refused() -> None:
    st, props = build_props("on-demand", None, login_count=0)
    cluster = ParallelCluster(st, "Cluster", props)
    assert "DevSettings" not in Stack.of(cluster).resolve(cluster.config)
    timed = dataclasses.replace(props, bootstrap_timeouts={"ComputeNodeBootstrapTimeout": 4500})
    stretched = ParallelCluster(Stack.of(cluster), "Timed", timed)
    config = load_with_official_schema(concrete(Stack.of(cluster).resolve(stretched.config)), "llm-pcluster")
    assert config.dev_settings.timeouts.compute_node_bootstrap_timeout == 4500
    with pytest.raises(ValueError, match="bootstrap_timeouts: got 'ResumeTimeout'; allowed: HeadNodeBootstrapTimeout"):
        dataclasses.replace(props, bootstrap_timeouts={"ResumeTimeout": 60})
    with pytest.raises(ValueError, match="bootstrap_timeouts ComputeNodeBootstrapTimeout: got 0"):
        dataclasses.replace(props, bootstrap_timeouts={"ComputeNodeBootstrapTimeout": 0})
