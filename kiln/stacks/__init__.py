"""The one layer that reads the spec to build: spec -> props -> stacks (aws-cdk-lib), one module per stack and per
backend. Import each name from its module (kiln.stacks.app, kiln.stacks.compute, ...): the package itself loads no
CDK, so its CDK-free modules (zones, retention, feature_flags) serve `kiln validate` without aws-cdk-lib. The spec's
translation into the nodes' bootstrap configuration is kiln.node_config's."""

from kiln.stacks.feature_flags import FEATURE_FLAGS

# The flags kiln synthesizes with, for your own app: cdk.App(context=FEATURE_FLAGS) (README, "Using the constructs
# in your own CDK app").
__all__ = ["FEATURE_FLAGS"]
