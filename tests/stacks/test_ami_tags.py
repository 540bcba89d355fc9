"""A baked image's AMI carries its manifest's pins, kiln:cluster, kiln:recipe and the spec's tags: EC2 tags an AMI 50
times at most, so spec tags that leave no room are refused in one line at synthesis, and empty pins take no tag."""

from __future__ import annotations

import pytest
import yaml
from aws_cdk.assertions import Template

from kiln.catalog.limits import MAX_TAGS_PER_RESOURCE
from kiln.contracts.tags import TAG_PIN_PREFIX
from kiln.spec import SpecError
from kiln.spec.load import load_spec, parse_spec
from kiln.stacks.app import build_cluster, new_app
from tests.support.paths import ROOT

BAKED = ROOT / "examples" / "p5-pcs-baked.yaml"


def _baked(tags: dict[str, str]):
    raw = yaml.safe_load(BAKED.read_text())
    raw["tags"] = tags
    return parse_spec(raw, "baked.yaml")


def _ami_tags(spec) -> dict[str, str]:
    stacks = build_cluster(new_app(), spec, nag=False)
    template = Template.from_stack(stacks.image).to_json()
    (distribution,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::ImageBuilder::DistributionConfiguration"
    ]
    return distribution["Properties"]["Distributions"][0]["AmiDistributionConfiguration"]["AmiTags"]


def test_the_example_ami_fits_with_room_for_spec_tags_and_no_empty_pin() -> None:
    spec = load_spec(BAKED)
    tags = _ami_tags(spec)
    pins = {key: value for key, value in tags.items() if key.startswith(TAG_PIN_PREFIX)}
    assert pins and all(pins.values())
    assert len(tags) <= MAX_TAGS_PER_RESOURCE - 10


def test_spec_tags_past_the_ami_limit_are_one_line() -> None:
    room = MAX_TAGS_PER_RESOURCE - (len(_ami_tags(_baked({}))))
    fits = _baked({f"t{n}": "x" for n in range(room)})
    assert len(_ami_tags(fits)) == MAX_TAGS_PER_RESOURCE
    with pytest.raises(SpecError) as refused:
        build_cluster(new_app(), _baked({f"t{n}": "x" for n in range(room + 1)}), nag=False)
    (line,) = str(refused.value).splitlines()
    assert line.startswith("llm-baked: tags: ") and f"at most {room} tags with compute.image.bake" in line
    assert f"got {room + 1}" in line and "EC2 allows 50 per AMI" in line
