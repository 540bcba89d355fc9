"""The README's construct example runs as written and builds a PCS cluster from plain props."""

from __future__ import annotations

import re

from aws_cdk.assertions import Template

from tests.conftest import ROOT
from tests.constructs.conftest import stack


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
