"""ParallelCluster day two: the spec before and after each change issue 33 names (a bundle's content, a software pin,
an NCCL setting, an instance type, a kiln release) deploys as an update of a cluster in use, or is refused with one
line; no change touches a node's OnNodeConfigured, and the bootstrap parameter carries the new bootstrap. With
compute.image.bake, a new baked image (read at each deploy) reaches the queues alone and deploys as a drain."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import aws_cdk
import pytest
import yaml
from aws_cdk.assertions import Template

import kiln.constructs.bootstrap_assets as bootstrap_assets
import kiln.constructs.parallelcluster as parallelcluster
from kiln.bootstrap.fetch import FETCH_SCRIPT, file_sha256
from kiln.changes.parallelcluster import UPDATE_POLICIES, cluster_configuration, config_changes, update_refusals
from kiln.spec import parse_spec
from kiln.stacks.app import build_cluster, new_app
from tests.support.constructs import logical_id
from tests.support.parallelcluster import kilns_verdict, parallelclusters_verdict
from tests.support.paths import ROOT
from tests.support.pcluster_schema import concrete, load_with_official_schema

# The slow tier (`make test-slow`; .ci/run runs both): this module takes about 13 s of test time on 2 cores.
pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples" / "p5-parallelcluster.yaml"


def _compute_config(data: dict) -> tuple[dict, dict]:
    """Synthesize spec DATA; return its cluster's configuration and the bootstrap parameter's value."""
    stacks = build_cluster(new_app(), parse_spec(data), nag=False)
    template = Template.from_stack(stacks.compute).to_json()
    cluster = stacks.compute.backend.construct
    parameter = template["Resources"][logical_id(cluster.bootstrap_parameter.node.default_child)]
    return cluster_configuration(template), parameter["Properties"]["Value"]


def _with_release_file(render):
    """The renderer of a kiln release whose bundle holds one more file."""

    def rendered(config, staging):
        bundle = render(config, staging)
        (bundle.directory / "release-notes.txt").write_text("the next release\n")
        return bundle

    return rendered


def _bundle_content(data: dict, patch: pytest.MonkeyPatch, tmp: Path) -> None:
    patch.setattr(bootstrap_assets, "render_bundle", _with_release_file(bootstrap_assets.render_bundle))


def _kiln_release(data: dict, patch: pytest.MonkeyPatch, tmp: Path) -> None:
    """The next release's fetch.sh."""
    script = tmp / "fetch.sh"
    script.write_text(FETCH_SCRIPT.read_text() + "# the next release\n")
    patch.setattr(parallelcluster, "FETCH_SCRIPT", script)


SPEC_CHANGES = {
    "bundle content": _bundle_content,
    "software pin": lambda data, patch, tmp: data.setdefault("software", {}).update(nccl="2.27.3-1+cuda12.9"),
    "NCCL setting": lambda data, patch, tmp: data["launcher"]["env"].update(NCCL_DEBUG="INFO"),
    "kiln release": _kiln_release,
    "queue instance type": lambda data, patch, tmp: data["compute"]["groups"][0].update(instance_type="p5en.48xlarge"),
    "head node instance type": lambda data, patch, tmp: data["compute"]["head_node"].update(instance_type="m5.4xlarge"),
}
# What each change does to a running cluster: nothing to its configuration (the parameter gets the new bootstrap),
# or one refusal: ParallelCluster changes a queue's instance type only with the fleet stopped, a head node's never.
SPEC_REFUSALS = {"queue instance type": "COMPUTE_FLEET_STOP", "head node instance type": "UNSUPPORTED"}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory) -> dict[str, tuple[dict, dict]]:
    """The example's configuration and parameter, before any change and after each."""
    base = yaml.safe_load(EXAMPLE.read_text())
    results = {"before": _compute_config(copy.deepcopy(base))}
    for name, change in SPEC_CHANGES.items():
        data = copy.deepcopy(base)
        with pytest.MonkeyPatch.context() as patch:
            change(data, patch, tmp_path_factory.mktemp(name.replace(" ", "-")))
            results[name] = _compute_config(data)
    return results


