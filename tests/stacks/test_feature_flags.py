"""kiln's CDK feature flags: every flag CDK recommends is configured, in FEATURE_FLAGS and cdk.json alike; a cluster
deployed before kiln set them takes them as an update; the ones kept at the old behaviour are kept for a reason that
still holds; and the examples synthesize without a warning the user cannot act on."""

from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from kiln.contracts.tags import TAG_CLUSTER, TAG_ENVIRONMENT
from kiln.stacks import FEATURE_FLAGS
from tests.support.day_two import assembly, deploy_plan, example, templates
from tests.support.paths import EXAMPLES, ROOT
from tests.support.specs import changed

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

STEMS = [path.stem for path in EXAMPLES]
CREATE_LOGS = "@aws-cdk/aws-lambda:useCdkManagedLogGroup"
EXPLICIT_STACK_TAGS = "@aws-cdk/core:explicitStackTags"
STRENGTH = "@aws-cdk/core:defaultCrossStackReferences"
# Where kiln does not follow CDK's recommendation; each has a test of its reason (the strength's: test_day_two).
KEPT_AT_OLD_BEHAVIOUR = {CREATE_LOGS: False, EXPLICIT_STACK_TAGS: False, STRENGTH: "strong"}
# The flags kiln set before it set CDK's recommended ones: every cluster deployed since was built with these.
EARLIER_FLAGS = (
    "@aws-cdk/aws-ec2:restrictDefaultSecurityGroup",
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy",
    "@aws-cdk/core:enablePartitionLiterals",
    "@aws-cdk/aws-iam:minimizePolicies",
    STRENGTH,
)
# What the cdk CLI prints from an assembly's metadata.
PRINTED = ("aws:cdk:info", "aws:cdk:warning", "aws:cdk:error")


def recommended_flags() -> dict[str, Any]:
    """Return the flags `cdk init` writes into cdk.json, read from the installed aws-cdk-lib."""
    found = importlib.util.find_spec("aws_cdk")
    assert found is not None and found.origin is not None
    (tarball,) = (Path(found.origin).parent / "_jsii").glob("aws-cdk-lib@*.jsii.tgz")
    with tarfile.open(tarball) as package:
        member = package.extractfile("package/recommended-feature-flags.json")
        assert member is not None, f"{tarball.name} has no recommended-feature-flags.json"
        return json.load(member)


def flag_report(outdir: Path) -> dict[str, dict[str, Any]]:
    """Return aws-cdk-lib's feature-flag report in the assembly at OUTDIR (what `cdk flags` reads)."""
    manifest = json.loads((outdir / "manifest.json").read_text())
    (report,) = [a for a in manifest["artifacts"].values() if a["type"] == "cdk:feature-flag-report"]
    return report["properties"]["flags"]


def stack_tags(outdir: Path) -> dict[str, dict[str, str]]:
    """Return the tags each stack of the assembly at OUTDIR is deployed with (the stack's own, not its resources')."""
    manifest = json.loads((outdir / "manifest.json").read_text())
    return {
        name: artifact["properties"].get("tags", {})
        for name, artifact in manifest["artifacts"].items()
        if artifact["type"] == "aws:cloudformation:stack"
    }


def printed_messages(outdir: Path) -> list[str]:
    """Return the info, warning and error messages the cdk CLI prints for the assembly at OUTDIR."""
    manifest = json.loads((outdir / "manifest.json").read_text())
    lines = []
    for artifact in manifest["artifacts"].values():
        metadata = dict(artifact.get("metadata", {}))
        if "additionalMetadataFile" in artifact:
            metadata.update(json.loads((outdir / artifact["additionalMetadataFile"]).read_text()))
        for path, entries in metadata.items():
            lines += [f"{entry['type']} {path}: {entry['data']}" for entry in entries if entry["type"] in PRINTED]
    report = outdir / "validation-report.json"
    if report.exists():
        for plugin in json.loads(report.read_text())["pluginReports"]:
            if plugin["pluginName"] != "AwsSolutions":
                lines += [f"{plugin['pluginName']}: {item['ruleName']}" for item in plugin.get("violations", [])]
    return lines


def test_every_flag_cdk_init_writes_is_set_at_the_recommended_value_or_kept_for_a_reason() -> None:
    recommended = recommended_flags()
    missing = sorted(set(recommended) - set(FEATURE_FLAGS))
    assert missing == [], (
        f"aws-cdk-lib recommends flags kiln does not set (judge each: kiln/stacks/feature_flags.py): {missing}"
    )
    differing = {key: FEATURE_FLAGS[key] for key, value in recommended.items() if FEATURE_FLAGS[key] != value}
    assert differing == KEPT_AT_OLD_BEHAVIOUR


