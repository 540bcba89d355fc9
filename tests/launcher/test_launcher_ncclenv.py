"""NCCL/EFA presets per instance type, and who wins: the user's environment, overrides, presets."""

from __future__ import annotations

import json

import pytest

from kiln.launcher.errors import UsageError
from kiln.launcher.ncclenv import apply, parse_overrides, plan
from tests.support.launcher import run_launcher


def values(nccl_plan) -> dict[str, str]:
    return nccl_plan.to_set()


def test_p5_gets_the_catalog_preset_and_nothing_legacy():
    result = plan("p5.48xlarge", environ={})
    assert values(result) == {"NCCL_SOCKET_IFNAME": "^docker,lo,veth"}
    assert result.wanted["NCCL_SOCKET_IFNAME"][1] == "preset p5.48xlarge"


def test_hyperpod_names_work():
    assert values(plan("ml.p5.48xlarge", environ={})) == values(plan("p5.48xlarge", environ={}))


def test_old_efa_software_turns_on_legacy_knobs():
    env = {"KILN_AWS_OFI_NCCL_VERSION": "1.5.0", "KILN_LIBFABRIC_VERSION": "1.16.1amzn1.0"}
    result = values(plan("p4d.24xlarge", environ=env))
    assert result["FI_PROVIDER"] == "efa"
    assert result["NCCL_PROTO"] == "simple"
    assert result["FI_EFA_USE_DEVICE_RDMA"] == "1"


def test_pcie_gpus_and_fork_enomem():
    assert values(plan("g5.12xlarge", environ={}))["NCCL_SHM_USE_CUDA_MEMCPY"] == "1"
    assert "FI_EFA_USE_HUGE_PAGE" not in values(plan("p5.48xlarge", environ={}))
    assert values(plan("p5.48xlarge", environ={"KILN_FORK_ENOMEM": "1"}))["FI_EFA_USE_HUGE_PAGE"] == "0"


def test_no_instance_type_applies_no_preset_and_says_so():
    result = plan(None, environ={}, overrides={"NCCL_DEBUG": "WARN"})
    assert values(result) == {"NCCL_DEBUG": "WARN"}
    assert result.notes == ("no instance type known: no catalog preset applied",)


def test_unknown_instance_type_applies_no_preset_and_says_so():
    result = plan("p5.48xlarg", environ={})
    assert values(result) == {}
    assert "unknown instance type 'p5.48xlarg'" in result.notes[0]
    assert "p5.48xlarge" in result.notes[0]


def test_override_beats_preset_and_user_environment_beats_both():
    env = {"NCCL_SOCKET_IFNAME": "ens5"}
    result = plan("g5.12xlarge", environ=env, overrides={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_SHM_USE_CUDA_MEMCPY": "0"})
    assert values(result) == {"NCCL_SHM_USE_CUDA_MEMCPY": "0"}
    assert result.kept["NCCL_SOCKET_IFNAME"] == {"value": "ens5", "instead_of": "eth0", "source": "override"}
    assert result.wanted["NCCL_SHM_USE_CUDA_MEMCPY"] == ("0", "override")


def test_apply_never_clobbers():
    result = plan("g5.12xlarge", environ={})
    # The user exports a variable after planning: apply still leaves it alone.
    environ = {"NCCL_SOCKET_IFNAME": "mine"}
    applied = apply(result, environ)
    assert environ["NCCL_SOCKET_IFNAME"] == "mine"
    assert applied == {"NCCL_SHM_USE_CUDA_MEMCPY": "1"}
    assert environ["NCCL_SHM_USE_CUDA_MEMCPY"] == "1"


def test_flag_overrides_beat_kiln_nccl_env():
    merged = parse_overrides(["NCCL_DEBUG=INFO", "NCCL_ALGO=Ring"], json.dumps({"NCCL_DEBUG": "WARN", "X": 1}))
    assert merged == {"NCCL_DEBUG": "INFO", "NCCL_ALGO": "Ring", "X": "1"}


@pytest.mark.parametrize(
    ("pairs", "document", "message"),
    [
        (["NCCL_DEBUG"], None, "NAME=VALUE"),
        (["=x"], None, "NAME=VALUE"),
        ([], "{not json", "not JSON"),
        ([], "[1, 2]", "JSON object"),
    ],
)
def test_bad_overrides(pairs, document, message):
    with pytest.raises(UsageError, match=message):
        parse_overrides(pairs, document)


def test_rdmav_is_forbidden_as_override_and_flagged_in_the_environment():
    with pytest.raises(UsageError, match="RDMAV_"):
        plan("p5.48xlarge", environ={}, overrides={"RDMAV_FORK_SAFE": "1"})
    result = plan("p5.48xlarge", environ={"RDMAV_FORK_SAFE": "1"})
    assert any("RDMAV_FORK_SAFE" in note for note in result.notes)


def test_cli_plan_shows_preset_override_and_kept_variable(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    env = {
        "KILN_INSTANCE_TYPE": "g5.12xlarge",
        "NCCL_SOCKET_IFNAME": "ens5",
        "KILN_NCCL_ENV": json.dumps({"NCCL_DEBUG": "WARN"}),
    }
    done = run_launcher(["--nproc-per-node", "1", "--nccl-env", "NCCL_DEBUG=INFO", "--dry-run", str(script)], env=env)
    assert done.returncode == 0, done.stderr
    nccl = json.loads(done.stdout)["nccl_env"]
    assert nccl["set"] == {
        "NCCL_SHM_USE_CUDA_MEMCPY": {"value": "1", "source": "preset g5.12xlarge"},
        "NCCL_DEBUG": {"value": "INFO", "source": "override"},
    }
    assert nccl["kept_from_environment"]["NCCL_SOCKET_IFNAME"]["value"] == "ens5"


@pytest.mark.parametrize("name", ["LD_PRELOAD", "BASH_ENV", "PATH", "PYTHONPATH", "KILN_STEP", "OMP_NUM_THREADS"])
def test_an_override_outside_nccls_and_libfabrics_families_is_refused(name):
    with pytest.raises(
        UsageError, match=rf"^'{name}': is not an NCCL, libfabric or Neuron variable: names start with NCCL_"
    ):
        plan("p5.48xlarge", environ={}, overrides={name: "x"})


def test_overrides_are_bounded_like_the_specs():
    most = {f"NCCL_X{i}": "1" for i in range(64)}
    assert set(most) <= set(plan("p5.48xlarge", environ={}, overrides=most).to_set())
    with pytest.raises(UsageError, match=r"^--nccl-env/KILN_NCCL_ENV: at most 64 variables \(got 65\)$"):
        plan("p5.48xlarge", environ={}, overrides={**most, "NCCL_Y": "1"})
    with pytest.raises(UsageError, match=r"value is 257 characters; at most 256"):
        plan("p5.48xlarge", environ={}, overrides={"NCCL_X": "a" * 257})


def test_a_launcher_value_need_not_be_shell_plain():
    # The launcher sets overrides in the job's environment, never through a shell: NCCL's %h and %p pass here,
    # though the spec (whose values go into files shells read) refuses them.
    result = plan("p5.48xlarge", environ={}, overrides={"NCCL_DEBUG_FILE": "/fsx/nccl.%h.%p"})
    assert result.to_set()["NCCL_DEBUG_FILE"] == "/fsx/nccl.%h.%p"


def test_a_deeply_nested_kiln_nccl_env_is_one_usage_error():
    with pytest.raises(UsageError, match=r"^KILN_NCCL_ENV: nests too deeply; expected a JSON object of NAME: value$"):
        parse_overrides([], "[" * 100_000 + "]" * 100_000)
