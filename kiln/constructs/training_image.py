"""TrainingImage: an EC2 Image Builder pipeline that bakes a bootstrap bundle's install steps into an AMI.

Each component runs the bundle's own scripts (kiln.contracts.image_components, written as YAML here); the first
image is built when the stack deploys, and `kiln ami build` runs the pipeline again. Every image's id goes to one
SSM parameter, which the compute stacks read, and every AMI carries the versions its install steps recorded as tags.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import aws_cdk as cdk
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_imagebuilder as imagebuilder
from aws_cdk import aws_logs as logs
from constructs import Construct

from kiln.catalog.limits import MAX_TAGS_PER_RESOURCE
from kiln.catalog.platforms import root_device_name, root_device_names, service_fact
from kiln.constructs import acknowledgements
from kiln.constructs._checks import ARN_PARTITION, require, require_in, unresolved
from kiln.constructs.node_bootstrap import NodeBootstrap
from kiln.constructs.review import acknowledge
from kiln.contracts.image import ImageManifest
from kiln.contracts.image_components import ComponentDocument, component_documents
from kiln.contracts.tags import TAG_RECIPE

Architecture = Literal["x86_64", "arm64"]
ImageOs = Literal["ubuntu2204", "ubuntu2404", "al2023"]
# The build instance only compiles and installs (DKMS modules build for its kernel): no accelerator needed.
DEFAULT_BUILD_TYPES: dict[str, tuple[str, ...]] = {"x86_64": ("m6i.2xlarge",), "arm64": ("m7g.2xlarge",)}
_NAME = re.compile(r"[a-z][a-z0-9-]{0,40}[a-z0-9]")
_PARENT = re.compile(rf"ami-[0-9a-f]{{8,17}}|ssm:/[A-Za-z0-9_./-]+|arn:{ARN_PARTITION}:imagebuilder:[^\s]+")
# The managed policies Image Builder requires of a build instance's profile (its setting-up guide).
BUILD_INSTANCE_POLICIES: tuple[str, ...] = tuple(service_fact("imagebuilder", "instance_profile_policies").value)
# Image Builder's own test phase: every install step's marker, checked again on an instance of the new AMI.
TEST_TIMEOUT_MINUTES = 60
# Build logs go to a group under this prefix: Image Builder writes there without an execution role
# (https://docs.aws.amazon.com/imagebuilder/latest/APIReference/API_PipelineLoggingConfiguration.html).
BUILD_LOG_PREFIX = "/aws/imagebuilder/"


def component_yaml(document: ComponentDocument) -> str:
    """Return DOCUMENT as the YAML Image Builder runs (one line per command: tokens stay whole)."""
    return yaml.safe_dump(document.document, sort_keys=False, width=1_000_000)


@dataclass(frozen=True, kw_only=True)
class TrainingImageProps:
    """Props for TrainingImage.

    name: names the pipeline and prefixes its parts (lowercase letters, digits and '-').
    bundle: the zipped bundle whose install steps are baked (BootstrapAssets.node_bootstrap of an image config).
    bundle_digest: a digest of the bundle's content (the asset hash): a new digest makes a new recipe and image.
    manifest: what the bundle's install steps record (kiln.bootstrap.image_recipe.read_manifest); its tags go on
        every AMI.
    parent_image: the image baked on: an AMI id, ssm:/parameter or an Image Builder image ARN (known at synth).
    vpc: the VPC of the build and test instances.
    subnet: the subnet they run in; it needs a route to package mirrors and S3.
    image_parameter_name: the SSM parameter every new image's id is written to.
    root_volume_gib: the image's root volume (encrypted gp3); nodes' root volumes must be at least this size;
        default 100.
    build_instance_types: the build and test instances' EC2 types; default an m6i (x86_64) or m7g (arm64) 2xlarge.
    retain: keep the AMIs and build logs when the stack or a recipe goes; default True (running nodes use them).
    tags: further tags for every AMI (kiln:cluster, the spec's tags); default none: only the tags Image
        Builder and the stack add.
    """

    name: str
    bundle: NodeBootstrap
    bundle_digest: str
    manifest: ImageManifest
    parent_image: str
    vpc: ec2.IVpc
    subnet: ec2.ISubnet
    image_parameter_name: str
    root_volume_gib: int = 100
    build_instance_types: Sequence[str] | None = None
    retain: bool = True
    tags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(
            self, _NAME.fullmatch(self.name) is not None, "name", self.name, "2-42 of a-z, 0-9 and '-', from a letter"
        )
        require(
            self,
            not unresolved(self.parent_image) and _PARENT.fullmatch(self.parent_image) is not None,
            "parent_image",
            self.parent_image,
            "an AMI id, ssm:/parameter or Image Builder image ARN known at synthesis",
        )
        require(self, bool(self.bundle_digest) and not unresolved(self.bundle_digest), "bundle_digest", "", "a digest")
        require_in(self, "manifest.architecture", self.manifest.architecture, DEFAULT_BUILD_TYPES)
        require_in(self, "manifest.os", self.manifest.os, root_device_names())
        require(self, bool(self.manifest.install_steps), "manifest", self.manifest, "a bundle with install steps")
        require(
            self,
            isinstance(self.root_volume_gib, int) and 8 <= self.root_volume_gib <= 16384,
            "root_volume_gib",
            self.root_volume_gib,
            "8..16384",
        )
        # The props' tags, the manifest's and kiln:recipe all land on each AMI, which EC2 tags 50 at most.
        tag_count = len(self.tags.keys() | self.manifest.tags().keys()) + 1
        require(
            self,
            tag_count <= MAX_TAGS_PER_RESOURCE,
            "tags",
            f"{len(self.tags)} tags",
            f"at most {MAX_TAGS_PER_RESOURCE} on an AMI with the manifest's {len(self.manifest.tags())} "
            "and kiln:recipe",
        )
        require(
            self,
            self.image_parameter_name.startswith("/"),
            "image_parameter_name",
            self.image_parameter_name,
            "a parameter path starting with /",
        )

    @property
    def instance_types(self) -> tuple[str, ...]:
        return tuple(self.build_instance_types or DEFAULT_BUILD_TYPES[self.manifest.architecture])

    @property
    def recipe_digest(self) -> str:
        """Return a digest of everything the image is made of: a new one names a new recipe, hence a new image."""
        inputs = [
            self.bundle_digest,
            self.parent_image,
            self.root_volume_gib,
            [
                component_yaml(document)
                for document in component_documents(
                    bundle_uri="s3://bundle", bundle_sha256=self.bundle.content_sha256, install_steps=self._steps
                )
            ],
        ]
        return hashlib.sha256(json.dumps(inputs).encode()).hexdigest()

    @property
    def _steps(self) -> tuple[str, ...]:
        return self.manifest.install_steps


class TrainingImage(Construct):
    """Components, recipe, build infrastructure, distribution and pipeline for one bundle, plus its first image."""

    def __init__(self, scope: Construct, construct_id: str, props: TrainingImageProps) -> None:
        super().__init__(scope, construct_id)
        require(self, isinstance(props, TrainingImageProps), "props", type(props).__name__, "TrainingImageProps")
        self._props = props
        # A digest of everything the image is made of: a new one names a new recipe (its first 10 digits), hence a
        # new image, and tags every AMI (its first 16).
        self.recipe_digest = props.recipe_digest
        digest = self.recipe_digest[:10]
        self.recipe_name = f"{props.name}-{digest}"
        self.log_group = logs.LogGroup(
            self,
            "BuildLogs",
            # Where Image Builder sends the recipe's build and test logs (the pipeline and the image name it); created
            # here so it has a retention. A retained group outlives the stack, so its name is this stack's own: the
            # recipe's, then the stack id's UUID, and a redeploy after `cdk destroy` creates a group of its own
            # instead of failing on the kept one ("already exists").
            log_group_name=cdk.Fn.join(
                "", [f"{BUILD_LOG_PREFIX}{self.recipe_name}-", cdk.Fn.select(2, cdk.Fn.split("/", cdk.Aws.STACK_ID))]
            ),
            retention=logs.RetentionDays.ONE_YEAR,
            removal_policy=cdk.RemovalPolicy.RETAIN if props.retain else cdk.RemovalPolicy.DESTROY,
        )
        self.components = self._components(digest)
        self.role = self._build_role()
        self.instance_profile = iam.CfnInstanceProfile(self, "InstanceProfile", roles=[self.role.role_name])
        self.security_group = ec2.SecurityGroup(
            self,
            "BuildSecurityGroup",
            vpc=props.vpc,
            description=f"kiln {props.name} image builds: no ingress; out to package mirrors and AWS over HTTP(S)",
            allow_all_outbound=False,
        )
        for port in (80, 443):
            # Ubuntu's EC2 mirrors answer on HTTP (packages are signed); vendors and AWS APIs on HTTPS.
            self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(port), f"package mirrors, {port}")
        self.recipe = imagebuilder.CfnImageRecipe(
            self,
            "Recipe",
            name=self.recipe_name,
            version="1.0.0",
            parent_image=props.parent_image,
            description=f"kiln: {' '.join(props.manifest.install_steps)}",
            components=[
                imagebuilder.CfnImageRecipe.ComponentConfigurationProperty(component_arn=component.attr_arn)
                for component in self.components
            ],
            block_device_mappings=[
                imagebuilder.CfnImageRecipe.InstanceBlockDeviceMappingProperty(
                    # The parent's OS's root device (platforms.json, ec2.root_device_names): the recipe resizes it.
                    device_name=root_device_name(props.manifest.os),
                    ebs=imagebuilder.CfnImageRecipe.EbsInstanceBlockDeviceSpecificationProperty(
                        volume_size=props.root_volume_gib, volume_type="gp3", encrypted=True, delete_on_termination=True
                    ),
                )
            ],
            # Nodes keep the SSM agent: `kiln ci run` and operators reach them through Session Manager.
            additional_instance_configuration=imagebuilder.CfnImageRecipe.AdditionalInstanceConfigurationProperty(
                systems_manager_agent=imagebuilder.CfnImageRecipe.SystemsManagerAgentProperty(
                    uninstall_after_build=False
                )
            ),
        )
        self.infrastructure = imagebuilder.CfnInfrastructureConfiguration(
            self,
            "Infrastructure",
            name=props.name,
            description=f"kiln {props.name}: build and test instances in the cluster's compute subnet",
            instance_profile_name=self.instance_profile.ref,
            instance_types=list(props.instance_types),
            subnet_id=props.subnet.subnet_id,
            security_group_ids=[self.security_group.security_group_id],
            instance_metadata_options=imagebuilder.CfnInfrastructureConfiguration.InstanceMetadataOptionsProperty(
                http_tokens="required", http_put_response_hop_limit=1
            ),
            terminate_instance_on_failure=True,
            resource_tags=dict(props.tags),
        )
        self.distribution = imagebuilder.CfnDistributionConfiguration(
            self,
            "Distribution",
            name=props.name,
            description=f"kiln {props.name}: tag each AMI with its versions and publish its id",
            distributions=[
                imagebuilder.CfnDistributionConfiguration.DistributionProperty(
                    region=cdk.Aws.REGION,
                    ami_distribution_configuration={
                        "Name": f"{props.name}-{{{{ imagebuilder:buildDate }}}}",
                        "Description": f"kiln {props.name}: {' '.join(props.manifest.install_steps)}",
                        "AmiTags": self.ami_tags,
                    },
                    ssm_parameter_configurations=[
                        imagebuilder.CfnDistributionConfiguration.SsmParameterConfigurationProperty(
                            parameter_name=props.image_parameter_name, data_type="aws:ec2:image"
                        )
                    ],
                )
            ],
        )
        self.pipeline = imagebuilder.CfnImagePipeline(
            self,
            "Pipeline",
            name=props.name,
            description=f"kiln {props.name}: run by `kiln ami build` and whenever the recipe changes",
            image_recipe_arn=self.recipe.attr_arn,
            infrastructure_configuration_arn=self.infrastructure.attr_arn,
            distribution_configuration_arn=self.distribution.attr_arn,
            image_tests_configuration=imagebuilder.CfnImagePipeline.ImageTestsConfigurationProperty(
                image_tests_enabled=True, timeout_minutes=TEST_TIMEOUT_MINUTES
            ),
            enhanced_image_metadata_enabled=True,
            status="ENABLED",
            logging_configuration=imagebuilder.CfnImagePipeline.PipelineLoggingConfigurationProperty(
                image_log_group_name=self.log_group.log_group_name
            ),
        )
        # The first image, built while the stack deploys, and again whenever the pipeline changes (a new recipe).
        self.image = imagebuilder.CfnImage(
            self,
            "Image",
            image_pipeline_execution_settings=imagebuilder.CfnImage.ImagePipelineExecutionSettingsProperty(
                deployment_id=self.pipeline.attr_deployment_id, on_update=True
            ),
            logging_configuration=imagebuilder.CfnImage.ImageLoggingConfigurationProperty(
                log_group_name=self.log_group.log_group_name
            ),
        )
        policy = cdk.RemovalPolicy.RETAIN if props.retain else cdk.RemovalPolicy.DESTROY
        # A retained image keeps its AMI: nodes launched from it keep scaling while a new image rolls out.
        self.image.apply_removal_policy(policy)
        self.image.node.add_dependency(self.log_group)

    @property
    def ami_tags(self) -> dict[str, str]:
        """Return the tags of every AMI: the manifest's versions, the recipe digest and the props' tags."""
        return {**self._props.tags, **self._props.manifest.tags(), TAG_RECIPE: self.recipe_digest[:16]}

    @property
    def image_id(self) -> str:
        """The AMI id of the image built at deploy time."""
        return self.image.attr_image_id

    def _components(self, digest: str) -> list[imagebuilder.CfnComponent]:
        props = self._props
        components = []
        documents = component_documents(
            bundle_uri=props.bundle.s3_url,
            bundle_sha256=props.bundle.content_sha256,
            install_steps=props.manifest.install_steps,
        )
        for document in documents:
            component = imagebuilder.CfnComponent(
                self,
                f"Component{document.name.capitalize()}",
                # Components are immutable: new contents need a new name, which the digest gives.
                name=f"{props.name}-{document.name}-{digest}",
                platform="Linux",
                version="1.0.0",
                description=document.description,
                data=component_yaml(document),
            )
            components.append(component)
        return components

    def _build_role(self) -> iam.Role:
        props = self._props
        # Exactly the policies Image Builder documents for a build instance's profile, plus the bundle.
        role = iam.Role(
            self,
            "BuildRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"kiln {props.name} image builds: what Image Builder requires of build instances, the bundle",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in BUILD_INSTANCE_POLICIES],
        )
        props.bundle.grant_read(role)
        acknowledge(role, acknowledgements.SSM_CORE, acknowledgements.IMAGE_BUILDER_INSTANCE)
        return role