def test_cdk_json_sets_the_same_flags_in_the_same_order() -> None:
    context = json.loads((ROOT / "cdk.json").read_text()).get("context", {})
    expected = json.dumps({"context": FEATURE_FLAGS}, indent=2)
    assert list(context.items()) == list(FEATURE_FLAGS.items()), (
        "cdk.json's context must equal kiln.stacks.feature_flags.FEATURE_FLAGS (the cdk CLI's context overrides the "
        f"App's):\n{expected}"
    )


@pytest.mark.parametrize("stem", STEMS)
def test_the_cdk_cli_finds_no_flag_unconfigured(example_assemblies, stem: str) -> None:
    report = flag_report(example_assemblies[stem].outdir)
    # The cdk CLI's count ("N feature flags are not configured"): unset, and unset behaves unlike the recommendation.
    unconfigured = [
        name
        for name, flag in report.items()
        if "userValue" not in flag
        and flag.get("unconfiguredBehavesLike", {}).get("v2", False) != flag.get("recommendedValue")
    ]
    assert unconfigured == []
    assert {name: flag["userValue"] for name, flag in report.items() if "userValue" in flag} == FEATURE_FLAGS


@pytest.mark.parametrize("stem", STEMS)
def test_examples_synthesize_without_a_message(example_assemblies, stem: str) -> None:
    assert printed_messages(example_assemblies[stem].outdir) == []


@pytest.mark.parametrize("stem", STEMS)
def test_a_cluster_deployed_with_the_earlier_flags_takes_kiln_s_flags_as_an_update(stem: str) -> None:
    data = example(stem)
    earlier = {name: None for name in FEATURE_FLAGS if name not in EARLIER_FLAGS}
    result = deploy_plan(data, data, before_context=earlier)
    assert result.findings() == []
    # Not even a create: a resource a flag adds may take a name something outside the stack holds.
    moves = {
        f"{stack} {logical_id}: {action}"
        for stack, actions in result.actions.items()
        for logical_id, action in actions.items()
        if action not in ("same", "update")
    }
    assert moves == set()


def ci_example() -> dict[str, Any]:
    """Return p5-hyperpod-eks as a short-lived environment of itself (the EKS kubectl provider, a bucket deployment,
    the reaper: CDK's own functions, and the stack tags the reaper reads)."""
    return changed(example("p5-hyperpod-eks"), ci__ttl_hours=2)


def test_cdk_managed_function_log_groups_would_take_names_lambda_already_holds() -> None:
    # Why useCdkManagedLogGroup stays off: CDK's own functions in a deployed cluster have run (the kubectl provider,
    # the bucket deployment), so Lambda made their /aws/lambda/<name> log groups; creating them again fails.
    deployed = templates(ci_example())
    flipped = templates(ci_example(), {CREATE_LOGS: True})
    taken = []
    for stack, template in flipped.items():
        functions = {lid for lid, r in deployed[stack]["Resources"].items() if r["Type"] == "AWS::Lambda::Function"}
        for logical_id, resource in template["Resources"].items():
            if resource["Type"] != "AWS::Logs::LogGroup" or logical_id in deployed[stack]["Resources"]:
                continue
            name = json.dumps(resource["Properties"].get("LogGroupName"))
            taken += [logical_id for function in functions if name == _lambda_log_group(function)]
    assert len(taken) >= 2, taken


def _lambda_log_group(function: str) -> str:
    return json.dumps({"Fn::Join": ["", ["/aws/lambda/", {"Ref": function}]]})


def test_explicit_stack_tags_would_take_the_environment_tag_the_reaper_deletes_by_off_every_stack() -> None:
    # Why explicitStackTags stays off: the reaper deletes only stacks tagged as its environment's
    # (kiln_reaper.teardown.environment_stacks); without the tag it would leave the environment running.
    kept = stack_tags(assembly(ci_example()))
    assert kept and all(TAG_ENVIRONMENT in tags and TAG_CLUSTER in tags for tags in kept.values())
    dropped = stack_tags(assembly(ci_example(), {EXPLICIT_STACK_TAGS: True}))
    assert set(dropped) == set(kept)
    assert all(TAG_ENVIRONMENT not in tags and TAG_CLUSTER not in tags for tags in dropped.values())
