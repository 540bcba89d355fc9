"""Give a Grafana workspace kiln's Prometheus data source and dashboards, as a short-lived service account token."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from .contract import (
    DASHBOARDS,
    DASHBOARDS_DIGEST,
    DATA_SOURCE_NAME,
    DATA_SOURCE_UID,
    DATA_SOURCE_VARIABLE,
    PROMETHEUS_REGION,
    PROMETHEUS_URL,
    SCRAPE_INTERVAL,
    SERVICE_ACCOUNT,
    SERVICE_ACCOUNT_ROLE,
    TOKEN_PREFIX,
    TOKEN_SECONDS_TO_LIVE,
    WORKSPACE_ENDPOINT,
    WORKSPACE_ID,
)
from .grafana_api import GrafanaApi, GrafanaUnreachable, message_of

_REASON_LIMIT = 600


class ProvisioningFailed(Exception):
    """Provisioning stopped; the message is one line naming what failed (the dashboard, data source or service
    account) and Grafana's or AWS's answer."""


def one_line(text: str, limit: int = _REASON_LIMIT) -> str:
    """Return TEXT on one line, at most LIMIT characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(frozen=True)
class Settings:
    """What one provisioning run needs, read from the custom resource's properties."""

    workspace_id: str
    endpoint: str
    prometheus_url: str
    prometheus_region: str
    scrape_interval_seconds: int
    dashboards: tuple[tuple[str, dict[str, Any]], ...]
    digest: str

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Settings:
        """Read PROPERTIES; ProvisioningFailed names a missing property or a dashboard that is not JSON."""
        missing = [
            key
            for key in (
                WORKSPACE_ID,
                WORKSPACE_ENDPOINT,
                PROMETHEUS_URL,
                PROMETHEUS_REGION,
                SCRAPE_INTERVAL,
                DASHBOARDS,
            )
            if not properties.get(key)
        ]
        if missing:
            raise ProvisioningFailed(f"custom resource properties: missing {', '.join(missing)}")
        scrape_interval = str(properties[SCRAPE_INTERVAL])
        if not scrape_interval.isdigit() or int(scrape_interval) < 1:
            raise ProvisioningFailed(
                f"custom resource property {SCRAPE_INTERVAL}: got {scrape_interval!r}, allowed: seconds"
            )
        dashboards = []
        for entry in properties[DASHBOARDS]:
            name = str(entry.get("Name", ""))
            try:
                dashboards.append((name, json.loads(entry["Body"])))
            except (KeyError, TypeError, ValueError) as error:
                raise ProvisioningFailed(one_line(f"dashboard {name or '?'}: its body is not JSON: {error}")) from None
        return cls(
            workspace_id=str(properties[WORKSPACE_ID]),
            endpoint=str(properties[WORKSPACE_ENDPOINT]),
            prometheus_url=str(properties[PROMETHEUS_URL]),
            prometheus_region=str(properties[PROMETHEUS_REGION]),
            scrape_interval_seconds=int(scrape_interval),
            dashboards=tuple(dashboards),
            digest=str(properties.get(DASHBOARDS_DIGEST, "")),
        )

    @property
    def grafana_url(self) -> str:
        """The workspace's Grafana, always over HTTPS."""
        host = self.endpoint.removeprefix("https://").removeprefix("http://").rstrip("/")
        return f"https://{host}"


def _aws_error(what: str, error: Exception) -> ProvisioningFailed:
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "Error")
        text = error.response.get("Error", {}).get("Message", "")
        return ProvisioningFailed(one_line(f"{what}: {code}: {text}"))
    return ProvisioningFailed(one_line(f"{what}: {error}"))


def service_account_id(grafana: Any, workspace_id: str) -> str:
    """Return the id of the workspace's SERVICE_ACCOUNT, creating it (Admin) when missing."""
    what = f"service account {SERVICE_ACCOUNT} of workspace {workspace_id}"
    try:
        kwargs: dict[str, Any] = {"workspaceId": workspace_id}
        while True:
            page = grafana.list_workspace_service_accounts(**kwargs)
            for account in page.get("serviceAccounts", []):
                if account["name"] != SERVICE_ACCOUNT:
                    continue
                if str(account.get("isDisabled", "false")).lower() == "true":
                    raise ProvisioningFailed(f"{what}: it is disabled; enable it in the workspace or delete it")
                if account.get("grafanaRole") != SERVICE_ACCOUNT_ROLE:
                    raise ProvisioningFailed(
                        f"{what}: its role is {account.get('grafanaRole')}, not {SERVICE_ACCOUNT_ROLE}; "
                        "delete it and deploy again"
                    )
                return str(account["id"])
            if not page.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
        created = grafana.create_workspace_service_account(
            workspaceId=workspace_id, name=SERVICE_ACCOUNT, grafanaRole=SERVICE_ACCOUNT_ROLE
        )
    except (ClientError, BotoCoreError) as error:
        raise _aws_error(what, error) from None
    print(f"{what}: created")
    return str(created["id"])


