"""Rendering: every target's bundle is clean bash, and the config, profile and CLI behave."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from kiln.bootstrap.config import NodeGroup
from kiln.bootstrap.local_target import LocalCluster, LocalNode
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.render import SCRIPTS_DIR, library_files, render_bundle
from kiln.bootstrap.steps import STEPS
from kiln.catalog import SoftwareVersions, instance_type, preset_environment
from kiln.catalog.envfile import parse_env_file
from kiln.cli.bootstrap import register
from kiln.node_config.translate import config_from_spec
from kiln.spec import load_spec
from tests.support.bootstrap import SHELLCHECK, local_config, pcs_config

# The slow tier (`make test-slow`; .ci/run runs both): this module takes over 14 s of test time on 2 cores.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def shell_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.suffix in {".sh", ".env"} or p.name == "kiln-step")


@pytest.fixture(scope="module")
def every_target(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("targets")
    specs = {
        "pcs": "p5-pcs.yaml",
        "parallelcluster": "p5-parallelcluster.yaml",
        "hyperpod": "p5-hyperpod-slurm.yaml",
        "eks": "p5-eks.yaml",
    }
    bundles = {
        target: render_bundle(config_from_spec(load_spec(EXAMPLES / name)), out / target).directory
        for target, name in specs.items()
    }
    bundles["local"] = render_bundle(local_config(), out / "local").directory
    return bundles


def test_scripts_are_shellcheck_clean():
    files = [*(SCRIPTS_DIR / name for name in library_files()), *sorted((SCRIPTS_DIR / "steps").glob("*.sh"))]
    result = subprocess.run([str(SHELLCHECK), "-x", *map(str, files)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_rendered_bundles_are_shellcheck_clean_and_parse(every_target):
    # Bundles share their copied scripts; one copy of each distinct file is enough.
    distinct = {path.read_bytes(): path for bundle in every_target.values() for path in shell_files(bundle)}
    files = sorted(distinct.values())
    assert len(files) > 20
    result = subprocess.run([str(SHELLCHECK), "-x", *map(str, files)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout
    for path in files:
        parsed = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
        assert parsed.returncode == 0, f"{path}: {parsed.stderr}"


@pytest.mark.parametrize(
    ("target", "entry"),
    [
        ("pcs", "pcs-user-data.sh"),
        ("parallelcluster", "on-node-configured.sh"),
        ("hyperpod", "on_create.sh"),
        ("eks", "eks-user-data.sh"),
        ("local", "local-node.sh"),
    ],
)
def test_each_target_has_its_entry_point(every_target, target, entry):
    path = every_target[target] / entry
    assert path.stat().st_mode & 0o111
    assert f"KILN_TARGET='{target}'" in (every_target[target] / "bundle.env").read_text()


def test_local_bundle_has_no_gpu_efa_or_container_steps(every_target):
    env = (every_target["local"] / "bundle.env").read_text()
    for step in ("install_nvidia_driver", "install_efa", "install_nccl", "install_enroot", "configure_fsx"):
        assert step not in env
    assert sorted(p.name for p in (every_target["local"] / "steps").iterdir()) == [
        "configure_code_server.sh",
        "configure_exporters.sh",
        "configure_health.sh",
        "configure_munge.sh",
        "configure_slurm.sh",
        "configure_training_env.sh",
        "install_code_server.sh",
        "install_exporters.sh",
        "install_launcher.sh",
        "install_munge.sh",
        "install_slurm.sh",
        "node_context.sh",
    ]
    assert "KILN_ARTIFACT_" not in env


@pytest.mark.parametrize("target", sorted(PROFILES))
def test_bundle_holds_exactly_the_declared_files_of_its_steps(every_target, target):
    profile = PROFILES[target]
    bundle = every_target[target]
    steps = ["node_context", *profile.install_steps, *profile.configure_steps]
    assert sorted(p.name for p in (bundle / "steps").iterdir()) == sorted(f"{step}.sh" for step in steps)
    for step in profile.steps:
        assert (bundle / step.file).read_bytes() == (SCRIPTS_DIR / step.file).read_bytes()
    env = dict(line.split("=", 1) for line in (bundle / "bundle.env").read_text().splitlines() if "=" in line)
    assert env["KILN_INSTALL_STEPS"] == f"'{' '.join(profile.install_steps)}'"
    assert env["KILN_CONFIGURE_STEPS"] == f"'{' '.join(profile.configure_steps)}'"


@pytest.mark.parametrize("target", sorted(PROFILES))
def test_bundle_env_lists_the_pins_of_each_install_step_and_of_nothing_else(every_target, target):
    values = parse_env_file((every_target[target] / "bundle.env").read_text())
    pins = {name: value for name, value in values.items() if name.startswith("KILN_PINS_")}
    expected = {f"KILN_PINS_{step.upper()}": " ".join(STEPS[step].pins) for step in PROFILES[target].install_steps}
    assert pins == expected
    for names in pins.values():
        missing = [name for name in names.split() if name not in values]
        assert missing == [], f"pins that bundle.env does not set: {missing}"


def test_pins_are_written_as_image_builds_read_them(every_target):
    values = parse_env_file((every_target["pcs"] / "bundle.env").read_text())
    assert values["KILN_PINS_INSTALL_EFA"] == "KILN_EFA_INSTALLER_VERSION KILN_IMAGE_EFA_INSTALLER KILN_IMAGE_DEVICES"
    assert values["KILN_PINS_INSTALL_LUSTRE_CLIENT"] == "KILN_LUSTRE KILN_IMAGE_LUSTRE_CLIENT"
    local = parse_env_file((every_target["local"] / "bundle.env").read_text())
    assert local["KILN_PINS_INSTALL_MUNGE"] == "KILN_SLURM_SOURCE"
    assert local["KILN_SLURM_SOURCE"] == "distro"


def test_image_facts_are_the_union_of_the_bundles_instance_types(tmp_path):
    groups = tuple(
        NodeGroup(name=f"g{index}", instance_type=name)
        for index, name in enumerate(("g5.48xlarge", "p4d.24xlarge", "trn1.32xlarge"))
    )
    bundle = render_bundle(pcs_config(groups=groups), tmp_path / "a").directory
    facts = parse_env_file((bundle / "image-facts.env").read_text())
    types = [instance_type(name) for name in ("m5.8xlarge", "g5.48xlarge", "p4d.24xlarge", "trn1.32xlarge")]
    assert facts == {
        "KILN_GPU_COUNT": "8",
        "KILN_NEURON_COUNT": "16",
        "KILN_EFA_COUNT": str(max(t.efa_interface_count for t in types)),
        "KILN_NVSWITCH": "1",
        "KILN_NVLSM": "0",
        "KILN_INSTANCE_STORAGE_GB": str(max(t.instance_storage_gb for t in types)),
        # AWS's default for a multi-card type other than the p5 and p6 classes: 2.
        "KILN_LUSTRE_EFA_INTERFACES": "2",
    }
    # Same format as one type's facts, so the bake loads it the same way.
    assert set(facts) == set(parse_env_file((bundle / "instances/g5.48xlarge/facts.env").read_text()))
    values = parse_env_file((bundle / "bundle.env").read_text())
    assert values["KILN_IMAGE_DEVICES"] == "gpu nvswitch neuron efa"
    # The order of the groups changes nothing an image holds.
    reordered = render_bundle(pcs_config(groups=groups[::-1]), tmp_path / "b").directory
    assert (reordered / "image-facts.env").read_text().splitlines()[2:] == (
        bundle / "image-facts.env"
    ).read_text().splitlines()[2:]
    again = parse_env_file((reordered / "bundle.env").read_text())
    assert {k: v for k, v in again.items() if k != "KILN_INSTANCE_TYPES"} == {
        k: v for k, v in values.items() if k != "KILN_INSTANCE_TYPES"
    }


def test_local_slurm_conf_lists_nodes_ports_and_private_paths(every_target):
    conf = (every_target["local"] / "slurm" / "slurm.conf").read_text()
    assert "NodeName=node3 NodeAddr=10.77.0.4 CPUs=2 RealMemory=2048 State=UNKNOWN" in conf
    assert "PartitionName=local Nodes=node1,node2,node3 Default=YES" in conf
    assert "SlurmctldPort=17817" in conf and "SlurmdPort=17818" in conf
    assert "ProctrackType=proctrack/linuxproc" in conf
    assert "AuthInfo=socket=@KILN_ROOT@/run/munge/munge.socket.2" in conf
    assert "SlurmdSpoolDir=@KILN_ROOT@/var/spool/slurmd/%n" in conf
    assert "/etc/slurm" not in conf.replace("@KILN_ROOT@", "")


def test_hyperpod_bundle_leaves_slurm_conf_to_hyperpods_agent(every_target):
    """HyperPod's agent writes slurm.conf (platforms.json): the bundle carries none, only pyxis's drop-in and the
    paths of the image's own files."""
    bundle = every_target["hyperpod"]
    assert [p for p in (bundle / "slurm").rglob("*") if p.is_file()] == []
    assert sorted(p.name for p in (bundle / "spank").iterdir()) == ["pyxis.conf"]
    values = parse_env_file((bundle / "bundle.env").read_text())
    assert values["KILN_SLURM_OWNS_CONFIG"] == "0"
    assert values["KILN_SLURM_DAEMONS"] == "lifecycle"
    assert values["KILN_SLURM_PLATFORM_CONF"] == "/opt/slurm/etc/slurm.conf"
    assert values["KILN_SLURM_PLUGSTACK_DIR"] == "/opt/slurm/etc/plugstack.conf.d"
    assert values["KILN_SLURM_PLUGSTACK_CONF"] == "/opt/slurm/etc/plugstack.conf"
    assert values["KILN_PLATFORM_SCRATCH_DIRS"] == "/opt/dlami/nvme /opt/sagemaker"
    # HyperPod keeps munge: no munge step and no shared directory for a key.
    assert "configure_munge" not in values["KILN_CONFIGURE_STEPS"].split()
    assert "KILN_SHARED_DIR" not in values["KILN_REQUIRED_CLUSTER_ENV"]


