"""The images the driver and toolkit adoption tests boot: platform, AMI, OS and instance type, and a node for each."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kiln.bootstrap.config import NodeGroup
from kiln.bootstrap.render import render_bundle
from kiln.catalog.platforms import image_profile
from tests.support.bootstrap import PINS, pcs_config
from tests.support.node_root import (
    CLUSTER_ENV,
    Node,
    make_node,
    simulate_image,
)


@dataclasses.dataclass(frozen=True)
class Image:
    """One backend's image with one node type on it."""

    target: str
    image: str
    os: str
    instance: str

    @property
    def id(self) -> str:
        return f"{self.image}-{self.os}-{self.instance.split('.')[0]}"


IMAGES = [
    Image("parallelcluster", "parallelcluster", "ubuntu2204", "p5.48xlarge"),
    Image("parallelcluster", "parallelcluster", "al2023", "g5.12xlarge"),
    Image("pcs", "pcs-sample", "al2023", "p5.48xlarge"),
    Image("hyperpod", "hyperpod-slurm", "ubuntu2204", "p5.48xlarge"),
    Image("eks", "eks-al2023", "al2023", "p5.48xlarge"),
    Image("eks", "eks-al2023", "al2023", "trn1.32xlarge"),
    Image("eks", "hyperpod-eks", "al2023", "p5.48xlarge"),
]


def _config(case: Image, **changes):
    owned = image_profile(case.image).owned_on(case.os)
    software = dataclasses.replace(PINS, **{field: None for field in owned if field in vars(PINS)})
    if case.target == "eks":
        software = dataclasses.replace(software, nccl=None)
    settings = {
        "target": case.target,
        "image": case.image,
        "os": case.os,
        "groups": (NodeGroup(name="accel", instance_type=case.instance),),
        "software": software,
    }
    if case.target == "eks":
        settings.update(service_instance_types=(), container_runtime="containerd", exporters=())
    return pcs_config(**(settings | changes))


def _node(tmp_path: Path, case: Image, **changes) -> tuple[Node, dict[str, str]]:
    config = _config(case, **changes)
    bundle = render_bundle(config, tmp_path / "bundle").directory
    node = make_node(tmp_path / "node", bundle, {**CLUSTER_ENV, "KILN_INSTANCE_TYPE": case.instance})
    laid = simulate_image(node, case.image, case.os)
    if case.target == "hyperpod":
        path = node.root / "opt/ml/config/resource_config.json"
        path.parent.mkdir(parents=True)
        path.write_text(
            json.dumps({"InstanceGroups": [{"Name": "accel", "Instances": [{"CustomerIpAddress": "10.1.0.5"}]}]})
        )
    return node, laid


# On an AMI of the user's own (base: own) kiln owns every component, but still never puts a second copy over one.
OWN = Image("pcs", "pcs-custom", "ubuntu2204", "p5.48xlarge")
