"""No spec value runs as a command on a node: what reaches node files is checked whole and written quoted.

The values a spec may legitimately hold that mean something to a shell (^ , : = + @ % ~ in paths, NCCL
settings and versions) are rendered for every target; every env file of each bundle is then sourced by
bash in an empty directory, which must stay empty (no command ran), and every value must come back exactly.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import pytest

from kiln.bootstrap.checks import check_quotable
from kiln.bootstrap.cluster_env import check_cluster_env, cluster_env_text
from kiln.bootstrap.config import NodeGroup, SoftwarePins
from kiln.bootstrap.local_target import LocalCluster
from kiln.bootstrap.render import render_bundle
from kiln.node_config.translate import config_from_spec
from kiln.spec import parse_spec
from tests.support.bootstrap import pcs_config
from tests.support.node_root import CLUSTER_ENV, make_node
from tests.support.specs import MINIMAL_SPEC

# Legitimate values with characters special to some shell or reader, each allowed by the spec rules.
CHECKPOINT_DIR = "/fsx/ck+a@b%c=d:e,f.g_h-i"
NCCL_ENV = {"NCCL_SOCKET_IFNAME": "^docker,lo", "NCCL_KILN_PROBE": "a=b:c,d/e+f^g.h_i-j", "NCCL_EMPTY": ""}
# (enroot and pyxis take only versions kiln pins a commit for: no free text reaches a node through them.)
VERSIONS = {"nvidia_container_toolkit": "1.17.8~rc1", "nccl": "2.27.3-1+cuda12.9", "nvidia_driver": "570.172.08"}
SPEC = {
    **MINIMAL_SPEC,
    "name": "inj",
    "software": VERSIONS,
    "launcher": {"checkpoint_dir": CHECKPOINT_DIR, "nccl_env": NCCL_ENV},
}
BAKE = {"ami_id": "ami-0123456789abcdef0", "bake": True}
# Where the backend's image owns a component, only a bake may pin (and replace) it.
COMPUTE = {
    "pcs": {"image": {"base": "own", "ami_id": "ami-0123456789abcdef0"}},
    "parallelcluster": {"backend": "parallelcluster", "image": BAKE},
    "hyperpod": {
        "backend": "hyperpod",
        "groups": [{"name": "gpu", "instance_type": "p5.48xlarge", "min_count": 2}],
        "image": BAKE,
    },
    "eks": {"backend": "eks", "image": {"os": "al2023"}},
}
REPLACE = {"parallelcluster": ["nvidia_driver"], "hyperpod": ["nvidia_driver", "nvidia_container_toolkit"]}
TARGETS = (*COMPUTE, "local")
# Sources FILE with every assignment exported, then prints the environment NUL-separated.
SOURCE = 'cd "$1" && set -a && . "$2" && set +a && env -0'


def spec_for(target: str) -> dict:
    spec = copy.deepcopy(SPEC)
    if target == "eks":
        # EKS's image owns the driver, and pods bring enroot's and pyxis's part: nothing to pin there.
        spec["software"] = {}
    if target in REPLACE:
        spec["software"]["replace"] = REPLACE[target]
    # The local target renders the PCS spec's bundle for the local cluster.
    spec["compute"] |= copy.deepcopy(COMPUTE["pcs" if target == "local" else target])
    if target == "hyperpod":
        spec["compute"]["groups"][0]["max_count"] = 2
    return spec


def local_cluster() -> LocalCluster:
    return LocalCluster.from_subnet("inj", "/srv/kiln-inj", 2, "10.77.0.0/24")


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("injection")
    rendered = {}
    for target in TARGETS:
        spec = parse_spec(spec_for(target))
        config = config_from_spec(spec, "local", local=local_cluster()) if target == "local" else config_from_spec(spec)
        rendered[target] = render_bundle(config, out / target).directory
    return rendered


def env_files(bundle: Path) -> list[Path]:
    names = ("bundle.env", "cluster.env", "nccl.env", "profile.sh", "facts.env", "image-facts.env")
    return sorted(p for p in bundle.rglob("*") if p.name in names)


def source_in_bash(directory: Path, file: Path) -> dict[str, str]:
    """Return the variables bash holds after sourcing FILE in DIRECTORY, with a clean environment."""
    result = subprocess.run(
        ["bash", "-c", SOURCE, "bash", str(directory), str(file)],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        check=True,
        timeout=30,
    )
    pairs = (item.decode().split("=", 1) for item in result.stdout.split(b"\0") if item)
    return {name: value for name, value in pairs if name not in ("PWD", "SHLVL", "_", "OLDPWD", "PATH")}


def written_values(file: Path) -> dict[str, str]:
    """Return NAME=value lines of FILE as kiln's own reader (load_env_file) takes them: outer quotes off."""
    values = {}
    for line in file.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.removeprefix("export ").partition("=")
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        values[name] = value
    return values


@pytest.mark.parametrize("target", TARGETS)
def test_sourcing_every_env_file_runs_nothing_and_gives_back_every_value(
    bundles: dict[str, Path], target: str, tmp_path: Path
) -> None:
    files = env_files(bundles[target])
    assert any(f.name == "bundle.env" for f in files)
    seen: dict[str, str] = {}
    for file in files:
        got = source_in_bash(tmp_path, file)
        assert list(tmp_path.iterdir()) == [], f"sourcing {file} created files"
        assert got == written_values(file), file
        seen |= got
    assert seen["KILN_CHECKPOINT_DIR"] == CHECKPOINT_DIR
    if target != "local":
        for name, value in NCCL_ENV.items():
            assert seen[name] == value
        toolkit = VERSIONS["nvidia_container_toolkit"]
        assert seen["KILN_NVIDIA_CONTAINER_TOOLKIT_VERSION"] == (toolkit if target != "eks" else "")
        assert seen["KILN_NCCL_VERSION"] == (VERSIONS["nccl"] if target != "eks" else "")
        assert seen["KILN_NVIDIA_DRIVER_VERSION"] == (VERSIONS["nvidia_driver"] if target != "eks" else "")


