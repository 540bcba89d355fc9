"""A new VPC's availability zones, one answer for `kiln validate`, kiln's own synthesis and the CDK CLI's. No CDK.

The VPC lies in availability_zone, and in a second AZ only where an EKS control plane needs one (needs_two_zones).
That second AZ is the spec's network.second_availability_zone, else the first other AZ of the account's list as
CDK's availability-zones lookup gives it. The CDK CLI runs that lookup with the deploying credentials, records its
answer in cdk.context.json in the directory it runs in, and gives it to the app on every later synth and deploy; the
network stack reads it there (kiln.stacks.network.account_zones). kiln's commands (validate, diff, report, ci up)
synthesize without the CLI, so they read the same file (zone_choice) and give their app the same list, or say in one
line that no lookup is recorded where the CLI would synthesize CDK's placeholders: never a template with AZs a
deploy would not take.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kiln.catalog.network import (
    eks_control_plane_zones,
    recorded_zones,
    second_zone,
    zone_in_region,
    zones_context_file,
    zones_context_key,
    zones_fallback_key,
)
from kiln.contracts.backends import HYPERPOD_EKS
from kiln.contracts.errors import InputError
from kiln.spec import ClusterSpec, SpecError
from kiln.spec.problems import Problem

# The account the CDK CLI gives the app: the deploying credentials' (kiln.stacks.app.environment reads it too).
ACCOUNT_VARIABLE = "CDK_DEFAULT_ACCOUNT"
FIELD = ("network", "second_availability_zone")


def needs_two_zones(spec: ClusterSpec) -> bool:
    """Return True when something of the cluster needs subnets in two AZs: an EKS control plane (the EKS backend, or
    HyperPod orchestrated by EKS, with the managed collector that needs two as well). Nothing else kiln builds uses
    the second AZ's subnets: compute, FSx, HyperPod's and PCS's interfaces and the image builds take the compute
    subnet, and the NAT gateway lies in the first AZ's public subnet."""
    return spec.platform.uses_kubernetes


def wants_zone_lookup(spec: ClusterSpec) -> bool:
    """Return True when the second AZ comes from the account's AZ list: a new VPC pinned to availability_zone that
    needs two AZs and whose spec names no second. A Slurm backend's VPC keeps one AZ whatever the account lists."""
    net = spec.network
    return (
        needs_two_zones(spec)
        and net.vpc_id is None
        and spec.availability_zone is not None
        and net.second_availability_zone is None
    )


def second_availability_zone(spec: ClusterSpec, zones: Sequence[str] | None) -> str | None:
    """Return the new VPC's second AZ: the spec's, else (where two are needed) the first other AZ of the account's
    list ZONES (None: no lookup possible); None for a VPC in one AZ, which a cluster without an EKS control plane has.

    Raises SpecError (one line) when the cluster needs two AZs and neither the spec nor the account names a second.
    """
    first, net = spec.availability_zone, spec.network
    if first is None or net.vpc_id is not None:
        return None
    if net.second_availability_zone is not None:
        return net.second_availability_zone
    if not needs_two_zones(spec):
        return None
    region = first[:-1]
    if zones is not None:
        chosen = second_zone(first, zones)
        if chosen is not None:
            return chosen
        if not any(zone_in_region(zone, region) for zone in zones):
            # CDK's placeholders: the CLI replaces them with the account's answer before anything deploys.
            return next(zone for zone in zones if zone != first)
        raise missing_second_zone(spec, f"the account lists no AZ of {region} besides {first}")
    raise missing_second_zone(spec, "kiln cannot look up the account's AZs (synthesized without an account)")


def missing_second_zone(spec: ClusterSpec, why: str) -> SpecError:
    """Return the one-line refusal of SPEC, which needs a second AZ that nothing names, because of WHY."""
    first = str(spec.availability_zone)
    region = first[:-1]
    where = "HyperPod orchestrated by EKS" if spec.platform is HYPERPOD_EKS else "eks"
    message = (
        f"is required on {where}, whose control plane needs subnets in {eks_control_plane_zones()} AZs, when {why}: "
        f"set it to another AZ of {region} than {first} (`aws ec2 describe-availability-zones --region {region}` "
        "lists them; `kiln preflight` checks it), or let CDK look them up: `npx cdk synth` or deploy with credentials "
        f"records the account's AZs in ./{zones_context_file()}, which kiln reads too (commit it)"
    )
    source = spec._source_file or spec.name
    return SpecError(source, [Problem(path=FIELD, message=message)], spec._source_lines)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ZoneChoice:
    """What kiln's own synthesis gives the CDK app (CONTEXT: the AZ list the CDK CLI recorded, under its key and as
    CDK's fallback list for a stack without an account) so that the VPC takes the AZs a deploy takes; LINES: which
    AZs were looked up."""

    context: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    lines: tuple[str, ...] = ()


