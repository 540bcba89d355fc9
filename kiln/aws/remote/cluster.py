"""The cluster as its compute stack's outputs describe it (ClusterHandle), and the errors reaching it raises."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from kiln.aws.errors import error_code, error_message, explain, one_line, raise_if_no_credentials
from kiln.contracts.backends import BACKENDS, ORCHESTRATED_BACKENDS, Platform, platform_of
from kiln.contracts.environment import stack_name
from kiln.contracts.errors import Failure
from kiln.contracts.outputs import ComputeOutput

if TYPE_CHECKING:
    from kiln.aws.session import Session

# Stacks in these states have no outputs kiln can rely on.
UNUSABLE_STACK_STATES = ("CREATE_IN_PROGRESS", "CREATE_FAILED", "ROLLBACK", "DELETE")


class RemoteError(Failure):
    """A cluster kiln cannot reach or a call AWS refused; str() is one line: what is wrong and what to do."""


class Unreachable(RemoteError):
    """The node to run on does not exist yet or Systems Manager cannot reach it yet; waiting may help."""


class NotRunning(RemoteError):
    """The node asked for by its id is not one of the running candidates; RUNNING lists those that are."""

    def __init__(self, node: str, what: str, running: list[str]) -> None:
        super().__init__(f"{node} is not a running {what}; running: {', '.join(running)}")
        self.node, self.what, self.running = node, what, running


@dataclass(frozen=True)
class ClusterHandle:
    """A CI environment's cluster as the outputs of its ``<environment>-compute`` stack describe it."""

    environment: str
    region: str
    outputs: Mapping[str, str] = field(hash=False)
    # The command that deploys the stack, for messages: `kiln ci up` for an environment, `cdk deploy` for a cluster.
    deployed_by: str = field(default="kiln ci up", compare=False)

    @classmethod
    def from_stack(
        cls, session: Session, environment: str, region: str, deployed_by: str = "kiln ci up"
    ) -> ClusterHandle:
        """Read the outputs of ENVIRONMENT's compute stack in REGION with cloudformation:DescribeStacks.

        ENVIRONMENT is a CI environment's name, or a cluster's (its spec's name); DEPLOYED_BY the command that deploys
        it, named in messages.
        """
        name = stack_name(environment, "compute")
        cloudformation = session.client("cloudformation", region_name=region)
        try:
            stacks = cloudformation.describe_stacks(StackName=name)["Stacks"]
        except ClientError as error:
            raise_if_no_credentials(error)
            if error_code(error) == "ValidationError" and "does not exist" in error_message(error):
                raise RemoteError(
                    f"stack {name} does not exist in {region}: deploy it with `{deployed_by}` first "
                    "(or pass the region it was deployed in)"
                ) from None
            raise RemoteError(explain(f"cloudformation:DescribeStacks {name}", error)) from None
        except BotoCoreError as error:
            raise_if_no_credentials(error)
            raise RemoteError(f"cloudformation:DescribeStacks {name}: {one_line(str(error))}") from None
        stack = stacks[0]
        status = stack.get("StackStatus", "")
        if any(status.startswith(state) for state in UNUSABLE_STACK_STATES):
            raise RemoteError(
                f"stack {name} is {status}: `{deployed_by}` must finish deploying it before kiln can use it"
            )
        outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in stack.get("Outputs", [])}
        handle = cls(environment=environment, region=region, outputs=outputs, deployed_by=deployed_by)
        handle.backend  # noqa: B018 - fail here, with the stack named, when the outputs are not kiln's
        return handle

    @property
    def stack_name(self) -> str:
        """Return the compute stack's name."""
        return stack_name(self.environment, "compute")

    def output(self, key: ComputeOutput) -> str:
        """Return the output KEY of the compute stack; one line naming it when the stack lacks it."""
        value = self.outputs.get(key.value, "")
        if not value:
            raise RemoteError(
                f"stack {self.stack_name} has no output {key.value}: it was deployed by an older kiln or another tool; "
                f"redeploy it with `{self.deployed_by}`"
            )
        return value

    @property
    def backend(self) -> str:
        """Return the backend: pcs, parallelcluster, hyperpod or eks."""
        backend = self.output(ComputeOutput.BACKEND)
        if backend not in BACKENDS:
            raise RemoteError(
                f"stack {self.stack_name}: output Backend is {backend!r}, kiln knows {', '.join(BACKENDS)}"
            )
        return backend

    @property
    def orchestrator(self) -> str:
        """Return the orchestrator: slurm, eks or none."""
        return self.output(ComputeOutput.ORCHESTRATOR)

    @property
    def cluster_name(self) -> str:
        """Return the backend's name for the cluster."""
        return self.output(ComputeOutput.CLUSTER_NAME)

    @property
    def platform(self) -> Platform:
        """Return the cluster's row of the backend table: its backend, with the orchestrator where it takes one."""
        backend = self.backend
        return platform_of(backend, self.orchestrator if backend in ORCHESTRATED_BACKENDS else None)

    @property
    def uses_kubernetes(self) -> bool:
        """Return whether Kubernetes runs the cluster (EKS, or HyperPod orchestrated by EKS)."""
        return self.platform.uses_kubernetes

    @property
    def pcs_login_node_group_id(self) -> str | None:
        """Return the PCS login node group's id, or None when the spec has no login nodes."""
        return self.outputs.get(ComputeOutput.PCS_LOGIN_NODE_GROUP_ID.value) or None

    @property
    def hyperpod_cluster_arn(self) -> str:
        """Return the HyperPod cluster's ARN."""
        return self.output(ComputeOutput.HYPERPOD_CLUSTER_ARN)

    @property
    def hyperpod_cluster_id(self) -> str:
        """Return the HyperPod cluster id: the last part of its ARN, as Session Manager targets name it."""
        return self.hyperpod_cluster_arn.rsplit("/", 1)[-1]

    @property
    def eks_cluster_name(self) -> str:
        """Return the EKS cluster's name."""
        return self.output(ComputeOutput.EKS_CLUSTER_NAME)
