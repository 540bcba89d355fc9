"""The node bootstrap bundle of one target, rendered at synth time and shipped as an S3 asset.

The one construct that renders a bundle; compute constructs take its `node_bootstrap`, never a config.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from kiln.bootstrap.config import BootstrapConfig
from kiln.bootstrap.fetch import bundle_digest
from kiln.bootstrap.render import render_bundle
from kiln.constructs._checks import PropError, field_name
from kiln.constructs.node_bootstrap import NodeBootstrap


@dataclass(frozen=True, kw_only=True)
class BootstrapAssetsProps:
    """What to render.

    config: the bootstrap config of one target (a cloud target: pcs, parallelcluster, hyperpod or eks).
    """

    config: BootstrapConfig

    def __post_init__(self) -> None:
        if not isinstance(self.config, BootstrapConfig):
            raise PropError(
                f"{field_name(self, 'config')}: got {type(self.config).__name__}, allowed: "
                "kiln.bootstrap.BootstrapConfig"
            )
        if self.config.target == "local":
            raise PropError(
                f"{field_name(self, 'config.target')}: got 'local', allowed: pcs, parallelcluster, hyperpod, eks "
                "(local needs no S3)"
            )


class BootstrapAssets(Construct):
    """Render CONFIG's bundle into a staging directory and upload it as a zipped S3 asset."""

    def __init__(self, scope: Construct, construct_id: str, props: BootstrapAssetsProps) -> None:
        super().__init__(scope, construct_id)
        if not isinstance(props, BootstrapAssetsProps):
            raise PropError(f"{field_name(self, 'props')}: got {type(props).__name__}, allowed: BootstrapAssetsProps")
        # A private directory per synth: parallel synths never share it, and a changed script is never
        # served from an old render. The asset hash comes from the content, so it is stable all the same.
        staging = Path(tempfile.mkdtemp(prefix=f"kiln-bootstrap-{props.config.target}-"))
        atexit.register(shutil.rmtree, staging, ignore_errors=True)
        bundle = render_bundle(props.config, staging)
        self.unverified_artifacts = bundle.unverified_artifacts
        self.entry_point: str = bundle.entry_point
        # The rendered bundle, readable while the app synthesizes (removed when the process ends).
        self.directory: Path = bundle.directory
        self.asset = s3_assets.Asset(self, "Resource", path=str(bundle.directory))
        # The bundle as compute constructs take it: the zip in S3 and its entry point.
        self.node_bootstrap = NodeBootstrap(
            bucket=self.asset.bucket,
            object_key=self.asset.s3_object_key,
            entry_point=bundle.entry_point,
            object_url=self.asset.s3_object_url,
            content_sha256=bundle_digest(bundle.directory),
        )

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let GRANTEE download the bundle."""
        return self.node_bootstrap.grant_read(grantee)
