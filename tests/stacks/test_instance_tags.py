"""Issue 46 item 6: every instance, volume and network interface kiln's compute launches carries the spec's tags and
kiln:cluster, on every backend, and a tags change deploys as an update.

No stack tag reaches them (the spec's stay off the stacks, kiln.stacks.app), so each backend says them itself: PCS and
EKS in their launch templates' TagSpecifications, ParallelCluster in its configuration's Tags. HyperPod launches its
instances itself and takes no tags for them: the cluster carries the tags, a boundary the README states.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from kiln.catalog.limits import (
    KILN_ADDED_TAGS_MAX,
    KILN_OWN_TAGS_MAX,
    MAX_SPEC_TAGS,
    PARALLELCLUSTER_INSTANCE_TAGS,
    PARALLELCLUSTER_MAX_CONFIG_TAGS,
)
from kiln.catalog.platforms import service_fact
from kiln.changes.parallelcluster import UPDATE_POLICIES, cluster_configuration, update_refusals
from kiln.cli.diff import backend_refusals
from kiln.contracts.tags import TAG_CLUSTER
from kiln.stacks.ci_mode import CiEnvironment
from tests.support.day_two import assert_updates, deploy_plan, example, templates
from tests.support.parallelcluster import kilns_verdict, parallelclusters_verdict
from tests.support.pcluster_schema import concrete, load_with_official_schema
from tests.support.specs import changed, spec_problems

pytestmark = pytest.mark.slow

TAGS = {"team": "ml", "cost-center": "42"}
RETAGGED = {"team": "research", "owner": "platform"}
LAUNCHED = ["instance", "volume", "network-interface"]


def _tagged(stem: str, tags: Mapping[str, str]) -> dict[str, Any]:
    return changed(example(stem), tags=dict(tags))


def _compute(data: Mapping[str, Any]) -> dict[str, Any]:
    return templates(data)[f"{data['name']}-compute"]


def _resources(template: Mapping[str, Any], kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] == kind:
            yield logical_id, resource


def _launch_tags(resource: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Return {resource type: {key: value}} of a launch template's TagSpecifications."""
    specs = resource["Properties"]["LaunchTemplateData"].get("TagSpecifications", [])
    return {spec["ResourceType"]: {tag["Key"]: tag["Value"] for tag in spec["Tags"]} for spec in specs}


def _template_ref(value: Any) -> str:
    """Return the logical id of the launch template a node group names ({"Ref": id})."""
    assert isinstance(value, dict) and set(value) == {"Ref"}, value
    return value["Ref"]


def test_the_launch_tag_resource_types_are_the_three_every_node_has() -> None:
    assert service_fact("ec2", "launch_template_tag_resource_types").value == LAUNCHED


def test_every_pcs_node_carries_the_specs_tags_and_kiln_cluster() -> None:
    data = _tagged("p5-pcs", TAGS)
    compute = _compute(data)
    templates_by_id = dict(_resources(compute, "AWS::EC2::LaunchTemplate"))
    groups = dict(_resources(compute, "AWS::PCS::ComputeNodeGroup"))
    # The login group and each compute group: every node PCS launches comes from one of these templates.
    assert len(groups) == len(data["compute"]["groups"]) + 1
    used = {_template_ref(g["Properties"]["CustomLaunchTemplate"]["TemplateId"]) for g in groups.values()}
    assert used == set(templates_by_id)
    for resource in templates_by_id.values():
        assert _launch_tags(resource) == dict.fromkeys(LAUNCHED, {TAG_CLUSTER: data["name"], **TAGS})


