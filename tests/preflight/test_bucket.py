"""The bucket check: what a deploy does with a fixed data bucket name (creates, updates or attaches it, or fails
because it exists), and whether the data repository bucket exists.

S3 answers through a Stubber where the bucket carries CloudFormation's aws: tags (no caller may set those, moto's
S3 included); moto's CloudFormation says whether the stack those tags name still exists.
"""

from __future__ import annotations

import json

import pytest

from kiln.preflight.checks import bucket
from kiln.preflight.plan import plan_for
from kiln.preflight.run import run_check
from kiln.spec import parse_spec
from tests.support.fake_aws import ACCOUNT, REGION
from tests.support.preflight import BASE_SPEC, client_error, make_plan, merged, stubbed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

NAME = "kiln-pf-data-test"
NAMED = {"bucket": {"name": NAME}}
ATTACHED = {"bucket": {"name": NAME, "existing": True}}
# Any template: moto makes the stack, and the bucket's tags name it.
TEMPLATE = json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})


def test_a_generated_name_needs_no_call(aws) -> None:
    (finding,) = bucket.check(make_plan(), aws)
    assert (finding.status, finding.message) == ("ok", "CloudFormation generates its name")


def test_a_free_name_is_created(aws) -> None:
    (finding,) = bucket.check(make_plan(storage=NAMED), aws)
    assert finding.line() == f"OK        bucket: storage.bucket.name {NAME}: the name is free: a deploy creates it"


def _stack(aws, name: str, *, deleted: bool = False) -> str:
    """Return the id of a stack NAME made in moto (and deleted, if DELETED)."""
    stack_id = aws.cloudformation.create_stack(StackName=name, TemplateBody=TEMPLATE)["StackId"]
    if deleted:
        aws.cloudformation.delete_stack(StackName=name)
    return stack_id


def _made_by(aws, stack: str, stack_id: str, *, auto_delete: bool = False):
    """S3 as it answers for a bucket CloudFormation made: it tags it with the stack's name and id."""
    clients, stubber = stubbed(aws, "s3")
    stubber.add_response("head_bucket", {})
    tags = [
        {"Key": "aws:cloudformation:logical-id", "Value": "Data2D4B752F"},
        {"Key": "aws:cloudformation:stack-name", "Value": stack},
        {"Key": "aws:cloudformation:stack-id", "Value": stack_id},
    ]
    if auto_delete:
        tags.append({"Key": "aws-cdk:auto-delete-objects", "Value": "true"})
    stubber.add_response("get_bucket_tagging", {"TagSet": tags}, {"Bucket": NAME})
    return clients, stubber


def test_the_clusters_own_bucket_is_updated_on_a_second_deploy(aws) -> None:
    clients, stubber = _made_by(aws, "pf-storage", _stack(aws, "pf-storage"))
    with stubber:
        (finding,) = bucket.check(make_plan(storage=NAMED), clients)
    assert (finding.status, finding.message) == ("ok", "is this cluster's own (pf-storage): a deploy updates it")


def test_a_bucket_kept_by_a_destroyed_stack_fails_and_says_to_attach_it(aws) -> None:
    # cdk destroy kept it (Retain); the same spec deployed again would have CloudFormation create it: "already exists".
    clients, stubber = _made_by(aws, "pf-storage", _stack(aws, "pf-storage", deleted=True))
    with stubber:
        (finding,) = bucket.check(make_plan(storage=NAMED), clients)
    assert finding.status == "fail"
    assert finding.message == (
        "already exists in this account, kept when its stack pf-storage was deleted: CloudFormation cannot create it "
        "in pf-storage, so a deploy fails"
    )
    assert finding.remedy.startswith("set storage.bucket.existing: true to attach it")


def test_a_new_stack_of_the_same_name_does_not_own_the_bucket_its_predecessor_kept(aws) -> None:
    old = _stack(aws, "pf-storage", deleted=True)
    _stack(aws, "pf-storage")
    clients, stubber = _made_by(aws, "pf-storage", old)
    with stubber:
        (finding,) = bucket.check(make_plan(storage=NAMED), clients)
    assert finding.status == "fail" and "kept when its stack pf-storage was deleted" in finding.message


def test_a_bucket_made_by_hand_or_by_another_stack_fails(aws) -> None:
    aws.s3.create_bucket(Bucket=NAME)
    plan = make_plan(storage=NAMED)
    (by_hand,) = bucket.check(plan, aws)
    assert by_hand.status == "fail"
    assert by_hand.message == (
        "already exists in this account, made outside CloudFormation: CloudFormation cannot create it in pf-storage, "
        "so a deploy fails"
    )
    clients, stubber = _made_by(aws, "other-storage", _stack(aws, "other-storage"))
    with stubber:
        (other,) = bucket.check(plan, clients)
    assert other.status == "fail" and "made by stack other-storage" in other.message


