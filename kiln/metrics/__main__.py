"""Run ``kiln-metrics`` as ``python -m kiln.metrics``."""

from __future__ import annotations

from kiln.metrics.cli import main

raise SystemExit(main())