def test_every_eks_node_carries_the_specs_tags_and_kiln_cluster() -> None:
    data = _tagged("p5-eks", TAGS)
    compute = _compute(data)
    templates_by_id = dict(_resources(compute, "AWS::EC2::LaunchTemplate"))
    groups = dict(_resources(compute, "AWS::EKS::Nodegroup"))
    # The system group and each accelerated group, each with its own template.
    assert len(groups) == len(data["compute"]["groups"]) + 1
    used = {_template_ref(g["Properties"]["LaunchTemplate"]["Id"]) for g in groups.values()}
    assert used == set(templates_by_id)
    for resource in templates_by_id.values():
        tags = _launch_tags(resource)
        assert list(tags) == LAUNCHED and all(t == tags["instance"] for t in tags.values())
        # The system group's carry kiln's node-group and cluster tags besides (kiln ci run, kiln connect).
        assert tags["instance"].items() >= {TAG_CLUSTER: data["name"], **TAGS}.items()


def test_hyperpod_eks_system_nodes_carry_the_tags_and_the_cluster_carries_them_for_its_own() -> None:
    data = _tagged("p5-hyperpod-eks", TAGS)
    compute = _compute(data)
    [(_, system)] = _resources(compute, "AWS::EC2::LaunchTemplate")
    assert _launch_tags(system)["volume"].items() >= {TAG_CLUSTER: data["name"], **TAGS}.items()
    [(_, cluster)] = _resources(compute, "AWS::SageMaker::Cluster")
    assert {t["Key"]: t["Value"] for t in cluster["Properties"]["Tags"]} == {TAG_CLUSTER: data["name"], **TAGS}


def test_hyperpod_slurm_launches_no_node_of_kilns_and_its_cluster_carries_the_tags() -> None:
    """HyperPod launches its instances itself and takes tags for the cluster only (the README's boundary)."""
    data = _tagged("p5-hyperpod-slurm", TAGS)
    compute = _compute(data)
    assert not list(_resources(compute, "AWS::EC2::LaunchTemplate"))
    [(_, cluster)] = _resources(compute, "AWS::SageMaker::Cluster")
    assert {t["Key"]: t["Value"] for t in cluster["Properties"]["Tags"]} == {TAG_CLUSTER: data["name"], **TAGS}


def test_parallelclusters_configuration_tags_its_nodes_with_the_specs_tags_and_kiln_cluster() -> None:
    data = _tagged("p5-parallelcluster", TAGS)
    config = cluster_configuration(_compute(data))
    assert config is not None
    assert config["Tags"] == [
        {"Key": key, "Value": value} for key, value in sorted({TAG_CLUSTER: data["name"], **TAGS}.items())
    ]
    # As ParallelCluster's official schema reads them: the Tags its templates give each node's instance and volumes.
    loaded = load_with_official_schema(concrete(config), data["name"])
    assert {tag.key: tag.value for tag in loaded.get_tags()} == {TAG_CLUSTER: data["name"], **TAGS}
    # A Tags change: ParallelCluster's update takes it outside the us-iso regions.
    assert {path: UPDATE_POLICIES[path] for path in UPDATE_POLICIES if path.startswith("Tags")} == {
        "Tags[Key]": "SUPPORTED_UNLESS_ADC",
        "Tags[Key]/Key": "UNSUPPORTED",
        "Tags[Key]/Value": "SUPPORTED_UNLESS_ADC",
    }


@pytest.mark.parametrize("stem", ["p5-pcs", "p5-eks", "p5-parallelcluster", "p5-hyperpod-slurm"])
def test_a_tags_change_deploys_as_an_update_on_every_backend(stem: str) -> None:
    before, after = _tagged(stem, TAGS), _tagged(stem, RETAGGED)
    plan = assert_updates(before, after)
    compute = f"{before['name']}-compute"
    launch = [lid for lid, _ in _resources(templates(after)[compute], "AWS::EC2::LaunchTemplate")]
    # Each launch template takes the new tags as a new version, in place.
    assert {plan.actions[compute][lid] for lid in launch} <= {"update"}
    assert backend_refusals(templates(before), templates(after)) == []


def test_a_tags_change_rolls_eks_nodes_within_their_budgets() -> None:
    plan = deploy_plan(_tagged("p5-eks", TAGS), _tagged("p5-eks", RETAGGED))
    assert plan.findings() == [] and plan.rolls, plan.notes()