def test_another_accounts_bucket_fails(aws) -> None:
    clients, stubber = stubbed(aws, "s3")
    stubber.add_client_error("head_bucket", **client_error("403", "Forbidden", 403))
    with stubber:
        (finding,) = bucket.check(make_plan(storage=NAMED), clients)
    assert finding.status == "fail" and "another account's" in finding.message


def test_an_attached_bucket_must_exist(aws) -> None:
    (missing,) = bucket.check(make_plan(storage=ATTACHED), aws)
    assert (missing.status, missing.message) == (
        "fail",
        "does not exist: storage.bucket.existing attaches a bucket, it creates none",
    )
    aws.s3.create_bucket(Bucket=NAME)
    (present,) = bucket.check(make_plan(storage=ATTACHED), aws)
    assert (present.status, present.message) == (
        "ok",
        "exists (made outside CloudFormation): a deploy attaches it, and kiln neither changes nor deletes it",
    )


def test_a_kept_bucket_is_attached(aws) -> None:
    clients, stubber = _made_by(aws, "pf-storage", _stack(aws, "pf-storage", deleted=True))
    with stubber:
        (finding,) = bucket.check(make_plan(storage=ATTACHED), clients)
    assert finding.status == "ok"
    assert finding.message.startswith("exists (kept when its stack pf-storage was deleted): a deploy attaches it")


def test_attaching_the_live_stacks_own_bucket_made_with_retain_false_fails(aws) -> None:
    # Dropped from the stack's template, a bucket without DeletionPolicy Retain is emptied and deleted.
    clients, stubber = _made_by(aws, "pf-storage", _stack(aws, "pf-storage"), auto_delete=True)
    with stubber:
        (finding,) = bucket.check(make_plan(storage=ATTACHED), clients)
    assert finding.status == "fail" and "which empties and deletes it" in finding.message
    clients, stubber = _made_by(aws, "pf-storage", _stack(aws, "pf-storage2"))
    with stubber:
        (kept,) = bucket.check(make_plan(storage=ATTACHED), clients)
    assert kept.status == "ok"


def test_an_attached_bucket_this_identity_cannot_list_is_a_warning(aws) -> None:
    clients, stubber = stubbed(aws, "s3")
    stubber.add_client_error("head_bucket", **client_error("403", "Forbidden", 403))
    with stubber:
        (finding,) = bucket.check(make_plan(storage=ATTACHED), clients)
    assert finding.status == "warn" and "cannot list it (403)" in finding.message


def test_an_environment_whose_bucket_is_left_over_is_told_to_delete_it(aws) -> None:
    spec = parse_spec(merged(BASE_SPEC, {"region": REGION}))
    plan = plan_for(spec, spec_path="spec.yaml", region=REGION, environment="pf-pr1", account=ACCOUNT)
    aws.s3.create_bucket(Bucket=plan.bucket_name)
    (finding,) = bucket.check(plan, aws)
    assert finding.status == "fail" and finding.message.startswith("already exists")
    assert finding.remedy == "delete it (`kiln leftovers` prints how), or choose another environment name"


def test_the_data_repository_bucket_must_exist_and_be_listable(aws) -> None:
    plan = make_plan(storage={"lustre": {"data_repository": {"import_path": "s3://pf-datasets/tokens"}}})
    _, missing = bucket.check(plan, aws)
    assert (missing.status, missing.message) == ("fail", "does not exist")
    assert missing.subject == "storage.lustre.data_repository.import_path bucket pf-datasets"
    aws.s3.create_bucket(Bucket="pf-datasets")
    _, present = bucket.check(plan, aws)
    assert present.status == "ok"
    clients, stubber = stubbed(aws, "s3")
    stubber.add_client_error("head_bucket", **client_error("403", "Forbidden", 403))
    with stubber:
        _, forbidden = bucket.check(plan, clients)
    assert forbidden.status == "warn" and "s3:ListBucket" in forbidden.remedy


def test_access_denied_reading_tags_names_the_action(aws) -> None:
    clients, stubber = stubbed(aws, "s3")
    stubber.add_response("head_bucket", {})
    stubber.add_client_error("get_bucket_tagging", **client_error("AccessDenied", status=403))
    with stubber:
        (finding,) = run_check(bucket.CHECK, make_plan(storage=NAMED), clients)
    assert finding.status == "unchecked"
    assert (
        finding.remedy == "allow s3:GetBucketTagging (read-only) for the identity running kiln, or pass --skip bucket"
    )


def test_access_denied_reading_the_stack_names_the_action(aws) -> None:
    clients, s3 = _made_by(aws, "pf-storage", "pf-storage")
    clients, cloudformation = stubbed(clients, "cloudformation")
    cloudformation.add_client_error("describe_stacks", **client_error("AccessDenied", status=403))
    with s3, cloudformation:
        (finding,) = run_check(bucket.CHECK, make_plan(storage=NAMED), clients)
    assert finding.status == "unchecked"
    assert finding.remedy == (
        "allow cloudformation:DescribeStacks (read-only) for the identity running kiln, or pass --skip bucket"
    )
