"""IAM wildcards are acknowledged pair by pair from the reviewed list; checkov exceptions reach what they name."""

from __future__ import annotations

import json
import re

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from kiln.constructs import acknowledgements
from kiln.constructs.acknowledgements import CheckovSkip, WildcardGrant
from kiln.constructs.hyperpod import HyperPodCluster, HyperPodClusterProps, HyperPodInstanceGroup
from kiln.constructs.review import SkipReviewedCheckovChecks, review_wildcards
from kiln.contracts.iam_wildcards import wildcard_pairs
from kiln.stacks.app import new_app
from kiln.stacks.synth import nag_report
from tests.support.constructs import ENV, imported_vpc, plain_bootstrap

DESCRIBE = WildcardGrant(("ec2:DescribeVpcs",), r"\*", "Describe takes no resource scope.")
OBJECTS = WildcardGrant(("s3:GetObject",), r"{bucket}/logs/\*", "Reads one prefix.")


def _pairs(*statements: dict) -> list[tuple[str, str]]:
    return wildcard_pairs({"Statement": [{"Effect": "Allow", **s} for s in statements]})


def test_a_reviewed_pair_is_acknowledged_with_its_reason() -> None:
    pairs = _pairs(
        {"Action": "ec2:DescribeVpcs", "Resource": "*"},
        {"Action": "s3:GetObject", "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": ["B", "Arn"]}, "/logs/*"]]}},
    )
    review = review_wildcards(pairs, [DESCRIBE, OBJECTS], {"bucket": "<B.Arn>"})
    assert review.unreviewed == []
    assert review.reviewed == {
        "Describe takes no resource scope.": [("ec2:DescribeVpcs", "*")],
        "Reads one prefix.": [("s3:GetObject", "<B.Arn>/logs/*")],
    }
    assert {(f.rule, f.reason) for f in review.accepted} == {
        ("AwsSolutions-IAM5[Resource::*]", "Describe takes no resource scope."),
        ("AwsSolutions-IAM5[Resource::<B.Arn>/logs/*]", "Reads one prefix."),
    }


@pytest.mark.parametrize(
    "statement",
    [
        {"Action": "iam:*", "Resource": "*"},
        {"Action": "iam:PassRole", "Resource": "*"},
        {"Action": "ec2:DeleteNetworkInterface", "Resource": "*"},
    ],
)
def test_an_unreviewed_pair_blocks_every_finding_it_shares(statement: dict) -> None:
    # The Resource::* finding is shared with the reviewed Describe pair: it must stay open.
    pairs = _pairs({"Action": "ec2:DescribeVpcs", "Resource": "*"}, statement)
    review = review_wildcards(pairs, [DESCRIBE], {})
    assert review.unreviewed == [(statement["Action"], "*")]
    assert review.accepted == []


def test_a_grant_for_another_bucket_or_prefix_does_not_cover() -> None:
    pairs = _pairs({"Action": "s3:GetObject", "Resource": "<Other.Arn>/logs/*"})
    assert review_wildcards(pairs, [OBJECTS], {"bucket": "<B.Arn>"}).unreviewed == [
        ("s3:GetObject", "<Other.Arn>/logs/*")
    ]
    pairs = _pairs({"Action": "s3:GetObject", "Resource": "<B.Arn>/*"})
    assert review_wildcards(pairs, [OBJECTS], {"bucket": "<B.Arn>"}).unreviewed == [("s3:GetObject", "<B.Arn>/*")]


def test_every_reviewed_grant_has_a_reason_and_exact_actions() -> None:
    grants = [*acknowledgements.HYPERPOD_ROLE_GRANTS, *acknowledgements.LIFECYCLE_HANDLER_GRANTS]
    assert all(g.reason.strip() and g.actions for g in grants)
    assert not any(a in ("*", "ec2:*", "s3:*", "iam:*") for g in grants for a in g.actions)


