"""`kiln validate`'s verdict names each group by its own name, its size and its accelerators by the catalog's kind."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kiln.cli.main import main

CASES = [
    # The newcomer's spec: the quickstart's group `gpu` moved to Trainium2, which is Neuron, not a GPU.
    ("gpu", "trn2.48xlarge", 2, "group gpu: up to 2x trn2.48xlarge with 16 Trainium2 Neuron devices each"),
    ("trn", "trn1.32xlarge", 4, "group trn: up to 4x trn1.32xlarge with 16 Trainium Neuron devices each"),
    ("inf", "inf2.xlarge", 1, "group inf: up to 1x inf2.xlarge with 1 Inferentia2 Neuron device each"),
    ("gpu", "g5.12xlarge", 2, "group gpu: up to 2x g5.12xlarge with 4 A10G GPUs each"),
    ("one", "g4dn.xlarge", 3, "group one: up to 3x g4dn.xlarge with 1 T4 GPU each"),
    ("part", "g6f.large", 1, "group part: up to 1x g6f.large with 1 L4 GPU each (0.125 of one)"),
    ("cpu", "c5.large", 8, "group cpu: up to 8x c5.large without accelerators"),
]


@pytest.mark.parametrize(("name", "instance", "count", "words"), CASES, ids=[case[1] for case in CASES])
def test_validate_names_each_group_and_its_accelerators_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture, name: str, instance: str, count: int, words: str
) -> None:
    group = {"name": name, "instance_type": instance, "max_count": count}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "compute": {"backend": "pcs", "groups": [group]}}))
    assert main(["validate", "--accept-unready", str(path)]) == 0
    verdict = capsys.readouterr().out.splitlines()[0]
    assert verdict.startswith((f"{path}: ok (pcs; {words}); ", f"{path}: valid (pcs; {words}) but NOT boot-ready"))
    assert f"{name}={count}x" not in verdict


def test_validate_lists_every_group_in_the_specs_order(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    groups = [{"name": "debug", "instance_type": "g5.12xlarge"}, {"name": "trn", "instance_type": "trn1.32xlarge"}]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "compute": {"backend": "pcs", "groups": groups}}))
    assert main(["validate", "--accept-unready", str(path)]) == 0
    verdict = capsys.readouterr().out.splitlines()[0]
    assert (
        "(pcs; group debug: up to 1x g5.12xlarge with 4 A10G GPUs each; "
        "group trn: up to 1x trn1.32xlarge with 16 Trainium Neuron devices each)"
    ) in verdict
