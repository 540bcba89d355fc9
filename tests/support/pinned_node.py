"""Importing this module points jsii at the pinned Node 22 from node_modules, not the system's.

The root conftest imports it first, before any conftest or test module imports the CDK (jsii starts Node then).
"""

from __future__ import annotations

import os

from kiln.host.node_runtime import use_pinned_node

use_pinned_node()
os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
