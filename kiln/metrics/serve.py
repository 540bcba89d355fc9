"""Serve a registry over HTTP with prometheus_client until SIGTERM or SIGINT."""

from __future__ import annotations

import ipaddress
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType, TracebackType

from prometheus_client import start_http_server
from prometheus_client.registry import CollectorRegistry

ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - an empty --listen host asks for every interface, as a node exporter does
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
SHUTDOWN_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Listen:
    """Where to serve: an IPv4 address ("" for every interface) and a port (0 for any free one)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """Parse ADDRESS:PORT (IPv4 address or empty host, port 0..65535); raise ValueError naming what is allowed."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not port.isascii() or int(port) > 65535:
        raise ValueError(f"expected ADDRESS:PORT with a port 0..65535 (got {text!r})")
    if host:
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(f"expected an IPv4 address or nothing before ':PORT' (got {host!r})") from None
    return Listen(host, int(port))


def log(kind: str, message: str) -> None:
    """Write one line to stderr as `kiln-metrics KIND: MESSAGE`."""
    print(f"kiln-metrics {kind}: {message}", file=sys.stderr, flush=True)


def serve(registry: CollectorRegistry, listen: Listen, kind: str, on_start: Callable[[], None] | None = None) -> int:
    """Serve REGISTRY on LISTEN until SIGTERM or SIGINT; return the exit code (1 when it cannot listen)."""
    # The handlers come first: a signal sent as soon as the serving line appears must stop the server cleanly.
    with StopSignals() as stop:
        try:
            server, thread = start_http_server(listen.port, addr=listen.host or ALL_INTERFACES, registry=registry)
        except OSError as exc:
            log(kind, f"error: cannot listen on {listen}: {exc.strerror or exc}")
            return 1
        try:
            host, port = server.server_address[:2]
            log(kind, f"serving http://{host}:{port}/metrics")
            if on_start is not None:
                on_start()
            log(kind, f"stopping on {signal.Signals(stop.wait()).name}")
        finally:
            server.shutdown()
            server.server_close()
            thread.join(SHUTDOWN_TIMEOUT_S)
    return 0


def _note(signum: int, frame: FrameType | None) -> None:
    # The wakeup pipe carries the signal; the handler only keeps Python from acting on it.
    return None


class StopSignals:
    """SIGTERM and SIGINT as bytes on a pipe the main thread blocks on (no race between a check and a wait)."""

    def __enter__(self) -> StopSignals:
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._previous = {signum: signal.signal(signum, _note) for signum in STOP_SIGNALS}
        return self

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Block until a stop signal arrives and return its number, or return None after TIMEOUT_S seconds."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._read], [], [], remaining)[0]:
                return None
            for signum in os.read(self._read, 64):
                if signum in STOP_SIGNALS:
                    return signum

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read)
        os.close(self._write)
