"""The README's construct examples run as written: a PCS cluster from plain props, and an EKS cluster grown with its
add_* methods."""

from __future__ import annotations

import json
import re

from aws_cdk.assertions import Template

from kiln.catalog.kubernetes import NODE_GROUP_LABEL
from tests.support.constructs import stack
from tests.support.paths import ROOT


def test_readme_construct_example_synthesizes() -> None:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Using the constructs in your own CDK app") :]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)[:1]
    st = stack("ReadmeExample")
    exec(compile(code, "README.md", "exec"), {"self": st})  # noqa: S102 - the README's own example
    template = Template.from_stack(st)
    template.resource_count_is("AWS::PCS::Cluster", 1)
    template.resource_count_is("AWS::PCS::ComputeNodeGroup", 1)
    (launch_template,) = template.find_resources("AWS::EC2::LaunchTemplate").values()
    data = launch_template["Properties"]["LaunchTemplateData"]
    assert len(data["NetworkInterfaces"]) == 32
    assert "GroupName" in data["Placement"]


def test_readme_eks_example_adds_a_node_group_and_a_manifest() -> None:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Using the constructs in your own CDK app") :]
    code = next(block for block in re.findall(r"```python\n(.*?)```", section, flags=re.S) if "add_node_group" in block)
    st = stack("ReadmeEksExample")
    exec(compile(code, "README.md", "exec"), {"self": st})  # noqa: S102 - the README's own example
    template = Template.from_stack(st)
    groups = template.find_resources("AWS::EKS::Nodegroup").values()
    # The system group, the props' group and the one added after.
    assert sorted(g["Properties"]["Labels"][NODE_GROUP_LABEL] for g in groups) == ["debug", "gpu", "system"]
    manifests = template.find_resources("Custom::AWSCDK-EKS-KubernetesResource").values()
    texts = [m["Properties"]["Manifest"] for m in manifests if isinstance(m["Properties"]["Manifest"], str)]
    objects = [(o["kind"], o["metadata"]["name"]) for text in texts for o in json.loads(text)]
    assert ("Namespace", "team") in objects
