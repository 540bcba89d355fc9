"""The kiln file system on an EksTrainingCluster: its PersistentVolume and claim for jobs, and code-server's pod with
a claim of its own on the same file system (kiln.constructs.eks_addons and eks_code_server write the objects)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import aws_eks_v2 as eks

from kiln.constructs.eks_addons import LustreVolumeNames, lustre_volume_manifests
from kiln.constructs.eks_code_server import CodeServerPod, code_server_manifests
from kiln.constructs.eks_props import LustreVolume

if TYPE_CHECKING:
    from kiln.constructs.eks import EksTrainingCluster


def add_lustre_volume(training: EksTrainingCluster, lustre: LustreVolume) -> eks.KubernetesManifest:
    """Offer LUSTRE's file system to TRAINING's pods: a storage class, a statically bound PV and its claim."""
    names = LustreVolumeNames(
        storage_class=lustre.storage_class,
        volume=lustre.volume_name,
        claim=lustre.claim_name,
        namespace=lustre.namespace,
    )
    return training.add_manifest(
        "LustreVolume",
        *lustre_volume_manifests(
            names,
            file_system_id=lustre.file_system.file_system_id,
            dns_name=lustre.file_system.dns_name,
            mount_name=lustre.file_system.mount_name,
            storage_gib=lustre.storage_gib,
        ),
    )


def add_code_server(
    training: EksTrainingCluster, pod: CodeServerPod, lustre: LustreVolume, volume: eks.KubernetesManifest | None
) -> eks.KubernetesManifest:
    """Run code-server on TRAINING's system nodes with the Lustre volume: its own claim in its namespace (a claim
    serves one namespace), bound to the file system as the jobs' is, in the storage class VOLUME (the Lustre volume's
    manifest, applied first) created."""
    manifest = training.add_manifest(
        "CodeServer",
        *code_server_manifests(
            pod,
            storage_class=lustre.storage_class,
            file_system_id=lustre.file_system.file_system_id,
            dns_name=lustre.file_system.dns_name,
            mount_name=lustre.file_system.mount_name,
            storage_gib=lustre.storage_gib,
        ),
    )
    if volume is not None:
        manifest.node.add_dependency(volume)
    return manifest
