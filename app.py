#!/usr/bin/env python3
"""CDK entry point: `npx cdk synth -c spec=cluster.yaml` (without -c spec, ./cluster.yaml if it exists)."""

import sys

from kiln.bootstrap.readiness import ACCEPT_UNREADY_CONTEXT, unready_lines
from kiln.host.node_runtime import NodeUnavailable, require_node
from kiln.spec import SpecError

try:
    require_node()  # jsii starts Node.js when kiln.stacks loads the CDK: kiln's choice, as for every kiln command
except NodeUnavailable as exc:
    sys.exit(f"kiln: {exc}")

from kiln.node_config.judge import load_and_judge  # noqa: E402 - after the Node.js choice
from kiln.stacks.app import NoSpecGiven, build_cluster, new_app, spec_path_from_context  # noqa: E402
from kiln.stacks.ci_mode import ci_environment  # noqa: E402

app = new_app()
try:
    # Judged as `kiln validate` judges it: a spec whose nodes' bundle cannot be built (a bad lock file, say) stops
    # here with its lines, and so does one whose nodes would not boot, unless -c accept_unready=true.
    path = str(spec_path_from_context(app.node.try_get_context("spec")))
    spec, readiness = load_and_judge(path)
except NoSpecGiven as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
except SpecError as exc:
    print("\n".join(exc.lines_out()), file=sys.stderr)
    sys.exit(2)
if not readiness.ready:
    accepted = str(app.node.try_get_context(ACCEPT_UNREADY_CONTEXT)).lower() == "true"
    print("\n".join(unready_lines(path, readiness, accepted=accepted)), file=sys.stderr)
    if not accepted:
        sys.exit(1)
# A spec with ci.ttl_hours is a short-lived environment of itself: it deploys with its reaper.
try:
    build_cluster(app, spec, ci=ci_environment(spec))
except SpecError as exc:
    # What only the synthesis can tell (an EKS cluster's second AZ with no account to look it up): one line each.
    print("\n".join(SpecError(path, exc.problems).lines_out()), file=sys.stderr)
    sys.exit(2)
app.synth()