def test_backends_that_own_slurm_get_only_the_pyxis_drop_in(every_target):
    bundle = every_target["pcs"]
    assert [p for p in (bundle / "slurm").rglob("*") if p.is_file()] == []
    assert sorted(p.name for p in (bundle / "spank").iterdir()) == ["pyxis.conf"]
    values = parse_env_file((bundle / "bundle.env").read_text())
    # PCS reads SPANK configuration only from its own directory, and needs no plugstack.conf line.
    assert values["KILN_SLURM_PLUGSTACK_DIR"] == "/etc/aws/pcs/scheduler/slurm-25.11/plugstack.conf.d"
    assert values["KILN_SLURM_PLUGSTACK_CONF"] == ""


def test_nccl_profile_is_the_catalog_preset_plus_overrides(tmp_path):
    bundle = render_bundle(
        pcs_config(nccl_env={"NCCL_DEBUG": "INFO"}, fork_enomem=True, hugepages_2m=None), tmp_path
    ).directory
    expected = preset_environment(
        "p5.48xlarge", versions=SoftwareVersions(), fork_enomem=True, overrides={"NCCL_DEBUG": "INFO"}
    )
    lines = (bundle / "instances/p5.48xlarge/nccl.env").read_text().splitlines()
    assert dict(line.split("=", 1) for line in lines if not line.startswith("#")) == expected
    assert expected["FI_EFA_USE_HUGE_PAGE"] == "0"
    assert "export NCCL_DEBUG='INFO'" in (bundle / "instances/p5.48xlarge/profile.sh").read_text()