def upsert_data_source(api: GrafanaApi, settings: Settings) -> None:
    """Create or update the Prometheus data source DATA_SOURCE_UID: the workspace's role signs its queries (SigV4)."""
    body = {
        "uid": DATA_SOURCE_UID,
        "name": DATA_SOURCE_NAME,
        "type": "prometheus",
        "access": "proxy",
        "url": settings.prometheus_url,
        "isDefault": False,
        "jsonData": {
            "httpMethod": "POST",
            "sigV4Auth": True,
            # Amazon Managed Grafana's name for "sign with the workspace's IAM role".
            "sigV4AuthType": "ec2_iam_role",
            "sigV4Region": settings.prometheus_region,
            # Grafana's $__rate_interval is at least four of these: every rate spans enough samples.
            "timeInterval": f"{settings.scrape_interval_seconds}s",
        },
    }
    what = f"data source {DATA_SOURCE_UID}"
    existing = f"/api/datasources/uid/{DATA_SOURCE_UID}"
    status, answer = _call(api, "GET", existing, None, what)
    if status == 200:
        method, path = "PUT", existing
    elif status == 404:
        method, path = "POST", "/api/datasources"
    else:
        raise _http_error(what, "GET", status, answer)
    status, answer = _call(api, method, path, body, what)
    if status != 200:
        raise _http_error(what, method, status, answer)
    print(f"{what}: {'updated' if method == 'PUT' else 'created'}")


def prepared(dashboard: Mapping[str, Any]) -> dict[str, Any]:
    """Return DASHBOARD ready to save: no id (Grafana matches the uid), its data source variable on DATA_SOURCE_UID."""
    ready = copy.deepcopy(dict(dashboard))
    ready["id"] = None
    for variable in (ready.get("templating") or {}).get("list") or []:
        if variable.get("type") == "datasource" and variable.get("name") == DATA_SOURCE_VARIABLE:
            variable["current"] = {"selected": True, "text": DATA_SOURCE_NAME, "value": DATA_SOURCE_UID}
    return ready


def upload_dashboard(api: GrafanaApi, name: str, dashboard: Mapping[str, Any], digest: str) -> str:
    """Save DASHBOARD over any dashboard with its uid; return the uid."""
    uid = str(dashboard.get("uid", ""))
    what = f"dashboard {name} ({uid})"
    body = {"dashboard": prepared(dashboard), "overwrite": True, "message": f"kiln {digest[:12]}".strip()}
    status, answer = _call(api, "POST", "/api/dashboards/db", body, what)
    if status != 200:
        raise _http_error(what, "POST", status, answer)
    print(f"{what}: saved")
    return uid


def _call(api: GrafanaApi, method: str, path: str, body: Any, what: str) -> tuple[int, Any]:
    try:
        return api.request(method, path, body)
    except GrafanaUnreachable as error:
        raise ProvisioningFailed(one_line(f"{what}: Grafana did not answer: {error}")) from None


def _http_error(what: str, method: str, status: int, answer: Any) -> ProvisioningFailed:
    return ProvisioningFailed(one_line(f"{what}: Grafana answered HTTP {status} to {method}: {message_of(answer)}"))


def provision(
    settings: Settings,
    grafana: Any,
    *,
    grafana_url: str | None = None,
    api_options: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Upsert the data source and every dashboard with a fresh token of SERVICE_ACCOUNT, then delete the token.

    GRAFANA is a boto3 "grafana" client. GRAFANA_URL is for tests only: a stand-in Grafana on this machine
    instead of https://<workspace endpoint>. The token is deleted whether or not provisioning succeeded.
    """
    account = service_account_id(grafana, settings.workspace_id)
    token_name = TOKEN_PREFIX + uuid.uuid4().hex[:12]
    try:
        token = grafana.create_workspace_service_account_token(
            workspaceId=settings.workspace_id,
            serviceAccountId=account,
            name=token_name,
            secondsToLive=TOKEN_SECONDS_TO_LIVE,
        )["serviceAccountToken"]
    except (ClientError, BotoCoreError) as error:
        raise _aws_error(f"token of service account {SERVICE_ACCOUNT}", error) from None
    try:
        api = GrafanaApi(grafana_url or settings.grafana_url, token["key"], **dict(api_options or {}))
        upsert_data_source(api, settings)
        uids = [upload_dashboard(api, name, body, settings.digest) for name, body in settings.dashboards]
    finally:
        _delete_token(grafana, settings.workspace_id, account, token)
    return {"DataSourceUid": DATA_SOURCE_UID, "Dashboards": " ".join(uids)}


def _delete_token(grafana: Any, workspace_id: str, account: str, token: Mapping[str, Any]) -> None:
    """Delete the token; a failure is logged, not raised: it would hide why provisioning failed, and the token
    expires by itself within TOKEN_SECONDS_TO_LIVE."""
    try:
        grafana.delete_workspace_service_account_token(
            workspaceId=workspace_id, serviceAccountId=account, tokenId=token["id"]
        )
    except (ClientError, BotoCoreError) as error:
        print(f"token {token.get('name')}: not deleted ({one_line(str(error))}); it expires by itself")
        return
    print(f"token {token.get('name')}: deleted")