@pytest.mark.parametrize("name", SPEC_CHANGES)
def test_each_change_of_the_spec_deploys_as_an_update_or_is_refused_with_one_line(synthesized, name: str) -> None:
    (before, old_parameter), (after, new_parameter) = synthesized["before"], synthesized[name]
    allowed, refused = parallelclusters_verdict(before, after)
    lines, named = kilns_verdict(before, after)
    assert named == refused, lines
    assert (lines == []) is allowed
    if name in SPEC_REFUSALS:
        [line] = lines
        assert f"update policy {SPEC_REFUSALS[name]}" in line
    else:
        assert lines == [] and before == after, config_changes(before, after)
        assert new_parameter != old_parameter, "the parameter carries the change to new nodes"


def test_no_change_touches_a_nodes_on_node_configured(synthesized) -> None:
    """Script and Args of the head node, the login pool and every queue are the same before and after each change."""
    (before, _) = synthesized["before"]
    for name in SPEC_CHANGES:
        after, _ = synthesized[name]
        actions = [
            (config["HeadNode"]["CustomActions"], config["LoginNodes"]["Pools"][0]["CustomActions"])
            + tuple(q["CustomActions"] for q in config["Scheduling"]["SlurmQueues"])
            for config in (before, after)
        ]
        assert actions[0] == actions[1], name
        assert not any("OnNodeConfigured" in change.path for change in config_changes(before, after)), name


# The Script kiln releases before issue 44 gave every node: resolve-bootstrap.sh, an asset in CDK's shared bucket.
EARLIER_SCRIPT = {
    "Fn::Sub": "s3://cdk-hnb659fds-assets-${AWS::AccountId}-${AWS::Region}/"
    "1fe742f8dd718830550da1d8ec5ddc2412342808c46538684a053e539efdc893.sh"
}


def test_a_cluster_made_before_the_script_left_cdks_asset_bucket_is_told_to_be_made_anew_once(synthesized) -> None:
    """Moving the OnNodeConfigured Script into the cluster's own bucket changes it on every node: ParallelCluster
    refuses that on the head node and login pool (UNSUPPORTED) and takes it on the queues (DRAIN); kiln diff says
    which, and that this is kiln's one-time move, with what to do."""
    synthesizer = aws_cdk.DefaultStackSynthesizer
    bucket = synthesizer.DEFAULT_FILE_ASSETS_BUCKET_NAME.replace("${Qualifier}", synthesizer.DEFAULT_QUALIFIER)
    assert EARLIER_SCRIPT["Fn::Sub"].startswith(f"s3://{bucket}/"), "CDK's file-asset bucket, as aws-cdk-lib names it"
    after, _ = synthesized["before"]
    before = copy.deepcopy(after)
    actions = [before["HeadNode"], before["LoginNodes"]["Pools"][0], *before["Scheduling"]["SlurmQueues"]]
    assert all(a["CustomActions"]["OnNodeConfigured"]["Script"] != EARLIER_SCRIPT for a in actions)
    for node in actions:
        node["CustomActions"]["OnNodeConfigured"]["Script"] = EARLIER_SCRIPT
    allowed, refused = parallelclusters_verdict(before, after)
    lines, named = kilns_verdict(before, after)
    assert not allowed and named == refused
    assert {line.split(": ", 2)[1].split(" ", 1)[0] for line in lines} == {
        "HeadNode/CustomActions/OnNodeConfigured/Script",
        "LoginNodes/Pools[login]/CustomActions/OnNodeConfigured/Script",
    }
    for line in lines:
        assert "update policy UNSUPPORTED; this kiln release moves every node's OnNodeConfigured script" in line
        assert "out of CDK's shared asset bucket" in line
        assert "destroy the compute stack (data in FSx and S3 stays) and deploy anew" in line
    # Any other change of a head node's Script keeps the general line.
    moved = copy.deepcopy(after)
    moved["HeadNode"]["CustomActions"]["OnNodeConfigured"]["Script"] = "s3://elsewhere/resolve-bootstrap.sh"
    [line] = update_refusals(after, moved, "llm-pcluster")
    assert "ParallelCluster never changes it on an existing cluster" in line


