"""kiln.constructs.children: a construct's L1, named child and parent, found by class or refused with a TypeError that
names where it looked, and the one place the construct library reads them; and _checks.refuse, require's refusal
where a check narrows a type."""

from __future__ import annotations

import re

import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3_deployment

from kiln.constructs._checks import PropError, refuse
from kiln.constructs.children import UnexpectedTree, child_of, l1_of, parent_of
from tests.support.constructs import imported_vpc, stack
from tests.support.paths import ROOT

# Reads of a construct's L1, named child or parent that give IConstruct | None: children.py alone makes them.
UNTYPED_TREE_READS = re.compile(r"\.default_child\b|\.(try_)?find_child\(|\.node\.scope\b")


def test_l1_of_returns_the_cfn_resource_an_l2_wraps() -> None:
    st = stack("L1")
    group = ec2.SecurityGroup(st, "Group", vpc=imported_vpc(st))
    cfn = l1_of(group, ec2.CfnSecurityGroup)
    # jsii hands back a new Python proxy of a JavaScript-made construct at each call: compare paths.
    assert isinstance(cfn, ec2.CfnSecurityGroup)
    assert cfn.node.path == "L1/Group/Resource"


def test_l1_of_refuses_another_class_an_imported_construct_and_none() -> None:
    st = stack("NoL1")
    group = ec2.SecurityGroup(st, "Group", vpc=imported_vpc(st))
    with pytest.raises(UnexpectedTree, match=r"NoL1/Group has no CfnSubnet behind it \(found CfnSecurityGroup\)"):
        l1_of(group, ec2.CfnSubnet)
    imported = ec2.SecurityGroup.from_security_group_id(st, "Imported", "sg-0123456789abcdef0")
    with pytest.raises(UnexpectedTree, match=r"NoL1/Imported has no CfnSecurityGroup behind it \(found NoneType\)"):
        l1_of(imported, ec2.CfnSecurityGroup)
    role = lambda_.Function(
        st, "Fn", runtime=lambda_.Runtime.PYTHON_3_12, handler="i.h", code=lambda_.Code.from_inline("x")
    ).role
    assert l1_of(role, iam.CfnRole).node.path == "NoL1/Fn/ServiceRole/Resource"
    with pytest.raises(UnexpectedTree, match="no construct to find a CfnRole behind"):
        l1_of(None, iam.CfnRole)


def test_child_of_and_parent_of_find_what_cdk_made_inside_its_own_construct() -> None:
    st = stack("Tree")
    deployment = s3_deployment.BucketDeployment(
        st, "Deploy", destination_bucket=s3.Bucket(st, "Bucket"), sources=[s3_deployment.Source.data("a.txt", "a")]
    )
    handler = parent_of(deployment.handler_role, lambda_.Function)
    assert isinstance(handler, lambda_.Function)
    assert handler.node.path == deployment.handler_role.node.scope.node.path
    assert child_of(handler, "ServiceRole", iam.Role).node.path == deployment.handler_role.node.path
    with pytest.raises(UnexpectedTree, match=r"has no Role 'Missing' \(found NoneType\)"):
        child_of(handler, "Missing", iam.Role)
    with pytest.raises(UnexpectedTree, match=r"Tree/Bucket is not inside a Function \(found Stack\)"):
        parent_of(st.node.find_child("Bucket"), lambda_.Function)


def test_refuse_raises_require_s_one_line_prop_error() -> None:
    with pytest.raises(PropError, match=r"^EksTrainingClusterProps\.efa_security_group: got None; allowed: a group$"):
        refuse("EksTrainingClusterProps", "efa_security_group", None, "a group")


def test_the_construct_library_reads_l1s_children_and_parents_through_children_py_alone() -> None:
    library = ROOT / "kiln" / "constructs"
    reads = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted(library.rglob("*.py"))
        if path != library / "children.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if UNTYPED_TREE_READS.search(line)
    ]
    assert reads == []
