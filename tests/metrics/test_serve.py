"""--listen parsing and serving a registry in-process."""

from __future__ import annotations

import pytest

from kiln.metrics.serve import Listen, parse_listen


@pytest.mark.parametrize(
    ("text", "listen"),
    [
        ("127.0.0.1:9100", Listen("127.0.0.1", 9100)),
        ("0.0.0.0:0", Listen("0.0.0.0", 0)),  # noqa: S104 - parsed, never bound
        (":9100", Listen("", 9100)),
        ("10.1.2.3:65535", Listen("10.1.2.3", 65535)),
    ],
)
def test_parse_listen(text: str, listen: Listen) -> None:
    assert parse_listen(text) == listen
    assert str(listen) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("9100", "expected ADDRESS:PORT"),
        ("127.0.0.1:", "expected ADDRESS:PORT"),
        ("127.0.0.1:65536", "port 0..65535"),
        ("127.0.0.1:+1", "port 0..65535"),
        ("127.0.0.1:٣", "port 0..65535"),  # a digit, but not an ASCII one
        ("localhost:9100", "IPv4 address"),
        ("127.0.0.01:9100", "IPv4 address"),
        ("[::1]:9100", "IPv4 address"),
        ("::1:9100", "IPv4 address"),
    ],
)
def test_parse_listen_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_listen(text)
