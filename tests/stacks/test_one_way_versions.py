"""One-way properties on synthesized examples (issue 46, item 2): `kiln diff` refuses, in one line naming the property,
both values, why and the service's page, an older Slurm version on PCS and an older or two-minors-newer Kubernetes
version on EKS; and each rule's spec field is the value the templates carry, so `kiln validate --before` and
`kiln diff` judge the same thing (platforms.json, cloudformation.one_way_properties)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from kiln.changes import one_way_rules
from kiln.spec import parse_spec
from kiln.spec.rules import software as software_rules
from tests.support.day_two import deploy_plan, example, templates
from tests.support.specs import changed

# The slow tier: each case synthesizes specs (several seconds each on 2 cores).
pytestmark = pytest.mark.slow

EKS = "https://docs.aws.amazon.com/eks/latest/userguide/update-cluster.html"
PCS = "https://docs.aws.amazon.com/pcs/latest/userguide/working-with_clusters_version_update.html"


def _write(path: Path, data: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _diff(capsys, before: str, after: str) -> tuple[int, list[str], list[str]]:
    from kiln.cli.main import main

    code = main(["diff", "--spec", after, "--before", before])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def _value(properties: dict[str, Any], path: str) -> Any:
    node: Any = properties
    for part in path.split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def test_kiln_diff_refuses_an_older_slurm_version_offline(tmp_path, capsys, monkeypatch) -> None:
    # The quickstart pins no Slurm version: it runs PCS's newest (25.11); pinning an older one is a downgrade. On a
    # day PCS still supports 25.05 (after 2026-11-30 no spec may name it).
    monkeypatch.setattr(software_rules, "today", lambda: datetime.date(2026, 6, 1))
    base = example("quickstart")
    before = _write(tmp_path / "before.yaml", base)
    after = _write(tmp_path / "after.yaml", changed(base, software__slurm="25.05"))
    code, out, err = _diff(capsys, before, after)
    assert code == 1 and err == []
    refused = [line for line in out if "Scheduler/Version" in line]
    assert len(refused) == 1, out
    assert refused[0].startswith("quickstart-compute Pcs")
    assert refused[0].endswith(
        "(AWS::PCS::Cluster) Scheduler/Version 25.11 -> 25.05: PCS moves a cluster's Slurm version only to a newer "
        f"one its current version is compatible with ({PCS}), so the update fails and rolls the deploy back; keep "
        "25.11 or a newer version"
    )
    assert out[-1].endswith("; refused by CloudFormation")


def test_kiln_diff_refuses_an_older_kubernetes_version_offline(tmp_path, capsys) -> None:
    base = example("p5-eks")
    before = _write(tmp_path / "before.yaml", changed(base, compute__kubernetes_version="1.36"))
    after = _write(tmp_path / "after.yaml", changed(base, compute__kubernetes_version="1.35"))
    code, out, err = _diff(capsys, before, after)
    assert code == 1 and err == []
    refused = [line for line in out if "(AWS::EKS::Cluster) Version" in line]
    assert refused == [
        "llm-eks-compute EksBC5472D2 (AWS::EKS::Cluster) Version 1.36 -> 1.35: EKS moves a cluster's Kubernetes "
        f"version up one minor version at a time and never back ({EKS}), so the update fails and rolls the deploy "
        "back; keep 1.36 or a newer version"
    ], out


def test_a_kubernetes_version_two_minors_up_is_refused_and_one_up_is_not() -> None:
    base = example("p5-eks")
    old, one, two = (changed(base, compute__kubernetes_version=v) for v in ("1.34", "1.35", "1.36"))
    [change] = [c for c in deploy_plan(old, two).one_way if c.type == "AWS::EKS::Cluster"]
    assert (change.before, change.after, change.remedy) == ("1.34", "1.36", "deploy 1.35 first, then 1.36")
    assert [c for c in deploy_plan(old, one).one_way if c.type == "AWS::EKS::Cluster"] == []


@pytest.mark.parametrize("stem", ["quickstart", "p5-pcs", "p5-eks", "p5-hyperpod-eks"])
def test_each_rules_spec_field_is_the_value_its_template_carries(stem: str) -> None:
    # The one table `kiln validate --before` reads specs through: a rule's spec value is what the property holds.
    data = example(stem)
    spec = parse_spec(data)
    found = 0
    for rule in one_way_rules():
        if rule.spec_value is None:
            continue
        value = spec
        for name in rule.spec_value.split("."):
            value = getattr(value, name) if value is not None else None
        carried = [
            _value(resource.get("Properties", {}), rule.property)
            for template in templates(data).values()
            for resource in template.get("Resources", {}).values()
            if resource["Type"] == rule.type
        ]
        if value is None:
            assert carried == [], (rule.type, carried)
            continue
        assert carried == [value], (rule.type, value, carried)
        found += 1
    # Each example sets a file system and one cluster whose version kiln judges.
    assert found == 2
