"""What the GrafanaWorkspace construct and its provisioning function agree on: property names, fixed names, limits."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

# The custom resource's properties (CloudFormation passes every value as a string).
WORKSPACE_ID = "WorkspaceId"
WORKSPACE_ENDPOINT = "WorkspaceEndpoint"
PROMETHEUS_URL = "PrometheusUrl"
PROMETHEUS_REGION = "PrometheusRegion"
SCRAPE_INTERVAL = "ScrapeIntervalSeconds"  # how often the exporters are scraped: the data source's timeInterval
DASHBOARDS = "Dashboards"  # a list of {"Name": name, "Body": the dashboard's JSON}
DASHBOARDS_DIGEST = "DashboardsDigest"

# The Grafana service account the function acts as; Admin, as creating data sources needs.
SERVICE_ACCOUNT = "kiln-provisioner"
SERVICE_ACCOUNT_ROLE = "ADMIN"
TOKEN_PREFIX = "kiln-provision-"  # noqa: S105 - the start of a token's name, not a secret
# One invocation's limit, and how long its token lives: the token outlives the invocation briefly even when the
# function dies before deleting it.
TIMEOUT_S = 300
TOKEN_SECONDS_TO_LIVE = TIMEOUT_S + 300

DATA_SOURCE_UID = "kiln-amp"
DATA_SOURCE_NAME = "kiln Amazon Managed Service for Prometheus"
# The dashboards' data source variable, which the function points at DATA_SOURCE_UID.
DATA_SOURCE_VARIABLE = "datasource"


def compact(dashboard: Mapping[str, Any]) -> str:
    """Return DASHBOARD as the compact, key-sorted JSON the custom resource carries."""
    return json.dumps(dashboard, sort_keys=True, separators=(",", ":"))


def dashboards_digest(dashboards: Sequence[tuple[str, str]]) -> str:
    """Return the sha256 of the (name, compact JSON) pairs in order: it changes whenever a dashboard does."""
    digest = hashlib.sha256()
    for name, body in dashboards:
        digest.update(name.encode() + b"\0" + body.encode() + b"\0")
    return digest.hexdigest()
