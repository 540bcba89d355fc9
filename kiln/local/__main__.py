"""Run `kiln local` as `python -m kiln.local local ACTION ...`."""

import sys

from kiln.local.cli import main

sys.exit(main())
