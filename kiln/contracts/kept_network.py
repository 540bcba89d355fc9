"""The VPC and compute subnet kiln's network stack keeps for a kept file system, as CloudFormation names them.

CloudFormation tags what it creates with the resource's logical id (aws:cloudformation:logical-id, a tag no user can
set), so these ids, with the stack's name, prove a kept VPC and subnet were made by a cluster's network stack:
preflight and `kiln leftovers` read them, and kiln adopts nothing else (network.kept). They follow from the
construct paths NetworkStack/Vpc/Resource and .../PrivateSubnet1/Subnet; tests/stacks/test_kept_vpc.py holds them to
the synthesized template, so a renamed construct cannot leave them stale.
"""

from __future__ import annotations

# The network stack's part name: its stack is kiln.contracts.environment.stack_name(cluster, NETWORK_PART).
NETWORK_PART = "network"
KEPT_VPC_LOGICAL_ID = "Vpc49347EA9"
KEPT_SUBNET_LOGICAL_ID = "VpcPrivateSubnet1Subnet7BECC33A"
