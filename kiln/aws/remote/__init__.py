"""Reach a deployed cluster's nodes (`kiln ci run`, `kiln connect`): find a node from the compute stack's outputs and
run a command there, or forward a port to it.

The modules: ``cluster`` reads the compute stack's outputs (ClusterHandle) and holds the errors; ``nodes`` finds the
node a command runs on (a Target); ``transport`` is the protocol every way of running a command follows, chooses one
for a Target and runs the command (run_command); ``ssm_run_command``, ``session`` and ``kubectl`` are the three
transports; ``forward`` is Session Manager's port forwarding; ``processes`` starts, streams and stops the AWS CLI and
kubectl; ``exit_codes`` are the codes a command gets when it did not end on its own. Callers import each name from
the module that defines it.

Commands travel through AWS Systems Manager, never SSH:

- EC2 nodes (the PCS login node, the ParallelCluster head node): Run Command with ``AWS-RunShellScript``.
  GetCommandInvocation keeps only the first 24,000 characters of a command's output and 8,000 of its errors,
  and AWS documents both as possibly empty until the command ends, so output may arrive in one piece at the end.
  kiln prints a notice when output was cut; write long output to a file on the shared file system instead.
- HyperPod nodes: Run Command does not reach them, Session Manager does, at the target
  ``sagemaker-cluster:<cluster-id>_<instance-group>-<instance-id>``. kiln runs ``aws ssm start-session
  --document-name AWS-StartNonInteractiveCommand`` as a subprocess (the AWS CLI and the session-manager-plugin
  must be on PATH, as on GitHub's hosted runners). The agent merges the command's stdout and stderr and the
  session does not carry its exit code, so kiln wraps the command to print a marker line with ``$?`` and strips
  that line from what it shows.
- Kubernetes (EKS, and HyperPod orchestrated by EKS): the command runs here, on the runner, with ``KUBECONFIG``
  naming a kubeconfig kiln writes from ``eks:DescribeCluster`` (mode 0600) and deletes afterwards. Its user gets
  tokens from ``aws eks get-token``. How the runner reaches the API depends on ``endpointPublicAccess``:

  - public (a spec's ``public-and-private`` endpoint, whose CIDRs must admit the runner): the kubeconfig names the
    endpoint itself.
  - private only (kiln's default): a runner outside the VPC cannot reach it, so kiln forwards a free local port to
    the endpoint's port 443 through a running node of the cluster's ``system`` node group (found by its
    ``kiln:eks-cluster`` and ``kiln:node-group`` tags) with ``aws ssm start-session --document-name
    AWS-StartPortForwardingSessionToRemoteHost`` (the AWS CLI and the session-manager-plugin on PATH). The
    kubeconfig names ``https://127.0.0.1:PORT`` with the endpoint's host as ``tls-server-name``, so kubectl still
    verifies the cluster's certificate. The forward is stopped and its session ended after the command, whatever
    its outcome.

On a node the command runs as root (Run Command's user, and Session Manager's on HyperPod unless its Run As
preference names another user), in a login bash in root's home, with Slurm's and kiln's bin directories on PATH.
kiln does not switch to the image's default user: it differs by image (``ubuntu``, ``ec2-user``), and Slurm
accepts root's jobs unless ``DisableRootJobs`` is set. Prefix the command with ``runuser -u USER --`` to switch.

Exit codes: the command's own; 124 when it ran out of time (kiln's timeout, or Run Command's execution or
delivery timeout); 130 when it was cancelled; 255 when a HyperPod session ended without reporting one.
"""
