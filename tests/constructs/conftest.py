"""Fixtures for construct tests (their builders: tests/support/constructs.py and the modules beside it)."""

from __future__ import annotations

# The EKS clusters test_eks*.py share (built once per test process).
from tests.support.eks_clusters import eks as eks
