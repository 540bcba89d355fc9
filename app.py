#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth -c spec=examples/quickstart.yaml`."""

import sys

from kiln.spec import SpecError, load_spec
from kiln.stacks import build_cluster, new_app

DEFAULT_SPEC = "examples/quickstart.yaml"

app = new_app()
try:
    spec = load_spec(app.node.try_get_context("spec") or DEFAULT_SPEC)
except SpecError as exc:
    print("\n".join(exc.lines_out()), file=sys.stderr)
    sys.exit(2)
build_cluster(app, spec)
app.synth()
