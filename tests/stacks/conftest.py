"""Fixtures for the stack tests: the security review's scan, shared by the modules that read it."""

from __future__ import annotations

# Every example, CI environment and the CI identity, synthesized once and scanned (session scope).
from tests.support.security_scan import scanned as scanned
