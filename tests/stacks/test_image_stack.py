"""The <name>-image stack of a baked spec, and compute stacks that boot its newest AMI on every backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kiln.catalog.platforms import service_fact
from kiln.contracts.image import image_parameter_name
from kiln.contracts.outputs import ImageOutput
from kiln.spec import parse_spec
from kiln.stacks.app import build_cluster, new_app
from kiln.stacks.ci_mode import ci_environment
from tests.support.paths import ROOT

BAKED = "p5-pcs-baked"
PARENT = "ami-0123456789abcdef0"
PARAMETER_TYPE = "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"


def resources(template: dict, kind: str) -> list[dict]:
    return [r for r in template["Resources"].values() if r["Type"] == kind]


def test_baked_example_has_an_image_stack_the_compute_stack_depends_on(example_assemblies) -> None:
    assembly = example_assemblies[BAKED]
    templates = assembly.templates()
    image, compute = templates["llm-baked-image"], templates["llm-baked-compute"]
    assert set(image["Outputs"]) >= {key.value for key in ImageOutput}
    assert image["Outputs"][ImageOutput.IMAGE_PARAMETER.value]["Value"] == image_parameter_name("llm-baked")
    (parameter,) = [p for p in compute["Parameters"].values() if p["Type"] == PARAMETER_TYPE]
    assert parameter["Default"] == "/kiln/llm-baked/image-id"
    name = next(key for key, p in compute["Parameters"].items() if p is parameter)
    amis = {json.dumps(r["Properties"]["AmiId"]) for r in resources(compute, "AWS::PCS::ComputeNodeGroup")}
    assert amis == {json.dumps({"Ref": name})}
    manifest = json.loads((assembly.outdir / "manifest.json").read_text())
    assert "llm-baked-image" in manifest["artifacts"]["llm-baked-compute"]["dependencies"]
    (recipe,) = resources(image, "AWS::ImageBuilder::ImageRecipe")
    assert recipe["Properties"]["ParentImage"] == PARENT
    # The smallest root volume of any node booting it (the login nodes' 200 GiB beside the p5s' 512): EC2 refuses a
    # launch whose volume is smaller than the AMI's snapshot (platforms.json, ec2.volume_at_least_snapshot).
    image_gib = recipe["Properties"]["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"]
    assert image_gib == 200 and service_fact("ec2", "volume_at_least_snapshot").value
    templates_gib = [
        mapping["Ebs"]["VolumeSize"]
        for template in resources(compute, "AWS::EC2::LaunchTemplate")
        for mapping in template["Properties"]["LaunchTemplateData"]["BlockDeviceMappings"]
    ]
    assert sorted(templates_gib) == [200, 512] and min(templates_gib) >= image_gib


def test_the_image_bundle_is_its_own_asset_holding_install_settings_only(example_assemblies) -> None:
    templates = example_assemblies[BAKED].templates()
    (distribution,) = resources(templates["llm-baked-image"], "AWS::ImageBuilder::DistributionConfiguration")
    tags = distribution["Properties"]["Distributions"][0]["AmiDistributionConfiguration"]["AmiTags"]
    assert tags["kiln:cluster"] == "llm-baked" and tags["team"] == "ml"
    assert tags["kiln:pin:nccl_version"] == "2.27.3-1+cuda12.9"
    # The PCS sample AMI's driver is adopted, not baked over: an empty pin takes no tag (EC2 tags an AMI 50 times).
    assert "kiln:pin:nvidia_driver_version" not in tags
    assert tags["kiln:pin:image_nvidia_driver"] == "branch:590.48.01"
    assert tags["kiln:target"] == "pcs"


def _baked(stem: str, **compute: Any) -> Any:
    data = yaml.safe_load((ROOT / "examples" / f"{stem}.yaml").read_text())
    data["compute"]["image"] = {"ami_id": PARENT, "bake": True, **compute}
    data["software"] = {k: v for k, v in data.get("software", {}).items() if k != "lock_file"}
    return parse_spec(data)


@pytest.fixture(scope="module")
def other_backends(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict]]:
    """ParallelCluster and HyperPod (Slurm) examples, baked, synthesized with cdk-nag on."""
    built = {}
    for stem in ("p5-parallelcluster", "p5-hyperpod-slurm"):
        outdir = tmp_path_factory.mktemp(stem)
        app = new_app(outdir=str(outdir))
        stacks = build_cluster(app, _baked(stem))
        app.synth()
        built[stem] = {
            s.stack_name: json.loads((outdir / f"{s.stack_name}.template.json").read_text()) for s in stacks.all()
        }
    return built


def test_parallelcluster_boots_the_baked_image(other_backends) -> None:
    templates = other_backends["p5-parallelcluster"]
    compute = templates["llm-pcluster-compute"]
    (name,) = [key for key, p in compute["Parameters"].items() if p["Type"] == PARAMETER_TYPE]
    assert f'"Ref": "{name}"' in json.dumps(compute)
    assert "llm-pcluster-image" in templates


def test_hyperpod_groups_boot_the_baked_image(other_backends) -> None:
    templates = other_backends["p5-hyperpod-slurm"]
    (compute,) = [t for n, t in templates.items() if n.endswith("-compute")]
    (name,) = [key for key, p in compute["Parameters"].items() if p["Type"] == PARAMETER_TYPE]
    (cluster,) = resources(compute, "AWS::SageMaker::Cluster")
    assert {json.dumps(g["ImageId"]) for g in cluster["Properties"]["InstanceGroups"]} == {json.dumps({"Ref": name})}


def test_a_given_ami_without_bake_is_booted_as_it_is(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "examples" / "p5-hyperpod-slurm.yaml").read_text())
    data["compute"]["image"] = {"ami_id": PARENT}
    app = new_app(outdir=str(tmp_path))
    stacks = build_cluster(app, parse_spec(data), nag=False)
    assert stacks.image is None
    app.synth()
    compute = json.loads((tmp_path / f"{stacks.compute.stack_name}.template.json").read_text())
    (cluster,) = resources(compute, "AWS::SageMaker::Cluster")
    assert {g["ImageId"] for g in cluster["Properties"]["InstanceGroups"]} == {PARENT}


def test_a_short_lived_environment_refuses_to_bake() -> None:
    spec = _baked("p5-parallelcluster")
    ci = ci_environment(spec, name="llm-pr1", created_at=None, ttl_hours=None, admin_role_arn=None)
    with pytest.raises(ValueError, match="compute.image.bake is not for a short-lived environment"):
        build_cluster(new_app(), spec, nag=False, ci=ci)