def test_rdmav_override_is_refused(tmp_path):
    with pytest.raises(ValueError, match="RDMAV_"):
        render_bundle(pcs_config(nccl_env={"RDMAV_FORK_SAFE": "1"}), tmp_path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"target": "slurm"}, "target: got 'slurm', allowed: pcs"),
        ({"os": "debian12"}, "os: got 'debian12' for target 'pcs'"),
        ({"groups": (NodeGroup(name="gpu", instance_type="p9.huge"),)}, "unknown instance type 'p9.huge'"),
        ({"locked": {"https://x.example/a": "abc"}}, "locked https://x.example/a: got 'abc'"),
        ({"fork_enomem": True, "hugepages_2m": 128}, "must be unset with fork_enomem"),
        ({"groups": ()}, "groups: got none for target 'pcs'"),
    ],
)
def test_config_names_what_it_got_and_what_is_allowed(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        pcs_config(**changes)


def test_local_cluster_keeps_the_host_untouched():
    with pytest.raises(ValueError, match="local.prefix: got '/'"):
        LocalCluster(prefix="/", nodes=(LocalNode(name="n1", address="10.0.0.2"),), controller_address="10.0.0.1")
    with pytest.raises(ValueError, match="slurmctld_port and slurmd_port must differ"):
        LocalCluster(
            prefix="/x",
            nodes=(LocalNode(name="n1", address="10.0.0.2"),),
            controller_address="10.0.0.1",
            slurmctld_port=7000,
            slurmd_port=7000,
        )


def test_spec_adapter_maps_backend_groups_and_pins():
    config = config_from_spec(load_spec(EXAMPLES / "p5-hyperpod-slurm.yaml"))
    assert config.target == "hyperpod"
    assert config.instance_types == ("m5.8xlarge", "m5.2xlarge", "p5.48xlarge")
    assert config.lustre and config.software.pyxis
    # HyperPod's AMI ships the driver, EFA and the Lustre client: kiln adopts them and pins none.
    assert config.image == "hyperpod-slurm"
    assert config.software.efa_installer is None and config.software.nvidia_driver is None
    on_eks = load_spec(EXAMPLES / "p5-hyperpod-eks.yaml")
    assert config_from_spec(on_eks).target == "eks"
    with pytest.raises(ValueError, match="target: got 'hyperpod' for this 'hyperpod' spec, allowed: eks, local"):
        config_from_spec(on_eks, "hyperpod")


def _cli(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kiln")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


def test_cli_renders_a_target(tmp_path, capsys):
    args = _cli(
        "bootstrap",
        "render",
        "--spec",
        str(EXAMPLES / "p5-pcs.yaml"),
        "--target",
        "pcs",
        "--out",
        str(tmp_path / "out"),
    )
    assert args.func(args) == 0
    assert capsys.readouterr().out.strip() == f"{tmp_path / 'out'}/pcs-user-data.sh"


def test_cli_local_target_renders_n_nodes(tmp_path):
    args = _cli(
        "bootstrap",
        "render",
        "--spec",
        str(EXAMPLES / "quickstart.yaml"),
        "--target",
        "local",
        "--out",
        str(tmp_path / "out"),
        "--local-nodes",
        "4",
        "--local-prefix",
        str(tmp_path / "state"),
    )
    assert args.func(args) == 0
    assert (tmp_path / "out/slurm/slurm.conf").read_text().count("NodeName=") == 4


def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys):
    args = _cli(
        "bootstrap",
        "render",
        "--spec",
        str(EXAMPLES / "p5-pcs.yaml"),
        "--target",
        "eks",
        "--out",
        str(tmp_path / "out"),
    )
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "target: got 'eks' for this 'pcs' spec" in err


def test_render_tells_what_each_hyperpod_role_runs(tmp_path, capsys):
    from kiln.cli.main import main

    assert (
        main(
            [
                "bootstrap",
                "render",
                "--spec",
                str(EXAMPLES / "p5-hyperpod-slurm.yaml"),
                "--target",
                "hyperpod",
                "--out",
                str(tmp_path / "hp"),
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert captured.out == f"{tmp_path / 'hp'}/on_create.sh\n"
    out = [line for line in captured.err.splitlines() if not line.startswith("warning:")]
    assert "  configure_slurm: see steps/configure_slurm.sh" in out
    assert not any("configure_munge" in line for line in out)
    assert out[-1] == "roles: instance group 'controller' -> controller, 'login' -> login, any other group -> worker"
    assert (
        main(
            [
                "bootstrap",
                "render",
                "--spec",
                str(EXAMPLES / "p5-hyperpod-eks.yaml"),
                "--target",
                "eks",
                "--out",
                str(tmp_path / "eks"),
            ]
        )
        == 0
    )
    eks = capsys.readouterr().err
    assert "configure_slurm" not in eks and "roles: instance group" not in eks


def _rendered_bytes(bundle: Path) -> int:
    """Return the bytes of BUNDLE's rendered files: all but kiln's scripts, the node wheel and the marker."""
    copied = {*library_files(), ".kiln-output"}
    return sum(
        p.stat().st_size
        for p in bundle.rglob("*")
        if p.is_file()
        and p.relative_to(bundle).as_posix() not in copied
        and p.parts[len(bundle.parts)] not in ("steps", "launcher")
    )


def test_the_examples_bundles_are_far_below_the_rendered_size_cap(tmp_path):
    from kiln.bootstrap.render import MAX_RENDERED_BYTES

    for example, target in (("p5-pcs", "pcs"), ("p5-parallelcluster", "parallelcluster"), ("trn1-eks", "eks")):
        bundle = render_bundle(config_from_spec(load_spec(EXAMPLES / f"{example}.yaml"), target), tmp_path / example)
        size = _rendered_bytes(bundle.directory)
        assert 5_000 < size < MAX_RENDERED_BYTES // 100, (example, size)


def test_a_bundle_past_the_cap_is_refused_before_a_byte_is_written(tmp_path, monkeypatch):
    from kiln.bootstrap import render

    out = tmp_path / "bundle"
    earlier = render_bundle(pcs_config(), out)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    monkeypatch.setattr(render, "MAX_RENDERED_BYTES", 10_000)
    with pytest.raises(render.BundleTooLarge, match=r"^bootstrap bundle: its rendered files pass 10000 bytes at "):
        render_bundle(pcs_config(nccl_env={f"NCCL_X{i}": "a" * 256 for i in range(64)}), out)
    # The earlier bundle is whole, and no staging directory was left (or made) beside it.
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"] and earlier.directory == out


def test_render_refuses_an_oversized_bundle_in_one_line(tmp_path, capsys, monkeypatch):
    from kiln.bootstrap import render
    from kiln.cli.main import main

    monkeypatch.setattr(render, "MAX_RENDERED_BYTES", 1_000)
    argv = ["bootstrap", "render", "--spec", str(EXAMPLES / "p5-pcs.yaml"), "--target", "pcs"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("kiln bootstrap render: bootstrap bundle: its rendered files pass 1000 bytes at ")
    assert list(tmp_path.iterdir()) == []


def test_render_names_the_users_own_steps_and_their_roles(tmp_path, capsys):
    from kiln.cli.main import main

    argv = ["bootstrap", "render", "--spec", str(EXAMPLES / "workshop-g6-pcs.yaml"), "--target", "pcs"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert "  user_shared_dir: your step (configure), on login nodes: see user-steps/shared_dir" in err


def test_an_alias_amplified_spec_renders_nothing(tmp_path, capsys):
    """The audit's case: 4,800 uses of one 500 KB launcher.nccl_env value rendered 1.8 GB; it is refused on reading."""
    from kiln.cli.main import main

    lines = ["name: llm", "compute: {backend: pcs, groups: [{name: gpu, instance_type: p5.48xlarge}]}"]
    lines += ["big: &v " + "a" * 500_000, "launcher:", "  nccl_env:"]
    lines += [f"    NCCL_X{i}: *v" for i in range(4800)]
    spec = tmp_path / "cluster.yaml"
    spec.write_text("\n".join(lines) + "\n")
    assert main(["bootstrap", "render", "--spec", str(spec), "--target", "pcs", "--out", str(tmp_path / "out")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{spec}:7:14: ") and "alias *v stands for 500000 characters" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("nccl_env", "words"),
    [
        ({"LD_PRELOAD": "/tmp/x.so"}, "nccl_env LD_PRELOAD: is not an NCCL, libfabric or Neuron variable"),
        ({"BASH_ENV": "/tmp/x"}, "nccl_env BASH_ENV: is not an NCCL, libfabric or Neuron variable"),
        ({"NCCL_X": "a" * 257}, "nccl_env NCCL_X: value is 257 characters; at most 256"),
        ({f"NCCL_X{i}": "1" for i in range(65)}, "nccl_env: at most 64 variables (got 65)"),
    ],
)
def test_the_config_refuses_what_would_reach_root_login_shells(tmp_path, nccl_env, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        render_bundle(pcs_config(nccl_env=nccl_env), tmp_path / "out")
    assert not (tmp_path / "out").exists()
