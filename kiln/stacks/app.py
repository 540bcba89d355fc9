"""Build every stack of a spec into a CDK app, with tags and the cdk-nag AwsSolutions pack."""

from __future__ import annotations

import os
from dataclasses import dataclass

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from kiln.contracts.environment import REAPER_PART, stack_name
from kiln.contracts.errors import InputError
from kiln.contracts.image import IMAGE_PART, image_stack_name
from kiln.spec import ClusterSpec
from kiln.spec.rules.image import NO_BAKE_IN_CI
from kiln.stacks.ci_mode import CiEnvironment, environment_spec, own_tags
from kiln.stacks.compute import ComputeStack, has_compute
from kiln.stacks.errors import UnbuildableSpec
from kiln.stacks.feature_flags import FEATURE_FLAGS
from kiln.stacks.image import ImageStack, bakes_image
from kiln.stacks.network import NetworkStack
from kiln.stacks.permissions_boundary import apply_boundary, boundary_name, tag_plain_roles
from kiln.stacks.reaper import ReaperStack
from kiln.stacks.storage import StorageStack
from kiln.stacks.tidy import add_template_aspects

# Resource types whose Tags are create-only (their resource schemas): only kiln's own tags, fixed for a stack's life.
FIXED_TAG_TYPES = ("AWS::EC2::PlacementGroup",)
# The resource type CDK's tag aspect gives a stack's own tags (its TagManager's).
STACK_TAG_TYPE = "aws:cdk:stack"

DEFAULT_SPEC_FILE = "cluster.yaml"
# The cdk CLI gives the app no argument, and the same context for synth, diff and deploy: say what holds for all.
NO_SPEC = (
    "kiln: no spec given and no ./cluster.yaml here: add `-c spec=path/to/cluster.yaml` to the cdk command "
    "(start from examples/quickstart.yaml)"
)


class NoSpecGiven(InputError):
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
    """The stacks built for one spec (or one short-lived environment of it)."""

    network: NetworkStack
    storage: StorageStack
    compute: ComputeStack | None
    reaper: ReaperStack | None = None
    image: ImageStack | None = None

    def all(self) -> list[cdk.Stack]:
        stacks = (self.reaper, self.network, self.storage, self.image, self.compute)
        return [s for s in stacks if s is not None]


def environment(spec: ClusterSpec, account: str | None = None) -> cdk.Environment | None:
    """Return the stacks' environment: pinned to the spec's region, or env-agnostic without one; in ACCOUNT, else in
    the one the CDK CLI names (CDK_DEFAULT_ACCOUNT: its credentials'), else account-agnostic."""
    if spec.region is None:
        return None
    return cdk.Environment(account=account or os.environ.get("CDK_DEFAULT_ACCOUNT"), region=spec.region)


def build_cluster(
    app: cdk.App,
    spec: ClusterSpec,
    *,
    nag: bool = True,
    ci: CiEnvironment | None = None,
    account: str | None = None,
) -> ClusterStacks:
    """Add the stacks for SPEC to APP and return them; CI: build it as that short-lived environment; ACCOUNT: the
    account the stacks deploy to, as the CDK CLI gives it (default: CDK_DEFAULT_ACCOUNT's, if set)."""
    if ci is not None:
        spec = environment_spec(spec, ci)
    env = environment(spec, account)
    reaper = None
    if ci is not None and ci.ttl_hours is not None:
        reaper = ReaperStack(app, stack_name(spec.name, REAPER_PART), ci=ci, env=env)
    network = NetworkStack(app, stack_name(spec.name, "network"), spec=spec, ci=ci, env=env)
    if reaper is not None:
        # Deployed first, so a deploy that fails halfway is still deleted when the TTL ends; deleted last.
        network.add_stack_dependency(reaper)
    storage = StorageStack(app, stack_name(spec.name, "storage"), spec=spec, network=network, ci=ci, env=env)
    image = None
    if bakes_image(spec) and has_compute(spec):
        if ci is not None:
            raise UnbuildableSpec(f"compute.image.bake {NO_BAKE_IN_CI}")
        image = ImageStack(app, image_stack_name(spec.name), spec=spec, network=network, env=env)
    compute = None
    if has_compute(spec):
        compute = ComputeStack(
            app,
            stack_name(spec.name, "compute"),
            spec=spec,
            network=network,
            storage=storage,
            image=image,
            ci=ci,
            env=env,
        )
    stacks = ClusterStacks(network=network, storage=storage, compute=compute, reaper=reaper, image=image)
    boundary = boundary_name(spec, ci)
    parts = (
        (reaper, REAPER_PART),
        (network, "network"),
        (storage, "storage"),
        (image, IMAGE_PART),
        (compute, "compute"),
    )
    for stack, part in parts:
        if stack is None:
            continue
        add_template_aspects(stack)
        if boundary is not None:
            apply_boundary(stack, boundary)
        tags = own_tags(spec, ci, part)
        if ci is not None:
            tag_plain_roles(stack, tags)
        for key, value in tags.items():
            cdk.Tags.of(stack).add(key, value)
        for key, value in spec.tags.items():
            # A placement group's Tags are create-only and compute imports its name: the spec's tags, which change,
            # stay off it, so a tags change updates the cluster instead of being refused (kiln/changes). They stay
            # off the stack's own tags too: CloudFormation applies stack tags to the resources, and whether it
            # replaces a resource whose Tags are create-only for that is undocumented ("varies by resource type").
            cdk.Tags.of(stack).add(key, value, exclude_resource_types=[STACK_TAG_TYPE, *FIXED_TAG_TYPES])
    if nag:
        cdk.Validations.of(app).add_plugins(
            AwsSolutionsChecks(app, verbose=True, write_suppressions_to_cloud_formation=True)
        )
    return stacks