def _hyperpod_app(tmp_path, extra: iam.PolicyStatement | None) -> cdk.App:
    app = new_app(str(tmp_path))
    st = cdk.Stack(app, "HyperPod", env=ENV)
    vpc = imported_vpc(st)
    cluster = HyperPodCluster(
        st,
        "Cluster",
        HyperPodClusterProps(
            cluster_name="llm-hp",
            vpc=vpc,
            subnet=vpc.private_subnets[0],
            instance_groups=[
                HyperPodInstanceGroup(name="controller", instance_type="m5.8xlarge", count=1, role="controller"),
                HyperPodInstanceGroup(name="p5", instance_type="p5.48xlarge", count=2),
            ],
            lifecycle=plain_bootstrap(st, "on_create.sh"),
            cluster_env={"KILN_CLUSTER_NAME": "llm-hp"},
        ),
    )
    if extra is not None:
        cluster.role.add_to_policy(extra)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def test_a_new_wildcard_on_the_hyperpod_role_fails_synthesis(tmp_path) -> None:
    extra = iam.PolicyStatement(actions=["iam:*"], resources=["*"])
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        _hyperpod_app(tmp_path, extra).synth()
    open_findings = {v.split(" at ")[0] for v in nag_report(tmp_path).violations}
    assert open_findings == {"AwsSolutions-IAM5[Action::iam:*]", "AwsSolutions-IAM5[Resource::*]"}


# --- checkov exceptions --------------------------------------------------------------------------------------


def _checkov_app(tmp_path, skips: tuple[CheckovSkip, ...]) -> dict:
    app = new_app(str(tmp_path))
    st = cdk.Stack(app, "Scanned", env=ENV)
    outer = Construct(st, "Outer")
    s3.Bucket(outer, "AccessLogs")
    s3.Bucket(st, "AccessLogsElsewhere")
    already = s3.CfnBucket(st, "Tagged")
    already.add_metadata("checkov", {"skip": [{"id": "CKV_AWS_21", "comment": "kept"}]})
    cdk.Aspects.of(st).add(SkipReviewedCheckovChecks(skips))
    app.synth()
    return json.loads((tmp_path / "Scanned.template.json").read_text())["Resources"]


def _skips(resources: dict, prefix: str) -> list[dict]:
    (resource,) = [r for lid, r in resources.items() if lid.startswith(prefix) and r["Type"] == "AWS::S3::Bucket"]
    return resource.get("Metadata", {}).get("checkov", {}).get("skip", [])


def test_a_checkov_exception_reaches_exactly_the_resources_its_paths_name(tmp_path) -> None:
    skips = (
        CheckovSkip("CKV_AWS_18", "AWS::S3::Bucket", (r"(.+/)?AccessLogs/Resource",), "a log bucket"),
        CheckovSkip("CKV_AWS_18", "AWS::S3::BucketPolicy", (r"Tagged",), "another type"),
        CheckovSkip("CKV_AWS_18", "AWS::S3::Bucket", (r"Tagged",), "named whole"),
    )
    resources = _checkov_app(tmp_path, skips)
    assert _skips(resources, "OuterAccessLogs") == [{"id": "CKV_AWS_18", "comment": "a log bucket"}]
    # The pattern is matched whole: AccessLogsElsewhere/Resource is not AccessLogs/Resource.
    assert _skips(resources, "AccessLogsElsewhere") == []
    # Recorded skips are kept, and the type must match as well as the path.
    assert _skips(resources, "Tagged") == [
        {"id": "CKV_AWS_21", "comment": "kept"},
        {"id": "CKV_AWS_18", "comment": "named whole"},
    ]


def test_a_checkov_exception_without_a_reason_is_refused() -> None:
    with pytest.raises(ValueError, match="a non-empty reason for every checkov skip"):
        SkipReviewedCheckovChecks((CheckovSkip("CKV_AWS_18", "AWS::S3::Bucket", ("X",), "  "),))


def test_every_listed_checkov_exception_names_a_type_and_valid_whole_path_patterns() -> None:
    for skip in acknowledgements.CHECKOV_SKIPS:
        assert re.fullmatch(r"CKV_AWS_\d+", skip.check) and re.fullmatch(r"AWS::\w+::\w+", skip.resource_type)
        assert skip.paths and all(re.compile(path) for path in skip.paths)