def takes_region_zones(spec: ClusterSpec) -> bool:
    """Return True when a new VPC without availability_zone takes the region's first two AZs (CDK's lookup of them
    where the stack has an account, Fn::GetAZs otherwise)."""
    return spec.network.vpc_id is None and spec.availability_zone is None and spec.region is not None


def read_cdk_context(directory: Path) -> dict[str, Any]:
    """Return the content of DIRECTORY's cdk.context.json ({} without one); InputError (one line) for a bad one."""
    path = directory / zones_context_file()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InputError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        content = json.loads(text)
    except json.JSONDecodeError:
        content = None
    if not isinstance(content, dict):
        raise InputError(f"{path}: not a JSON object: the CDK CLI writes this file; repair or delete it")
    return content


def looked_up(spec: ClusterSpec, context: Mapping[str, Any], account: str | None, where: str) -> ZoneChoice:
    """Return what kiln's synthesis of SPEC takes from CONTEXT (a cdk.context.json's content, read from WHERE): the
    AZs CDK's lookup recorded for ACCOUNT (None: the one account recorded for SPEC's region).

    Raises SpecError (one line) where SPEC leaves its second AZ to the lookup and none is recorded, or several
    accounts' are and nothing says which: the CLI would synthesize CDK's placeholders there.
    """
    lookup = wants_zone_lookup(spec)
    if not (lookup or takes_region_zones(spec)):
        return ZoneChoice()
    region = str(spec.region or str(spec.availability_zone)[:-1])
    recorded = recorded_zones(context, region)
    several = account is None and len(recorded) > 1
    if account is None and len(recorded) == 1:
        (account,) = recorded
    zones = recorded.get(account) if account is not None else None
    if zones is None:
        if not lookup:
            return ZoneChoice()  # Fn::GetAZs in the template, as without an account
        if several:
            why = (
                f"{where} records the AZs of {region} for several accounts ({', '.join(sorted(recorded))}) and "
                f"{ACCOUNT_VARIABLE} does not say which one this cluster deploys to (set it)"
            )
        else:
            whose = f"account {account}'s" if account is not None else "an account's"
            why = f"no lookup of {whose} AZs of {region} is recorded in {where}"
        raise missing_second_zone(spec, why)
    entries = {zones_fallback_key(): zones, zones_context_key(str(account), region): zones}
    return ZoneChoice(context=entries, lines=(looked_up_line(spec, zones, str(account), where),))


def looked_up_line(spec: ClusterSpec, zones: Sequence[str], account: str, where: str) -> str:
    """Return which AZs SPEC's new VPC takes from ZONES, CDK's lookup for ACCOUNT as WHERE records it (raising
    SpecError, as second_availability_zone does, where the account lists no second)."""
    if spec.availability_zone is None:
        return (
            f"AZs {' and '.join(zones[:2])} (looked up, {where}): the first two CDK's lookup lists for account "
            f"{account}, which a VPC without availability_zone takes"
        )
    first = spec.availability_zone
    return (
        f"second AZ {second_availability_zone(spec, zones)} (looked up, {where}): the first AZ of {first[:-1]} other "
        f"than {first} that CDK's lookup lists for account {account}"
    )


def zone_choice(spec: ClusterSpec, directory: Path | None = None, account: str | None = None) -> ZoneChoice:
    """Return what kiln's synthesis of SPEC takes from the cdk.context.json the CDK CLI keeps in DIRECTORY (default:
    the current one, where the CLI runs), for ACCOUNT (else the one CDK_DEFAULT_ACCOUNT names, else the one
    recorded)."""
    here = Path.cwd()
    directory = here if directory is None else directory
    if not (wants_zone_lookup(spec) or takes_region_zones(spec)):
        return ZoneChoice()
    context = read_cdk_context(directory)
    where = f"./{zones_context_file()}" if directory == here else str(directory / zones_context_file())
    return looked_up(spec, context, account or os.environ.get(ACCOUNT_VARIABLE) or None, where)