def test_launcher_env_is_quoted_so_sourcing_it_only_assigns(bundles: dict[str, Path], tmp_path: Path) -> None:
    node = make_node(tmp_path / "node", bundles["pcs"], cluster_env={**CLUSTER_ENV, "KILN_CLUSTER_NAME": "inj"})
    result = node.run("configure_training_env")
    assert result.returncode == 0, result.stderr
    clean = tmp_path / "clean"
    clean.mkdir()
    got = source_in_bash(clean, node.root / "etc/kiln/launcher.env")
    assert list(clean.iterdir()) == []
    assert got["KILN_CHECKPOINT_DIR"] == CHECKPOINT_DIR
    assert got["KILN_CLUSTER_NAME"] == "inj"
    # The launcher finds the node's own nccl.env under KILN_ROOT: a job exports launcher.env to every node of the job,
    # and a node without an NCCL profile has no such file.
    assert "KILN_NCCL_ENV_FILE" not in got
    assert got["KILN_ROOT"]


def test_launcher_env_stays_inert_even_for_a_value_no_check_let_through(
    bundles: dict[str, Path], tmp_path: Path
) -> None:
    """Defense in depth: a bundle.env edited by hand still cannot make launcher.env run a command."""
    bundle = tmp_path / "bundle"
    subprocess.run(["cp", "-a", str(bundles["pcs"]), str(bundle)], check=True)
    hostile = "/fsx/x;touch${IFS}canary1$(touch canary2)`touch canary3`&&touch canary4|touch canary5 *"
    env = bundle / "bundle.env"
    lines = [
        f"KILN_CHECKPOINT_DIR='{hostile}'" if line.startswith("KILN_CHECKPOINT_DIR=") else line
        for line in env.read_text().splitlines()
    ]
    env.write_text("\n".join(lines) + "\n")
    node = make_node(tmp_path / "node", bundle)
    work = tmp_path / "work"
    work.mkdir()
    result = node.run("configure_training_env")
    assert result.returncode == 0, result.stderr
    got = source_in_bash(work, node.root / "etc/kiln/launcher.env")
    assert got["KILN_CHECKPOINT_DIR"] == hostile
    assert list(work.iterdir()) == [] and not list(node.root.rglob("canary*"))


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"checkpoint_dir": "/fsx/x;touch /tmp/p"}, "checkpoint_dir: got"),
        ({"checkpoint_dir": "/fsx/$(id)"}, "checkpoint_dir: got"),
        ({"checkpoint_dir": "/fsx/ck\n"}, "checkpoint_dir: got"),
        ({"nccl_env": {"NCCL_PROTO\n": "simple"}}, "nccl_env variable name: got"),
        ({"nccl_env": {"NCCL_DEBUG": "INFO\n"}}, "nccl_env NCCL_DEBUG: got"),
        ({"nccl_env": {"NCCL_DEBUG": "INFO;id"}}, "nccl_env NCCL_DEBUG: got"),
        ({"locked": {"https://example.com/x'y": "a" * 64}}, "locked URL: got"),
        ({"locked": {"https://example.com/x\n": "a" * 64}}, "locked URL: got"),
        ({"locked": {"https://example.com/x": "a" * 64 + "\n"}}, "locked https://example.com/x: got"),
        ({"groups": (NodeGroup(name="gpu", instance_type="p5.48xlarge\n"),)}, "unknown instance type"),
        ({"software": {"enroot": "3.5.0\n"}}, "software.enroot: got"),
        ({"software": {"slurm": "24.11;id"}}, "software.slurm: got"),
        ({"hyperpod_login_group": "login\n"}, "hyperpod_login_group: got"),
    ],
)
def test_the_bootstrap_config_refuses_what_a_spec_would(changes: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        if isinstance(changes.get("software"), dict):
            changes = {**changes, "software": SoftwarePins(**changes["software"])}
        pcs_config(**changes)


@pytest.mark.parametrize("name", ["gpu\n", "gpu-", "g;id", "gpu\u0430"])
def test_node_group_names_are_matched_whole(name: str) -> None:
    with pytest.raises(ValueError, match="node group name: got"):
        NodeGroup(name=name, instance_type="p5.48xlarge")


@pytest.mark.parametrize("value", ["a\x00b", "a\rb", "a\u2028b", "a\x1b[31m", "it's", "a\nb"])
def test_cluster_env_refuses_what_would_change_a_quoted_line(value: str) -> None:
    with pytest.raises(ValueError, match="no single quotes or newlines"):
        check_cluster_env({"KILN_CLUSTER_NAME": value})
    assert "KILN_BUCKET='${Token[TOKEN.12]}'" in cluster_env_text({"KILN_BUCKET": "${Token[TOKEN.12]}"})


@pytest.mark.parametrize("value", ["it's", "a\nb", "a\x00b", "a\u2028b", "a\tb"])
def test_bundle_env_values_must_mean_themselves_in_single_quotes(value: str) -> None:
    with pytest.raises(ValueError, match="KILN_X: got"):
        check_quotable("KILN_X", value)
    check_quotable("KILN_X", "/fsx/a b$(not run)`either`")
