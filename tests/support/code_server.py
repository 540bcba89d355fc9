"""The code-server ingress of a synthesized template: its rules, and whether one opens a port."""

from __future__ import annotations

from typing import Any


def _opens(rule: dict, group_id: Any, port: int) -> bool:
    """Return whether ingress RULE of the group GROUP_ID lets PORT in: a port range that holds it, or all traffic from
    anything but the group itself (EFA's rule: its members talk to each other on every port)."""
    protocol = str(rule.get("IpProtocol"))
    if protocol in ("-1", "all"):
        return rule.get("SourceSecurityGroupId") != group_id
    if protocol not in ("tcp", "6"):
        return False
    return int(rule["FromPort"]) <= port <= int(rule["ToPort"])


def _ingress_rules(template: dict) -> list[tuple[str, dict, Any]]:
    """Every ingress rule of TEMPLATE: (resource, rule, the group it belongs to, as the template refers to it)."""
    rules = []
    for name, resource in template["Resources"].items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::EC2::SecurityGroup":
            group = {"Fn::GetAtt": [name, "GroupId"]}
            rules += [(name, rule, group) for rule in props.get("SecurityGroupIngress", [])]
        elif resource["Type"] == "AWS::EC2::SecurityGroupIngress":
            rules.append((name, props, props["GroupId"]))
    return rules
