"""The boot budget: kiln's estimate of a node's setup at boot, step by step, against its platform's deadline."""

from __future__ import annotations

import dataclasses

import pytest

from kiln.bootstrap.budget import (
    ADOPT_SECONDS,
    BAKED_SECONDS,
    PLATFORM_SECONDS,
    BootWork,
    StepWork,
    boot_work,
    bootstrap_timeout,
    budget_line,
    deadline,
    over_budget,
)
from kiln.bootstrap.profiles import PROFILES
from kiln.bootstrap.steps import STEPS, Step
from kiln.catalog.platforms import COMPONENTS, service_fact
from tests.support.bootstrap import pcs_config, pins_beside


def _pins_beside(image: str, os: str):
    """Return the test pins without what IMAGE owns on OS, nor PCS's installers (the sample AMI has both)."""
    return dataclasses.replace(pins_beside(image, os), pcs_agent=None, pcs_slurm=None)


def _work(config, name="p5.48xlarge", *, baked=False) -> dict[str, StepWork]:
    return {step.step: step for step in boot_work(config, name, baked=baked).steps}


def test_every_step_has_an_estimate_and_install_steps_name_a_known_component() -> None:
    for step in STEPS.values():
        assert step.seconds > 0, step.name
        assert step.component is None or step.component in COMPONENTS, step.name
    with pytest.raises(ValueError, match="component nccl on a configure step"):
        Step(name="configure_x", phase="configure", component="nccl")


def test_a_stock_image_installs_every_component_and_pays_each_steps_estimate() -> None:
    # pcs_config boots the user's own PCS AMI: kiln installs the driver, EFA, Lustre, enroot and pyxis.
    work = _work(pcs_config())
    for name in ("install_nvidia_driver", "install_efa", "install_lustre_client", "install_enroot", "install_pyxis"):
        assert work[name] == StepWork(step=name, work="install", seconds=STEPS[name].seconds)
    # PCS's agent and Slurm are on that AMI (adopted: a version read), and a p5 has no Neuron device.
    assert work["install_pcs_agent"] == StepWork(step="install_pcs_agent", work="adopt", seconds=ADOPT_SECONDS)
    assert work["install_neuron"] == StepWork(step="install_neuron", work="skip", seconds=0)
    assert work["configure_fsx"].work == "run" and work["configure_fsx"].seconds == STEPS["configure_fsx"].seconds


def test_what_the_image_owns_costs_a_check_not_an_install() -> None:
    sample = _work(pcs_config(image="pcs-sample", os="al2023", software=_pins_beside("pcs-sample", "al2023")))
    assert sample["install_nvidia_driver"].work == "adopt" and sample["install_efa"].work == "adopt"
    own = boot_work(pcs_config(), "p5.48xlarge", baked=False)
    adopted = boot_work(
        pcs_config(image="pcs-sample", os="al2023", software=_pins_beside("pcs-sample", "al2023")),
        "p5.48xlarge",
        baked=False,
    )
    saved = STEPS["install_nvidia_driver"].seconds + STEPS["install_efa"].seconds - 2 * ADOPT_SECONDS
    assert own.seconds - adopted.seconds == saved


def test_a_baked_image_runs_only_its_configure_steps() -> None:
    config = pcs_config()
    work = boot_work(config, "p5.48xlarge", baked=True)
    profile = PROFILES["pcs"]
    assert [s.step for s in work.steps] == [*profile.install_steps, *profile.configure_steps]
    assert {s.work for s in work.steps[: len(profile.install_steps)]} == {"baked"}
    configure = sum(STEPS[name].seconds for name in profile.configure_steps)
    assert work.seconds == PLATFORM_SECONDS + BAKED_SECONDS * len(profile.install_steps) + configure


def test_a_cpu_node_skips_the_accelerator_steps() -> None:
    work = _work(pcs_config(), "m5.8xlarge")
    for name in ("install_nvidia_driver", "install_neuron", "install_efa"):
        assert work[name].work == "skip", name
    # Docker comes with containers on every node, GPU or not.
    assert work["install_container_runtime"].work == "install"
    assert _work(pcs_config(containers=False), "m5.8xlarge")["install_container_runtime"].work == "skip"


def test_pcs_gives_workers_its_fixed_resume_timeout_and_parallelcluster_its_settable_timeouts() -> None:
    pcs = deadline("pcs", "worker")
    assert pcs is not None and not pcs.settable
    assert pcs.seconds == service_fact("pcs", "resume_timeout_seconds").value == 1800
    # PCS's login nodes are not Slurm nodes that resume; EKS and HyperPod publish no deadline.
    assert deadline("pcs", "login") is None and deadline("eks", "worker") is None
    assert deadline("hyperpod", "worker") is None
    head, compute = deadline("parallelcluster", "controller"), deadline("parallelcluster", "worker")
    assert head is not None and head.settable and head.name == "HeadNodeBootstrapTimeout"
    assert compute is not None and compute.settable and compute.name == "ComputeNodeBootstrapTimeout"
    assert compute.seconds == service_fact("parallelcluster", "compute_node_bootstrap_timeout").value["default_seconds"]


def _busy(seconds: int) -> BootWork:
    return BootWork(instance_type="p5.48xlarge", steps=(StepWork(step="install_x", work="install", seconds=seconds),))


@pytest.mark.parametrize(
    ("steps_seconds", "timeout"),
    [
        (100, 2100),  # (300 + 100) * 1.5 = 600 s: the default stands
        (1200, 2400),  # (300 + 1200) * 1.5 = 2250 s, up to whole 5 minutes
        (2700, 4500),  # 3000 * 1.5 = 4500 s exactly
    ],
)
def test_a_settable_timeout_is_the_default_or_the_estimate_with_headroom(steps_seconds: int, timeout: int) -> None:
    assert bootstrap_timeout(_busy(steps_seconds), 2100) == timeout


def test_a_setup_past_a_fixed_deadline_is_refused_in_one_line_that_recommends_a_bake() -> None:
    limit = deadline("pcs", "worker")
    slow, baked = _busy(1600), _busy(100)
    assert over_budget("gpu", _busy(1500), limit, baked=baked) is None  # exactly 1800 s fits
    line = over_budget("gpu", slow, limit, baked=baked)
    assert line == (
        "not boot-ready: gpu nodes (p5.48xlarge) scale from zero, and their setup at boot takes ~32 min by kiln's "
        "estimate, past PCS's ResumeTimeout of 30 min: bake the install steps into the image "
        "(compute.image.bake: true), and they boot in ~7 min"
    )
    # A settable deadline is set, never refused; no deadline, nothing to refuse.
    assert over_budget("gpu", slow, deadline("parallelcluster", "worker"), baked=baked) is None
    assert over_budget("gpu", slow, None, baked=baked) is None


def test_the_budget_line_names_the_heaviest_steps_and_the_deadline() -> None:
    work = boot_work(pcs_config(), "p5.48xlarge", baked=False)
    line = budget_line("gpu", work, deadline("pcs", "worker"))
    assert line.startswith(f"gpu (p5.48xlarge): setup at boot ~{work.minutes} min by kiln's estimate (")
    assert "install_nvidia_driver 7, install_efa 6, install_launcher 4 min" in line
    assert line.endswith("; PCS's ResumeTimeout is 30 min")
    timeout = budget_line("p5", work, deadline("parallelcluster", "worker"))
    assert timeout.endswith(f"; kiln sets ComputeNodeBootstrapTimeout to {bootstrap_timeout(work, 2100) // 60} min")
