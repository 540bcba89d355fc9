"""An install Job on an EksTrainingCluster, applied and waited for: the deployment goes on only once the Job succeeded,
and the Job's cluster-admin grant is taken back from outside it either way (kiln.constructs.eks_install writes the
Job's objects)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_cdk import Duration, Stack
from aws_cdk import aws_eks_v2 as eks

from kiln.constructs.eks_addons import GitHelmAddon
from kiln.constructs.eks_install import (
    INSTALL_WAIT_MINUTES,
    JOB_FINISHED_PATH,
    SUCCEEDED_WAIT_MINUTES,
    git_helm_job_manifests,
    install_grant,
    revoked_binding_patch,
)

if TYPE_CHECKING:
    from kiln.constructs.eks import EksTrainingCluster


def pascal(key: str) -> str:
    """Return an add-on's key (such as "training-operator") as the construct id kiln gives it."""
    return "".join(part.capitalize() for part in key.split("-"))


def install_and_wait(
    training: EksTrainingCluster, key: str, objects: list[dict[str, Any]], wait_id: str
) -> eks.KubernetesObjectValue:
    """Apply an install's OBJECTS (install_job_manifests) on TRAINING as its addons[KEY] and take its cluster-admin
    grant back from outside the Job, whether the install succeeds or fails; return the wait for the Job's success.

    In order: the manifest; Finished, a wait (INSTALL_WAIT_MINUTES) for the Job to end either way, which it does
    within its activeDeadlineSeconds; Revoke, a patch that empties the binding's subjects (and names the Job, so a new
    Job that re-grants it is followed by a new patch); then WAIT_ID, which fails the deployment unless the Job
    succeeded. A failed deployment rolls back: on create CloudFormation deletes the manifest (binding and all); on
    update it re-applies the previous objects, whose Job revokes at its end, and the previous Revoke is applied again;
    on delete, Revoke's restore is the same empty-subjects patch."""
    name = pascal(key)
    cluster: eks.ICluster = training.cluster  # type: ignore[assignment]  # jsii's Python Cluster omits ICluster's kubectl_provider_options
    install = training.add_manifest(name, *objects)
    training.addons[key] = install
    binding, job = install_grant(objects)
    job_name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    finished = eks.KubernetesObjectValue(
        training,
        f"{name}Finished",
        cluster=cluster,
        object_type="job",
        object_name=job_name,
        object_namespace=namespace,
        json_path=JOB_FINISHED_PATH,
        timeout=Duration.minutes(INSTALL_WAIT_MINUTES),
    )
    finished.node.add_dependency(install)
    if training.system_node_group is not None:
        # The Job runs on the system nodes: waiting starts once they exist.
        finished.node.add_dependency(training.system_node_group)
    revoked = revoked_binding_patch(job_name)
    revoke = eks.KubernetesPatch(
        training,
        f"{name}Revoke",
        cluster=cluster,
        resource_name=f"clusterrolebinding/{binding['metadata']['name']}",
        apply_patch=revoked,
        restore_patch=revoked,
        patch_type=eks.PatchType.MERGE,
    )
    revoke.node.add_dependency(finished)
    succeeded = eks.KubernetesObjectValue(
        training,
        wait_id,
        cluster=cluster,
        object_type="job",
        object_name=job_name,
        object_namespace=namespace,
        json_path=".status.succeeded",
        timeout=Duration.minutes(SUCCEEDED_WAIT_MINUTES),
    )
    succeeded.node.add_dependency(revoke)
    return succeeded


def install_chart_and_wait(
    training: EksTrainingCluster, addon: GitHelmAddon, wait_id: str
) -> eks.KubernetesObjectValue:
    """Install ADDON's chart at its pinned commit on TRAINING (a Job, on the system nodes while no other node exists),
    and return the wait for that Job's success."""
    objects = git_helm_job_manifests(addon, Stack.of(training).region, training.install_tools)
    return install_and_wait(training, addon.name, objects, wait_id)
