"""Neuron job settings in the presets: the pod variables of AWS's Neuron samples, the compile cache's root on FSx, and
which types each family of the launcher's environment reaches."""

from __future__ import annotations

from kiln.catalog import nccl, preset_environment
from kiln.catalog.facts import instance_type
from kiln.catalog.nccl import neuron_compile_cache, precompile_command, reaches, variable_family
from kiln.jobs.pytorchjob import FSX_MOUNT
from kiln.stacks.compute_context import MOUNT_POINT

ROOT = "/fsx/neuron-compile-cache"
ROOT_VARIABLE = "KILN_NEURON_CACHE_ROOT"


def _rule(rule_id: str) -> dict:
    return next(rule for rule in nccl.presets()["rules"] if rule["id"] == rule_id)


def test_a_trainium_pod_gets_the_neuron_samples_pod_variables() -> None:
    pod = preset_environment("trn1.32xlarge", container=True)
    assert pod["CCOM_SOCKET_IFNAME"] == "eth0"
    assert pod["NEURON_RT_RESET_CORES"] == "1"
    assert (pod["FI_PROVIDER"], pod["FI_EFA_USE_DEVICE_RDMA"], pod["FI_EFA_FORK_SAFE"]) == ("efa", "1", "1")
    # trn2 by its facts (Neuron devices with EFA device RDMA), not by name.
    assert preset_environment("trn2.48xlarge", container=True)["CCOM_SOCKET_IFNAME"] == "eth0"
    # Only in Trainium pods: Slurm nodes (and enroot containers) share the host's network and its interface names;
    # GPU pods and Inferentia (no EFA device RDMA) are none of the samples' cases.
    for instance, container in (("trn1.32xlarge", False), ("p5.48xlarge", True), ("inf2.xlarge", True)):
        env = preset_environment(instance, container=container)
        assert "CCOM_SOCKET_IFNAME" not in env and "NEURON_RT_RESET_CORES" not in env


def test_the_neuron_container_rule_cites_the_samples_at_a_commit() -> None:
    rule = _rule("neuron-container")
    assert "aws-neuron/aws-neuron-eks-samples/blob/cecff9eb48a91df0be2b277fb812827ba6092fbc" in rule["source"]
    assert "neuron-runtime/nrt-troubleshoot.rst" in rule["source"]
    assert rule["env"] == {"CCOM_SOCKET_IFNAME": "eth0", "NEURON_RT_RESET_CORES": "1"}


def test_a_neuron_type_on_fsx_gets_the_caches_root_never_one_shared_cache() -> None:
    cache = neuron_compile_cache()
    assert (cache.variable, cache.root_variable, cache.root) == ("NEURON_COMPILE_CACHE_URL", ROOT_VARIABLE, ROOT)
    assert "pytorch-neuron-parallel-compile" in cache.source and "v2.29.0" in cache.source
    for container in (False, True):
        env = preset_environment("trn1.32xlarge", container=container, shared_cache=True)
        # The root only: the launcher picks each job's and node's directory under it (kiln.launcher.compile_cache),
        # so no node environment names one cache every node would write.
        assert env[ROOT_VARIABLE] == ROOT and cache.variable not in env
    # Without Lustre a Neuron node keeps Neuron's default, /var/tmp/neuron-compile-cache, on its own disk; a type
    # without Neuron devices compiles nothing.
    assert ROOT_VARIABLE not in preset_environment("trn1.32xlarge", shared_cache=False)
    assert ROOT_VARIABLE not in preset_environment("p5.48xlarge", shared_cache=True)


def test_the_cache_note_records_both_readings_of_a_shared_cache() -> None:
    about = nccl.presets()["neuron_compile_cache_about"]
    source = neuron_compile_cache().source
    # Neuron's troubleshooting page (one cache per instance) against AWS's Kubernetes template (one on /fsx).
    assert "Ambiguous" in about and "EFS/FSx also exhibit similar limitation" in about
    assert "archive/nxd-training/training-troubleshooting.rst" in source
    assert "llama3/kubernetes/llama3_train.yaml-template" in source and "llama3/slurm/README.md" in source
    assert "<root>/<uid>/<job name>/node-<node rank>" in about


def test_the_cache_is_on_the_mount_point_nodes_and_pods_use() -> None:
    assert neuron_compile_cache().root.startswith(f"{MOUNT_POINT}/")
    assert neuron_compile_cache().root.startswith(f"{FSX_MOUNT}/")


def test_the_users_compiler_flags_are_kept_and_their_cache_wins() -> None:
    own = {"NEURON_CC_FLAGS": "--cache_dir=/fsx/mine"}
    env = preset_environment("trn1.32xlarge", overrides=own, shared_cache=True)
    assert env["NEURON_CC_FLAGS"] == "--cache_dir=/fsx/mine" and ROOT_VARIABLE not in env
    flags = {"NEURON_CC_FLAGS": "--retry_failed_compilation"}
    env = preset_environment("trn1.32xlarge", overrides=flags, shared_cache=True)
    assert (env["NEURON_CC_FLAGS"], env[ROOT_VARIABLE]) == ("--retry_failed_compilation", ROOT)
    url = {"NEURON_COMPILE_CACHE_URL": "s3://bucket/cache"}
    env = preset_environment("trn1.32xlarge", overrides=url, shared_cache=True)
    assert env["NEURON_COMPILE_CACHE_URL"] == "s3://bucket/cache" and ROOT_VARIABLE not in env


def test_each_family_reaches_its_kind_of_type() -> None:
    overrides = {"NCCL_DEBUG": "INFO", "NEURON_RT_LOG_LEVEL": "INFO", "CCOM_SOCKET_IFNAME": "ens5", "FI_LOG_LEVEL": "1"}
    trn1 = preset_environment("trn1.32xlarge", overrides=overrides)
    p5 = preset_environment("p5.48xlarge", overrides=overrides)
    assert "NCCL_DEBUG" not in trn1 and trn1["NEURON_RT_LOG_LEVEL"] == "INFO" and trn1["CCOM_SOCKET_IFNAME"] == "ens5"
    assert p5["NCCL_DEBUG"] == "INFO" and "NEURON_RT_LOG_LEVEL" not in p5 and "CCOM_SOCKET_IFNAME" not in p5
    assert trn1["FI_LOG_LEVEL"] == p5["FI_LOG_LEVEL"] == "1"
    assert [variable_family(n) for n in ("NEURON_X", "CCOM_X", "NCCL_X", "FI_X")] == [
        "neuron",
        "neuron",
        "not_neuron",
        None,
    ]
    assert reaches("FI_X", instance_type("trn1.32xlarge")) and not reaches("NCCL_X", instance_type("trn1.32xlarge"))


def test_the_families_are_data_with_their_source() -> None:
    data = nccl.presets()
    assert set(data["families"]) <= set(data["allowed_prefixes"])
    assert "aws/aws-ofi-nccl/blob/2daf7d303aa139a03140aa530957d10521e4478d/src/Makefile.am" in data["families_source"]


def test_precompile_is_neuron_parallel_compile_with_its_documentation() -> None:
    assert precompile_command() == "neuron_parallel_compile"
    assert "pytorch-neuron-parallel-compile" in nccl.presets()["precompile"]["source"]
