"""Build every stack of a spec into a CDK app, with tags and the cdk-nag AwsSolutions pack."""

from __future__ import annotations

import os
from dataclasses import dataclass

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from kiln.spec import ClusterSpec
from kiln.stacks.compute import ComputeStack, has_compute
from kiln.stacks.naming import stack_name
from kiln.stacks.network import NetworkStack
from kiln.stacks.storage import StorageStack
from kiln.stacks.tidy import DropRedundantDependsOn

# Behaviour switches the stacks rely on; set on the App so every entry point (cdk CLI,
# `kiln report`, tests) synthesizes the same templates.
FEATURE_FLAGS = {
    "@aws-cdk/aws-ec2:restrictDefaultSecurityGroup": True,
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True,
    "@aws-cdk/core:enablePartitionLiterals": True,
    "@aws-cdk/aws-iam:minimizePolicies": True,
}


DEFAULT_SPEC_FILE = "cluster.yaml"
NO_SPEC = (
    "kiln: no spec given and no ./cluster.yaml here: pass one with "
    "`npx cdk deploy --all -c spec=path/to/cluster.yaml` (start from examples/quickstart.yaml)"
)


class NoSpecGiven(ValueError):
    """The app was run without `-c spec=...` and there is no ./cluster.yaml to use."""


def spec_path_from_context(given: object) -> str:
    """Return the spec the app builds: `-c spec=...` if given, else ./cluster.yaml; never a silent example."""
    if isinstance(given, str) and given.strip():
        return given
    if os.path.isfile(DEFAULT_SPEC_FILE):
        return DEFAULT_SPEC_FILE
    raise NoSpecGiven(NO_SPEC)


def new_app(outdir: str | None = None) -> cdk.App:
    """Return an App with kiln's feature flags.

    CDK's built-in template validator is off: every template kiln ships is linted by the real
    cfn-lint (tests, `kiln report`), and the built-in one cost 4-7 s per synth, most of it.
    """
    return cdk.App(outdir=outdir, context=dict(FEATURE_FLAGS), builtin_cloud_formation_validation=False)


@dataclass(frozen=True)
class ClusterStacks:
    """The stacks built for one spec."""

    network: NetworkStack
    storage: StorageStack
    compute: ComputeStack | None

    def all(self) -> list[cdk.Stack]:
        return [s for s in (self.network, self.storage, self.compute) if s is not None]


def environment(spec: ClusterSpec) -> cdk.Environment | None:
    """Return the stacks' environment: pinned to the spec's region, or env-agnostic without one."""
    if spec.region is None:
        return None
    return cdk.Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=spec.region)


def build_cluster(app: cdk.App, spec: ClusterSpec, *, nag: bool = True) -> ClusterStacks:
    """Add the stacks for SPEC to APP and return them."""
    env = environment(spec)
    network = NetworkStack(app, stack_name(spec.name, "network"), spec=spec, env=env)
    storage = StorageStack(app, stack_name(spec.name, "storage"), spec=spec, network=network, env=env)
    compute = None
    if has_compute(spec):
        compute = ComputeStack(
            app, stack_name(spec.name, "compute"), spec=spec, network=network, storage=storage, env=env
        )
    stacks = ClusterStacks(network=network, storage=storage, compute=compute)
    for stack in stacks.all():
        cdk.Aspects.of(stack).add(DropRedundantDependsOn())
        cdk.Tags.of(stack).add("kiln:cluster", spec.name)
        for key, value in spec.tags.items():
            cdk.Tags.of(stack).add(key, value)
    if nag:
        cdk.Validations.of(app).add_plugins(
            AwsSolutionsChecks(app, verbose=True, write_suppressions_to_cloud_formation=True)
        )
    return stacks
