"""Find this node's EC2 instance type (KILN_INSTANCE_TYPE, the bootstrap's record, else IMDSv2) and catalog entry."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from kiln.catalog import InstanceType, UnknownInstanceType, instance_type

DEFAULT_ENDPOINT = "http://169.254.169.254"
# Where the bootstrap records the node's instance type for every user (configure_training_env): on multi-user nodes
# IMDS answers only root and kiln's services (configure_imds). Under KILN_ROOT where that is set (the local cluster).
RECORDED_TYPE = "/etc/kiln/instance-type"
TOKEN_TTL_SECONDS = 60
# Off EC2 nothing answers; a short timeout keeps that from delaying every launch.
TIMEOUT_SECONDS = 1.0


@dataclass(frozen=True, kw_only=True)
class InstanceTypeLookup:
    """The instance type (or None) and where it came from."""

    name: str | None
    source: str
    note: str | None = None


def lookup(environ: Mapping[str, str] = os.environ, timeout: float = TIMEOUT_SECONDS) -> InstanceTypeLookup:
    """Return the instance type from KILN_INSTANCE_TYPE, else the bootstrap's record, else IMDSv2 at
    KILN_IMDS_ENDPOINT."""
    explicit = environ.get("KILN_INSTANCE_TYPE", "").strip()
    if explicit:
        return InstanceTypeLookup(name=explicit, source="KILN_INSTANCE_TYPE")
    recorded = environ.get("KILN_ROOT", "/").rstrip("/") + RECORDED_TYPE
    try:
        with open(recorded, encoding="utf-8") as file:
            name = file.read().strip()
    except OSError:
        name = ""
    if name:
        return InstanceTypeLookup(name=name, source=recorded)
    endpoint = environ.get("KILN_IMDS_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    try:
        name = query_imds(endpoint, timeout)
    except (OSError, ValueError) as error:
        return InstanceTypeLookup(name=None, source="none", note=f"IMDSv2 at {endpoint} gave no instance type: {error}")
    return InstanceTypeLookup(name=name, source=f"imds {endpoint}")


def query_imds(endpoint: str, timeout: float) -> str:
    """Ask IMDSv2 at ENDPOINT for the instance type: PUT a session token, then GET with it."""
    if not endpoint.startswith(("http://", "https://")):
        raise ValueError(f"KILN_IMDS_ENDPOINT must be an http(s) URL (got {endpoint!r})")
    # IMDS is link-local: a proxy from the environment would only get in the way.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    token_request = urllib.request.Request(  # noqa: S310 (scheme checked above)
        f"{endpoint}/latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)},
    )
    with opener.open(token_request, timeout=timeout) as response:
        token = response.read().decode().strip()
    type_request = urllib.request.Request(  # noqa: S310 (scheme checked above)
        f"{endpoint}/latest/meta-data/instance-type", headers={"X-aws-ec2-metadata-token": token}
    )
    with opener.open(type_request, timeout=timeout) as response:
        name = response.read().decode().strip()
    if not name:
        raise ValueError("empty instance-type")
    return name


def catalog_entry(name: str | None) -> tuple[InstanceType | None, str | None]:
    """Return the catalog entry for NAME and, when there is none, why."""
    if name is None:
        return None, "no instance type known (KILN_INSTANCE_TYPE unset, IMDS gave none)"
    try:
        return instance_type(name), None
    except UnknownInstanceType as error:
        return None, str(error)
