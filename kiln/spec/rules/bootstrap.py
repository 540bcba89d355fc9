"""bootstrap: the user's steps."""

from __future__ import annotations

from collections.abc import Iterator

from kiln.catalog.limits import USER_STEPS_MAX
from kiln.spec.models import ClusterSpec
from kiln.spec.problems import Problem
from kiln.spec.rules.common import BACKEND, ORCHESTRATOR, problem_at


def bootstrap_steps(spec: ClusterSpec) -> Iterator[Problem]:
    """The user's steps: at most USER_STEPS_MAX, names unique, each role once and only roles the platform's nodes have;
    login only with login nodes. (Their files are read where the bundle is built: kiln.node_config.user_steps.)"""
    steps = spec.bootstrap.steps
    if len(steps) > USER_STEPS_MAX:
        yield problem_at(("bootstrap", "steps"), f"at most {USER_STEPS_MAX} steps (got {len(steps)})")
    platform = spec.platform
    allowed = platform.roles
    first: dict[str, int] = {}
    for index, step in enumerate(steps):
        path = ("bootstrap", "steps", index)
        if step.name in first:
            yield problem_at(
                (*path, "name"),
                f"is also the name of bootstrap.steps[{first[step.name]}] (got {step.name!r}): each step's name must "
                "be unique",
                ("bootstrap", "steps", first[step.name], "name"),
            )
        first.setdefault(step.name, index)
        for position, role in enumerate(step.roles):
            where = (*path, "roles", position)
            if role in step.roles[:position]:
                yield problem_at(where, f"names {role!r} twice: list each role once")
            elif role not in allowed:
                yield problem_at(
                    where,
                    f"got {role!r}, but {platform.why_fewer_roles}; allowed on {platform.label}: {', '.join(allowed)}",
                    BACKEND,
                    ORCHESTRATOR,
                )
            elif role == "login" and not spec.compute.login_nodes.count:
                yield problem_at(
                    where,
                    "got 'login', but compute.login_nodes.count is 0, so no node would run the step: set "
                    "compute.login_nodes.count, or remove 'login'",
                    ("compute", "login_nodes", "count"),
                )