def test_a_parallelcluster_made_before_its_config_had_tags_takes_them_in_an_update() -> None:
    after = templates(_tagged("p5-parallelcluster", TAGS))
    before = copy.deepcopy(after)
    for template in before.values():
        if (config := cluster_configuration(template)) is not None:
            config.pop("Tags")
    assert backend_refusals(before, after) == []


def test_parallelclusters_own_check_takes_a_tags_change_and_kiln_judges_it_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = cluster_configuration(_compute(_tagged("p5-parallelcluster", TAGS)))
    assert config is not None
    # ParallelCluster's check reads the region it runs in (the provider's: the cluster's).
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    after = copy.deepcopy(config)
    after["Tags"] = [{"Key": TAG_CLUSTER, "Value": "llm-pcluster"}, {"Key": "team", "Value": "research"}]
    allowed, refused = parallelclusters_verdict(config, after)
    lines, named = kilns_verdict(config, after)
    assert allowed and refused == set() and lines == [] and named == set()


def test_in_an_adc_region_a_tags_change_is_refused_as_parallelcluster_does(monkeypatch: pytest.MonkeyPatch) -> None:
    config = cluster_configuration(_compute(_tagged("p5-parallelcluster", TAGS)))
    assert config is not None
    before = {**copy.deepcopy(config), "Region": "us-iso-east-1"}
    after = {**copy.deepcopy(before), "Tags": [{"Key": TAG_CLUSTER, "Value": "llm-pcluster"}]}
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-iso-east-1")
    allowed, refused = parallelclusters_verdict(before, after)
    lines, named = kilns_verdict(before, after)
    assert not allowed and named == refused and refused
    assert all("SUPPORTED_UNLESS_ADC" in line for line in update_refusals(before, after, "llm-pcluster"))


def test_the_tag_bound_counts_parallelclusters_own_tags_and_kilns_in_a_short_lived_environment() -> None:
    from datetime import datetime, timezone

    from pcluster.constants import MAX_TAGS_COUNT

    assert len(service_fact("parallelcluster", "instance_tags").value) == PARALLELCLUSTER_INSTANCE_TAGS
    environment = CiEnvironment(name="e", cluster="c", created_at=datetime.now(timezone.utc), ttl_hours=2)
    assert len(environment.tags("compute")) == KILN_OWN_TAGS_MAX
    assert KILN_ADDED_TAGS_MAX == PARALLELCLUSTER_INSTANCE_TAGS + KILN_OWN_TAGS_MAX
    # ParallelCluster's own bound on its configuration's Tags, which hold kiln's, the spec's and the provider's one.
    assert MAX_TAGS_COUNT == PARALLELCLUSTER_MAX_CONFIG_TAGS
    assert MAX_SPEC_TAGS == min(50 - KILN_ADDED_TAGS_MAX, MAX_TAGS_COUNT - KILN_OWN_TAGS_MAX - 1) == 35


def test_kiln_validate_refuses_more_tags_than_a_parallelcluster_node_can_carry_in_one_line() -> None:
    [line] = spec_problems(_tagged("p5-parallelcluster", {f"k{i}": "v" for i in range(MAX_SPEC_TAGS + 1)}))
    assert line.startswith("x.yaml: tags: at most 35 tags (got 36)") and "ParallelCluster takes at most 40" in line
    assert spec_problems(_tagged("p5-parallelcluster", {f"k{i}": "v" for i in range(MAX_SPEC_TAGS)})) == []


def test_parallelcluster_refuses_more_tags_than_its_configuration_takes_with_its_providers() -> None:
    import dataclasses

    from tests.support.parallelcluster import build_props

    _, props = build_props("on-demand", None, login_count=0)
    assert dataclasses.replace(props, tags={f"k{i}": "v" for i in range(39)}).tags
    with pytest.raises(ValueError, match="tags: got 40; allowed: at most 39"):
        dataclasses.replace(props, tags={f"k{i}": "v" for i in range(40)})
