"""A minimal client of a Grafana workspace's HTTP API: JSON over HTTPS with a bearer token, urllib only."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.client import HTTPMessage
from typing import IO, Any
from urllib.parse import urlsplit

# Grafana answers these when busy or restarting: worth a few more tries.
RETRIED_STATUSES = (429, 500, 502, 503, 504)
# Plain HTTP only to this machine: a test's stand-in for Grafana. Anything else must be HTTPS.
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


class GrafanaUnreachable(Exception):
    """Grafana gave no HTTP answer (connection refused, DNS, TLS, timeout) even after retries."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: urllib would resend the bearer token to wherever a redirect points."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


def require_https(url: str, what: str) -> str:
    """Return URL when it is https (or http to this machine, a test's stand-in); ValueError otherwise."""
    parts = urlsplit(url)
    if parts.scheme != "https" and not (parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS):
        raise ValueError(f"{what}: got {url!r}; allowed: https://HOST, or http:// to this machine")
    return url


def tls_opener() -> urllib.request.OpenerDirector:
    """Return an opener that verifies certificates and host names (the system's CAs) and follows no redirect."""
    return urllib.request.build_opener(
        _NoRedirects(), urllib.request.HTTPSHandler(context=ssl.create_default_context())
    )


class GrafanaApi:
    """Calls BASE_URL's /api with TOKEN; answers are (HTTP status, decoded JSON or None)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        attempts: int = 4,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        require_https(base_url, "Grafana URL")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._timeout_s = timeout_s
        self._attempts = attempts
        self._sleep = sleep
        self._opener = tls_opener()

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Send METHOD PATH (with BODY as JSON); return Grafana's status and answer, retrying a busy Grafana."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in range(1, self._attempts + 1):
            request = urllib.request.Request(  # noqa: S310 - scheme checked in __init__
                self.base_url + path, data=data, method=method, headers=headers
            )
            try:
                with self._opener.open(request, timeout=self._timeout_s) as answer:
                    status, raw = answer.status, answer.read()
            except urllib.error.HTTPError as error:
                status, raw = error.code, error.read()
            except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
                if attempt == self._attempts:
                    reason = getattr(error, "reason", error)
                    raise GrafanaUnreachable(f"{method} {self.base_url}{path}: {reason}") from None
                self._sleep(2.0**attempt)
                continue
            if status in RETRIED_STATUSES and attempt < self._attempts:
                self._sleep(2.0**attempt)
                continue
            return status, _decoded(raw)
        raise AssertionError("unreachable")  # the loop returns or raises on its last attempt


def _decoded(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def message_of(answer: Any) -> str:
    """Return what Grafana said in ANSWER (its "message", or the text), for an error line."""
    if isinstance(answer, dict):
        return str(answer.get("message") or answer.get("error") or answer)
    return str(answer or "no message")
