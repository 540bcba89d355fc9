"""code-server on the EKS examples (EKS and HyperPod with EKS), synthesized through app.py: the pod is there, no
security group rule opens its port, and adding or removing it later is an update.

The pod itself (security context, volumes, placement): tests/constructs/test_eks_code_server.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kiln.catalog.code_server import CODE_SERVER_DEPLOYMENT, CODE_SERVER_NAMESPACE, CODE_SERVER_PORT, pod_home
from kiln.spec import load_spec
from tests.support.code_server import _ingress_rules, _opens
from tests.support.day_two import assert_updates, example, templates
from tests.support.paths import EXAMPLES
from tests.support.specs import DELETE, changed

EKS_EXAMPLES = [
    path.stem
    for path in EXAMPLES
    if (spec := load_spec(path)).compute.backend == "eks" or spec.effective_orchestrator == "eks"
]
# The EKS examples that run code-server: one per EKS platform.
WITH_CODE_SERVER = ["p5-eks", "p5-hyperpod-eks"]


def _text(value: Any) -> str:
    """Render a CloudFormation string, its tokens as placeholders (a manifest's tokens are values, never keys)."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_text(part) for part in parts)
    return "TOKEN"


def _objects(template: dict) -> list[dict]:
    return [
        obj
        for resource in template["Resources"].values()
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        for obj in json.loads(_text(resource["Properties"]["Manifest"]))
    ]


def test_the_eks_examples_are_the_ones_expected() -> None:
    assert sorted(EKS_EXAMPLES) == ["p5-eks", "p5-hyperpod-eks", "trn1-eks"]
    for stem in WITH_CODE_SERVER:
        assert example(stem)["code_server"] == {}


@pytest.mark.parametrize("stem", WITH_CODE_SERVER)
def test_each_eks_platform_runs_the_pod_in_its_compute_stack(example_assemblies, stem: str) -> None:
    assembly = example_assemblies[stem]
    assert assembly.returncode == 0, assembly.stderr
    name = example(stem)["name"]
    objects = _objects(assembly.templates()[f"{name}-compute"])
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    assert (deployment["metadata"]["namespace"], deployment["metadata"]["name"]) == (
        CODE_SERVER_NAMESPACE,
        CODE_SERVER_DEPLOYMENT,
    )
    [server] = deployment["spec"]["template"]["spec"]["containers"]
    assert f"127.0.0.1:{CODE_SERVER_PORT}" in server["args"]
    assert {m.get("subPath") for m in server["volumeMounts"]} >= {pod_home(name)}


@pytest.mark.parametrize("stem", EKS_EXAMPLES)
def test_no_security_group_rule_of_an_eks_example_opens_code_servers_port(example_assemblies, stem: str) -> None:
    templates = example_assemblies[stem].templates()
    assert templates
    checked = 0
    for stack, template in templates.items():
        for name, rule, group in _ingress_rules(template):
            checked += 1
            assert not _opens(rule, group, CODE_SERVER_PORT), f"{stack}: {name} opens {CODE_SERVER_PORT}: {rule}"
    # The examples do have rules (Lustre's, EFA's own): the walk found them.
    assert checked >= 3


def test_the_port_check_sees_a_rule_that_would_open_it() -> None:
    group = {"Fn::GetAtt": ["Sg", "GroupId"]}
    assert _opens({"IpProtocol": "tcp", "FromPort": 8080, "ToPort": 8080, "CidrIp": "10.0.0.0/16"}, group, 8080)
    assert _opens({"IpProtocol": "tcp", "FromPort": 1024, "ToPort": 65535, "CidrIp": "10.0.0.0/8"}, group, 8080)
    assert _opens({"IpProtocol": "-1", "CidrIp": "0.0.0.0/0"}, group, 8080)
    assert _opens({"IpProtocol": "-1", "SourceSecurityGroupId": {"Fn::GetAtt": ["Other", "GroupId"]}}, group, 8080)
    assert not _opens({"IpProtocol": "-1", "SourceSecurityGroupId": group}, group, 8080)
    assert not _opens({"IpProtocol": "tcp", "FromPort": 988, "ToPort": 1023, "CidrIp": "10.0.0.0/16"}, group, 8080)
    assert not _opens({"IpProtocol": "udp", "FromPort": 8080, "ToPort": 8080, "CidrIp": "10.0.0.0/16"}, group, 8080)


def test_adding_and_removing_code_server_later_is_an_update_of_its_kubernetes_objects_only() -> None:
    with_it = example("p5-eks")
    without = changed(with_it, code_server=DELETE)
    types = {
        (stack, name): resource["Type"]
        for data in (with_it, without)
        for stack, template in templates(data).items()
        for name, resource in template["Resources"].items()
    }
    for before, after, action in ((without, with_it, "create"), (with_it, without, "delete")):
        result = assert_updates(before, after)
        touched = {
            (stack, name): what
            for stack, actions in result.actions.items()
            for name, what in actions.items()
            if what != "same"
        }
        # One manifest resource (namespace, volume claim, Deployment), created or deleted; nothing else moves.
        assert list(touched.values()) == [action], touched
        assert {types[key] for key in touched} == {"Custom::AWSCDK-EKS-KubernetesResource"}