def test_the_parameter_holds_the_fetch_script_and_bundle_of_this_deploy(synthesized) -> None:
    """A kiln release changes fetch.sh's digest in the parameter; a changed bundle, the bundle's digest."""

    def digests(value: dict) -> list[str]:
        parts = value["Fn::Join"][1]
        text = "".join(p for p in parts if isinstance(p, str))
        return [text.split(f'"{kind}":', 1)[1].split('"sha256":"', 1)[1][:64] for kind in ("fetch", "bundle")]

    fetch, bundle = digests(synthesized["before"][1])
    assert fetch == file_sha256(FETCH_SCRIPT)
    assert digests(synthesized["kiln release"][1])[0] != fetch
    assert digests(synthesized["kiln release"][1])[1] == bundle
    for name in ("bundle content", "software pin", "NCCL setting"):
        assert digests(synthesized[name][1])[0] == fetch and digests(synthesized[name][1])[1] != bundle, name


# ---- compute.image.bake: the newest baked AMI, read at every deploy, reaches the queues alone. ----

PARENT = "ami-0123456789abcdef0"
# The image parameter's value at two deploys: the bake the cluster was made with, and the next `kiln ami build`'s.
BAKES = ("ami-0aaaaaaaaaaaaaaaa", "ami-0bbbbbbbbbbbbbbbb")
IMAGE_PARAMETER_TYPE = "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"


@pytest.fixture(scope="module")
def baked() -> tuple[dict, str]:
    """The example with a bake on PARENT: its cluster's configuration and the image parameter's logical id."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["compute"]["image"] = {"ami_id": PARENT, "bake": True}
    stacks = build_cluster(new_app(), parse_spec(data), nag=False)
    template = Template.from_stack(stacks.compute).to_json()
    (name,) = [key for key, p in template["Parameters"].items() if p["Type"] == IMAGE_PARAMETER_TYPE]
    return cluster_configuration(template), name


def _deployed(value: Any, parameter: str, ami: str) -> Any:
    """VALUE as the provider receives it at a deploy where the image parameter resolves to AMI."""
    if value == {"Ref": parameter}:
        return ami
    if isinstance(value, dict):
        return {key: _deployed(item, parameter, ami) for key, item in value.items()}
    if isinstance(value, list):
        return [_deployed(item, parameter, ami) for item in value]
    return value


def _where(value: Any, wanted: Any, at: tuple[str, ...] = ()) -> set[str]:
    """Return the path of each place WANTED is in VALUE (list items by their Name)."""
    if value == wanted:
        return {"/".join(at)}
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            found |= _where(item, wanted, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            name = item.get("Name", index) if isinstance(item, dict) else index
            found |= _where(item, wanted, (*at[:-1], f"{at[-1]}[{name}]"))
    return found


def test_the_baked_image_reaches_the_queues_alone(baked) -> None:
    """The head and login nodes boot the official ParallelCluster AMI the bake starts from, a value no deploy
    changes; only each queue's own image names the parameter read at deploy."""
    config, parameter = baked
    assert config["Image"] == {"Os": "ubuntu2204", "CustomAmi": PARENT}
    assert "Image" not in config["HeadNode"] and "Image" not in config["LoginNodes"]["Pools"][0]
    queues = [q["Name"] for q in config["Scheduling"]["SlurmQueues"]]
    assert queues == ["p5", "debug"]
    assert _where(config, {"Ref": parameter}) == {f"Scheduling/SlurmQueues[{q}]/Image/CustomAmi" for q in queues}
    # As ParallelCluster's own configuration resolves each node's AMI.
    loaded = load_with_official_schema(concrete(_deployed(config, parameter, BAKES[0])), "llm-pcluster")
    assert loaded.head_node_ami == PARENT and loaded.login_nodes_ami == {"login": PARENT}
    assert loaded.image_dict == dict.fromkeys(queues, BAKES[0])


