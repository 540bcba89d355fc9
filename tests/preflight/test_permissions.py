"""The IAM actions preflight needs are exactly the calls its checks make (the CI role is granted this list)."""

from __future__ import annotations

import ast

from kiln.contracts import permissions
from tests.support.paths import ROOT

CHECKS = sorted((ROOT / "kiln" / "preflight" / "checks").glob("*.py"))


def _names_in(path) -> set[str]:
    """Every attribute name and string constant of PATH: where a client method is called or paginated."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def test_every_call_of_a_check_is_a_listed_permission_and_every_permission_is_used(aws) -> None:
    clients = aws.clients()
    called = set()
    for path in CHECKS:
        names = _names_in(path)
        for client in clients:
            mapping = client.meta.method_to_api_mapping
            called |= {aws.iam_action(mapping[name]) for name in names if name in mapping}
    listed = {
        *permissions.UNSCOPED_READS,
        *permissions.PARAMETER_READS,
        *permissions.BUCKET_READS,
        *permissions.BOOTSTRAP_READS,
        *permissions.STACK_READS,
        *permissions.LEFTOVER_READS,
    }
    assert called == listed
    assert all(action.split(":")[1].startswith(("Describe", "Get", "List")) for action in listed)
