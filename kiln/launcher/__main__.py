"""Run ``kiln-launch`` as ``python -m kiln.launcher``."""

from kiln.launcher.cli import main

raise SystemExit(main())
