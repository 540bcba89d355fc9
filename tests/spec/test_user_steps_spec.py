"""bootstrap.steps in the spec: the rules (names, count, roles per platform) and the scripts themselves (inside the
spec's directory, symlinks followed; a regular file of at most 256 KiB starting with '#!'), each refused by `kiln
validate` in one line `FILE:LINE: bootstrap.steps[N].FIELD: ...`, exit 2."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml

from kiln.cli.main import main
from kiln.node_config.translate import config_from_spec
from kiln.spec import SpecError, load_spec, parse_spec
from tests.support.specs import MINIMAL_SPEC

SCRIPT = "#!/bin/bash\necho ready\n"
GROUP = {"name": "gpu", "instance_type": "p5.48xlarge", "max_count": 2}
COMPUTE = {
    "pcs": {"backend": "pcs", "groups": [GROUP]},
    "parallelcluster": {"backend": "parallelcluster", "groups": [GROUP]},
    "hyperpod-slurm": {"backend": "hyperpod", "groups": [{**GROUP, "min_count": 2}]},
    "hyperpod-eks": {"backend": "hyperpod", "orchestrator": "eks", "groups": [{**GROUP, "min_count": 2}]},
    "eks": {"backend": "eks", "groups": [GROUP]},
}


def spec_text(platform: str, steps: list[dict], **compute) -> str:
    """Return a spec of PLATFORM with STEPS, one step a line (bootstrap.steps[N] is on line FIRST_STEP_LINE + N)."""
    data = {**MINIMAL_SPEC, "compute": {**COMPUTE[platform], **compute}}
    if platform in ("eks", "hyperpod-eks"):
        data["network"] = {"second_availability_zone": "us-east-1b"}
    text = yaml.safe_dump(data, sort_keys=False) + "bootstrap:\n  steps:\n"
    return text + "".join(f"  - {yaml.safe_dump(step, default_flow_style=True, width=1000)}" for step in steps)


def write(directory: Path, platform: str, steps: list[dict], **compute) -> tuple[Path, int]:
    """Write the spec into DIRECTORY; return its path and the line of bootstrap.steps[0]."""
    path = directory / "cluster.yaml"
    text = spec_text(platform, steps, **compute)
    path.write_text(text)
    return path, text.splitlines().index("  steps:") + 2


def step(name: str = "setup", path: str = "setup.sh", phase: str = "install", roles=("compute",)) -> dict:
    return {"name": name, "path": path, "phase": phase, "roles": list(roles)}


def refused(path: Path, capsys: pytest.CaptureFixture) -> str:
    """Return the one line `kiln validate PATH` refuses it with (exit 2, no traceback)."""
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in out + err
    return lines[0]


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "specs"
    directory.mkdir()
    (directory / "setup.sh").write_text(SCRIPT)
    return directory


@pytest.mark.parametrize(
    ("platform", "roles", "line"),
    [
        # ParallelCluster's head node and HyperPod's controller group are the Slurm controller; PCS runs its own.
        ("pcs", ["controller"], "roles[0]: got 'controller', but PCS runs the Slurm controller itself"),
        ("eks", ["login"], "roles[0]: got 'login', but EKS runs no Slurm, so kiln boots compute nodes only; "),
        ("eks", ["compute", "controller"], "roles[1]: got 'controller', but EKS runs no Slurm"),
        ("hyperpod-eks", ["login"], "roles[0]: got 'login', but HyperPod with EKS runs no Slurm"),
        ("parallelcluster", ["compute", "compute"], "roles[1]: names 'compute' twice: list each role once"),
    ],
)
def test_a_role_the_platform_lacks_or_named_twice_is_one_line(
    spec_dir: Path, capsys: pytest.CaptureFixture, platform: str, roles: list[str], line: str
) -> None:
    path, first = write(spec_dir, platform, [step(roles=roles)])
    assert refused(path, capsys).startswith(f"{path}:{first}: bootstrap.steps[0].{line}")


@pytest.mark.parametrize(
    ("platform", "roles"),
    [
        ("pcs", ["login", "compute"]),
        ("parallelcluster", ["controller", "login", "compute"]),
        ("hyperpod-slurm", ["controller", "login", "compute"]),
        ("hyperpod-eks", ["compute"]),
        ("eks", ["compute"]),
    ],
)
def test_every_role_the_platform_has_is_taken(
    spec_dir: Path, capsys: pytest.CaptureFixture, platform: str, roles: list[str]
) -> None:
    path, _ = write(spec_dir, platform, [step(roles=roles)])
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    # The validate lines say which kinds of node run it.
    assert "runs your steps setup (install)" in capsys.readouterr().out


@pytest.mark.parametrize("platform", ["pcs", "parallelcluster", "hyperpod-slurm"])
def test_login_without_login_nodes_is_one_line(spec_dir: Path, capsys: pytest.CaptureFixture, platform: str) -> None:
    path, first = write(spec_dir, platform, [step(roles=["login"])], login_nodes={"count": 0})
    assert refused(path, capsys) == (
        f"{path}:{first}: bootstrap.steps[0].roles[0]: got 'login', but compute.login_nodes.count is 0, so no node "
        "would run the step: set compute.login_nodes.count, or remove 'login'"
    )


def test_a_name_twice_is_one_line_at_the_second(spec_dir: Path, capsys: pytest.CaptureFixture) -> None:
    path, first = write(spec_dir, "pcs", [step(), step(phase="configure")])
    assert refused(path, capsys) == (
        f"{path}:{first + 1}: bootstrap.steps[1].name: is also the name of bootstrap.steps[0] (got 'setup'): each "
        "step's name must be unique"
    )


def test_more_than_sixteen_steps_is_one_line(spec_dir: Path, capsys: pytest.CaptureFixture) -> None:
    path, first = write(spec_dir, "pcs", [step(name=f"s{index}") for index in range(17)])
    # The list itself, on its key's line.
    assert refused(path, capsys) == f"{path}:{first - 1}: bootstrap.steps: at most 16 steps (got 17)"
    # Sixteen on login nodes, which no platform deadline bounds (on compute nodes that scale from zero, sixteen
    # install steps at kiln's 2 minutes each would pass PCS's ResumeTimeout: test_user_steps_count_in_the_boot_budget).
    path, _ = write(spec_dir, "pcs", [step(name=f"s{index}", roles=["login"]) for index in range(16)])
    assert main(["validate", str(path)]) == 0, capsys.readouterr()


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("/etc/passwd", "must be a relative path of letters, digits and . _ - below the spec's directory"),
        ("../setup.sh", "must be a relative path of letters, digits and . _ - below the spec's directory"),
        ("scripts/../../setup.sh", "must be a relative path of letters, digits and . _ - below the spec's directory"),
    ],
)
def test_an_absolute_path_or_a_parent_part_is_one_line(
    spec_dir: Path, capsys: pytest.CaptureFixture, given: str, words: str
) -> None:
    path, first = write(spec_dir, "pcs", [step(path=given)])
    assert refused(path, capsys).startswith(f"{path}:{first}: bootstrap.steps[0].path: {words}")


def test_a_symlink_out_of_the_specs_directory_is_one_line(spec_dir: Path, capsys: pytest.CaptureFixture) -> None:
    outside = spec_dir.parent / "elsewhere"
    outside.mkdir()
    (outside / "steal.sh").write_text(SCRIPT)
    (spec_dir / "setup.sh").unlink()
    (spec_dir / "setup.sh").symlink_to(outside / "steal.sh")
    path, first = write(spec_dir, "pcs", [step()])
    assert refused(path, capsys) == (
        f"{path}:{first}: bootstrap.steps[0].path: got 'setup.sh': resolves to {outside / 'steal.sh'}, outside the "
        f"spec's directory {spec_dir} (symlinks are followed); copy the script into it"
    )


def test_a_symlinked_folder_out_of_the_specs_directory_is_one_line(
    spec_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    outside = spec_dir.parent / "elsewhere"
    outside.mkdir()
    (outside / "setup.sh").write_text(SCRIPT)
    (spec_dir / "scripts").symlink_to(outside, target_is_directory=True)
    path, first = write(spec_dir, "pcs", [step(path="scripts/setup.sh")])
    line = refused(path, capsys)
    assert line.startswith(f"{path}:{first}: bootstrap.steps[0].path: got 'scripts/setup.sh': resolves to {outside}")


def test_a_symlink_inside_the_specs_directory_ships_its_target(spec_dir: Path, capsys: pytest.CaptureFixture) -> None:
    (spec_dir / "scripts").mkdir()
    (spec_dir / "scripts/setup.sh").symlink_to(spec_dir / "setup.sh")
    path, _ = write(spec_dir, "pcs", [step(path="scripts/setup.sh")])
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err
    [shipped] = config_from_spec(load_spec(path)).user_steps
    assert shipped.script == SCRIPT.encode()
    assert shipped.sha256 == hashlib.sha256(SCRIPT.encode()).hexdigest()


def _missing(directory: Path) -> str:
    return "missing.sh"


def _folder(directory: Path) -> str:
    (directory / "folder").mkdir()
    return "folder"


def _pipe(directory: Path) -> str:
    os.mkfifo(directory / "pipe")
    return "pipe"


def _large(directory: Path) -> str:
    (directory / "large.sh").write_bytes(b"#!/bin/sh\n" + b"#" * (256 * 1024))
    return "large.sh"


def _no_interpreter(directory: Path) -> str:
    (directory / "plain.sh").write_text("echo ready\n")
    return "plain.sh"


def _loop(directory: Path) -> str:
    (directory / "loop.sh").symlink_to(directory / "loop.sh")
    return "loop.sh"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_missing, "got 'missing.sh': no such file in the spec's directory {dir}"),
        (_folder, "got 'folder': is not a regular file (a directory, pipe or device); name a script"),
        (_pipe, "got 'pipe': is not a regular file (a directory, pipe or device); name a script"),
        (_large, "got 'large.sh': is 262154 bytes, allowed: at most 262144 (256 KiB)"),
        (
            _no_interpreter,
            "got 'plain.sh': does not start with '#!' (an interpreter line such as #!/bin/bash): nodes run it as a "
            "program",
        ),
        (_loop, "got 'loop.sh': cannot be resolved ("),
    ],
    ids=["missing", "folder", "pipe", "over-256-KiB", "no-interpreter-line", "symlink-loop"],
)
def test_a_script_that_cannot_be_shipped_is_one_line(
    spec_dir: Path, capsys: pytest.CaptureFixture, make, words: str
) -> None:
    name = make(spec_dir)
    path, first = write(spec_dir, "pcs", [step(path=name)])
    line = refused(path, capsys)
    assert line.startswith(f"{path}:{first}: bootstrap.steps[0].path: {words.format(dir=spec_dir)}"), line


def test_every_script_problem_is_its_own_line(spec_dir: Path, capsys: pytest.CaptureFixture) -> None:
    _no_interpreter(spec_dir)
    path, first = write(spec_dir, "pcs", [step(path="missing.sh"), step(name="ok"), step(name="b", path="plain.sh")])
    assert main(["validate", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(": ", 2)[:2] for line in lines] == [
        [f"{path}:{first}", "bootstrap.steps[0].path"],
        [f"{path}:{first + 2}", "bootstrap.steps[2].path"],
    ]


def test_kiln_bootstrap_render_refuses_the_same_line(spec_dir: Path, capsys: pytest.CaptureFixture) -> None:
    path, first = write(spec_dir, "pcs", [step(path="missing.sh")])
    assert main(["bootstrap", "render", "--spec", str(path), "--target", "pcs", "--out", str(spec_dir / "b")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"{path}:{first}: bootstrap.steps[0].path: got 'missing.sh': no such file")
    assert not (spec_dir / "b").exists()


def test_a_spec_built_in_code_reads_its_scripts_from_the_current_directory(
    spec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = {**MINIMAL_SPEC, "bootstrap": {"steps": [step(roles=["login", "compute"])]}}
    spec = parse_spec(data)
    monkeypatch.chdir(spec_dir)
    [shipped] = config_from_spec(spec).user_steps
    assert (shipped.name, shipped.phase, shipped.roles) == ("setup", "install", ("login", "worker"))
    assert shipped.script == SCRIPT.encode()
    monkeypatch.chdir(spec_dir.parent)
    with pytest.raises(SpecError) as caught:
        config_from_spec(spec)
    assert caught.value.lines_out() == [
        f"<spec>: bootstrap.steps[0].path: got 'setup.sh': no such file in the spec's directory {spec_dir.parent}"
    ]


def test_the_local_cluster_runs_login_steps_on_its_controller(spec_dir: Path) -> None:
    from kiln.bootstrap.local_target import LocalCluster

    path, _ = write(spec_dir, "pcs", [step(roles=["login", "compute"]), step(name="host", roles=["login"])])
    local = LocalCluster.from_subnet("t", str(spec_dir / "prefix"), 2, "10.77.0.0/24")
    steps = config_from_spec(load_spec(path), "local", local=local).user_steps
    assert [s.roles for s in steps] == [("controller", "worker"), ("controller",)]


def test_user_steps_count_in_the_boot_budget(spec_dir: Path, capsys: pytest.CaptureFixture) -> None:
    """kiln cannot know what a script does: it counts each install step at 2 minutes where it runs."""
    path, _ = write(spec_dir, "pcs", [step(name=f"s{index}") for index in range(5)])
    assert main(["validate", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "NOT boot-ready: 1 kind of node past their platform's deadline" in out
    minutes = {
        line.split()[0]: int(line.split("setup at boot ~")[1].split()[0])
        for line in out.splitlines()
        if "setup at boot ~" in line
    }
    # The login node runs none of them; each compute node runs all five, 2 minutes each by kiln's count.
    assert minutes["gpu"] == minutes["login"] + 10
    assert f"gpu nodes (p5.48xlarge) scale from zero, and their setup at boot takes ~{minutes['gpu']} min" in err
    assert "bake the install steps into the image (compute.image.bake: true)" in err
