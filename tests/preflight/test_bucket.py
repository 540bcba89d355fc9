"""The bucket check: a fixed data bucket name must be free or this cluster's own; an import bucket must exist."""

from __future__ import annotations

from kiln.preflight.checks import bucket
from kiln.preflight.run import run_check
from tests.preflight.conftest import client_error, make_plan, stubbed

NAME = "kiln-pf-data-test"


def test_a_generated_name_needs_no_call(aws) -> None:
    (finding,) = bucket.check(make_plan(), aws)
    assert (finding.status, finding.message) == ("ok", "CloudFormation generates its name")


def test_a_free_name_is_ok(aws) -> None:
    (finding,) = bucket.check(make_plan(storage={"bucket": {"name": NAME}}), aws)
    assert finding.line() == f"OK        bucket: storage.bucket.name {NAME}: the name is free"


def _made_by_stack(aws, stack: str):
    """S3 as it answers for a bucket CloudFormation made: it tags it (moto's CloudFormation does not)."""
    clients, stubber = stubbed(aws, "s3")
    stubber.add_response("head_bucket", {})
    tags = [{"Key": "aws:cloudformation:logical-id", "Value": "Bucket"}]
    tags.append({"Key": "aws:cloudformation:stack-name", "Value": stack})
    stubber.add_response("get_bucket_tagging", {"TagSet": tags}, {"Bucket": NAME})
    return clients, stubber


def test_the_clusters_own_bucket_is_ok_on_a_second_deploy(aws) -> None:
    clients, stubber = _made_by_stack(aws, "pf-storage")
    with stubber:
        (finding,) = bucket.check(make_plan(storage={"bucket": {"name": NAME}}), clients)
    assert (finding.status, finding.message) == ("ok", "is this cluster's own (pf-storage)")


def test_a_bucket_made_by_hand_or_by_another_stack_fails(aws) -> None:
    aws.s3.create_bucket(Bucket=NAME)
    plan = make_plan(storage={"bucket": {"name": NAME}})
    (by_hand,) = bucket.check(plan, aws)
    assert by_hand.status == "fail"
    assert by_hand.message == "already exists in this account, made outside CloudFormation: pf-storage cannot create it"
    assert "kiln never takes over a bucket it did not create" in by_hand.remedy
    clients, stubber = _made_by_stack(aws, "other-storage")
    with stubber:
        (other,) = bucket.check(plan, clients)
    assert other.status == "fail" and "made by stack other-storage" in other.message


def test_another_accounts_bucket_fails(aws) -> None:
    clients, stubber = stubbed(aws, "s3")
    stubber.add_client_error("head_bucket", **client_error("403", "Forbidden", 403))
    with stubber:
        (finding,) = bucket.check(make_plan(storage={"bucket": {"name": NAME}}), clients)
    assert finding.status == "fail" and "another account's" in finding.message


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
        (finding,) = run_check(bucket.CHECK, make_plan(storage={"bucket": {"name": NAME}}), clients)
    assert finding.status == "unchecked"
    assert (
        finding.remedy == "allow s3:GetBucketTagging (read-only) for the identity running kiln, or pass --skip bucket"
    )
