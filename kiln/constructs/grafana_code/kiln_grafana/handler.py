"""The provisioning function's Lambda entry point: a CloudFormation custom resource that answers on its response URL."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config

from .contract import WORKSPACE_ID
from .grafana_api import require_https, tls_opener
from .provision import ProvisioningFailed, Settings, one_line, provision

_RESPONSE_ATTEMPTS = 3


def main(event: dict[str, Any], context: Any, *, grafana: Any = None, grafana_url: str | None = None) -> dict[str, Any]:
    """Provision on Create and Update; on Delete do nothing (the dashboards go with the workspace). Always answer.

    GRAFANA (a boto3 "grafana" client) and GRAFANA_URL are for tests only; Lambda passes neither.
    """
    request = event["RequestType"]
    properties = event.get("ResourceProperties") or {}
    physical_id = (
        event.get("PhysicalResourceId") or f"{properties.get(WORKSPACE_ID) or event['LogicalResourceId']}-dashboards"
    )
    status, reason, data = "SUCCESS", "", {}
    try:
        if request in ("Create", "Update"):
            settings = Settings.from_properties(properties)
            client = grafana or boto3.client("grafana", config=Config(retries={"mode": "standard", "max_attempts": 5}))
            data = provision(settings, client, grafana_url=grafana_url)
            reason = f"data source and {len(settings.dashboards)} dashboards saved"
        else:
            reason = "nothing to delete: the dashboards go with the workspace"
    except ProvisioningFailed as error:
        status, reason = "FAILED", str(error)
    except Exception as error:  # noqa: BLE001 - any failure must reach CloudFormation, or it waits an hour
        status, reason = "FAILED", one_line(f"unexpected {type(error).__name__}: {error}")
    print(f"{request} {status}: {reason}")
    response = {
        "Status": status,
        "Reason": reason,
        "PhysicalResourceId": physical_id,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": data,
    }
    send_response(event["ResponseURL"], response)
    return response


def send_response(url: str, response: dict[str, Any], *, sleep: Callable[[float], None] = time.sleep) -> None:
    """PUT RESPONSE to CloudFormation's pre-signed URL, retrying a few times; TLS verified as for Grafana."""
    require_https(url, "CloudFormation response URL")
    body = json.dumps(response).encode()
    headers = {"Content-Type": "", "Content-Length": str(len(body))}
    for attempt in range(1, _RESPONSE_ATTEMPTS + 1):
        request = urllib.request.Request(url, data=body, method="PUT", headers=headers)  # noqa: S310 - checked
        try:
            with tls_opener().open(request, timeout=30) as answer:
                answer.read()
            return
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            print(f"response to CloudFormation not sent (attempt {attempt}): {error}")
            if attempt < _RESPONSE_ATTEMPTS:
                sleep(2.0**attempt)
    raise RuntimeError("could not answer CloudFormation; the stack waits for its timeout")