def test_a_new_baked_image_deploys_as_an_update_that_drains_the_queues(baked) -> None:
    """The parameter's value changes between deploys: every setting it lands in has an update policy that lets a
    running cluster take it under QueueUpdateStrategy DRAIN, and ParallelCluster's own check agrees."""
    config, parameter = baked
    before, after = (_deployed(config, parameter, ami) for ami in BAKES)
    changes = config_changes(before, after)
    assert {change.path for change in changes} == {
        "Scheduling/SlurmQueues[p5]/Image/CustomAmi",
        "Scheduling/SlurmQueues[debug]/Image/CustomAmi",
    }
    assert {UPDATE_POLICIES[change.pattern] for change in changes} == {"QUEUE_UPDATE_STRATEGY"}
    assert after["Scheduling"]["SlurmSettings"]["QueueUpdateStrategy"] == "DRAIN"
    assert update_refusals(before, after, "llm-pcluster") == []
    assert parallelclusters_verdict(before, after) == (True, set())
    # DRAIN is what lets it through: under ParallelCluster's default strategy the fleet would have to stop.
    stopped = copy.deepcopy(after)
    stopped["Scheduling"]["SlurmSettings"]["QueueUpdateStrategy"] = "COMPUTE_FLEET_STOP"
    allowed, refused = parallelclusters_verdict(before, stopped)
    assert not allowed and refused == {change.path for change in changes}
    assert len(update_refusals(before, stopped, "llm-pcluster")) == 2


def test_a_new_parent_image_needs_a_new_cluster(baked) -> None:
    """Another ami_id to bake on changes the head node's image: ParallelCluster never takes that on a cluster."""
    config, parameter = baked
    before = _deployed(config, parameter, BAKES[0])
    after = copy.deepcopy(_deployed(config, parameter, BAKES[1]))
    after["Image"]["CustomAmi"] = "ami-0cccccccccccccccc"
    lines = update_refusals(before, after, "llm-pcluster")
    assert lines == [
        f'ParallelCluster llm-pcluster: Image/CustomAmi "{PARENT}" -> "ami-0cccccccccccccccc": update policy '
        "UNSUPPORTED; ParallelCluster never changes it on an existing cluster: keep it, or delete the cluster and "
        "deploy anew"
    ]
    assert parallelclusters_verdict(before, after) == (False, {"Image/CustomAmi"})


def test_a_permissions_boundary_on_a_deployed_cluster_is_told_to_be_made_anew(synthesized) -> None:
    """A cluster deployed without a boundary (a spec without iam.permissions_boundary, or a CI environment deployed
    before kiln gave the provider a bounded role) that a deploy would give one: ParallelCluster's update takes the
    setting, but the provider can neither set a role's boundary nor, as kiln's bounded role, touch roles made without
    it, so kiln diff refuses it with the one way through."""
    before, _ = synthesized["before"]
    data = yaml.safe_load(EXAMPLE.read_text())
    data["iam"] = {"permissions_boundary": "team-boundary"}
    after, _ = _compute_config(data)
    assert parallelclusters_verdict(before, after)[0], "ParallelCluster's own check takes it (SUPPORTED)"
    [line] = update_refusals(before, after, "llm-pcluster")
    assert line.startswith("ParallelCluster llm-pcluster: Iam/PermissionsBoundary added: update policy SUPPORTED; ")
    assert "may neither set nor remove a role's permissions boundary" in line
    assert "destroy the compute stack (data in FSx and S3 stays) and deploy anew" in line
    # Taking the boundary away again is refused alike.
    [line] = update_refusals(after, before, "llm-pcluster")
    assert "Iam/PermissionsBoundary removed" in line and "keep the boundary the cluster was made with" in line
