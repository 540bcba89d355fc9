"""The Systems Manager documents kiln runs commands and sessions with: `kiln ci run` and `kiln connect` use them, the
CI role and the README's policy grant exactly them. All are AWS's own (no account in their ARNs) but the default
shell document, which each account holds with its Session Manager preferences."""

from __future__ import annotations

# Run Command's shell document: `kiln ci run` on EC2 nodes (PCS login node, ParallelCluster head node).
# https://docs.aws.amazon.com/systems-manager/latest/userguide/run-command-version.html
RUN_SHELL_DOCUMENT = "AWS-RunShellScript"
# A session that runs one command and ends: `kiln ci run` on HyperPod nodes.
# https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-sessions-start.html
NON_INTERACTIVE_COMMAND_DOCUMENT = "AWS-StartNonInteractiveCommand"
# Port forwarding to a host the node reaches (an EKS API's private endpoint); its parameters are host, portNumber and
# localPortNumber (same page).
PORT_FORWARD_DOCUMENT = "AWS-StartPortForwardingSessionToRemoteHost"
# Port forwarding to a port of the node itself (code-server); its parameters are portNumber and localPortNumber
# (same page, and https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-specify-session-document.html).
LOCAL_PORT_FORWARD_DOCUMENT = "AWS-StartPortForwardingSession"
# The document a session without --document-name uses: the account's own (same getting-started page).
DEFAULT_SHELL_DOCUMENT = "SSM-SessionManagerRunShell"


def session_document(cluster: str) -> str:
    """Return the name of CLUSTER's own Session document (spec session_logs): the shell `kiln connect` opens with
    --document-name, logged where the spec says. Never the account's SSM-SessionManagerRunShell, which kiln did not
    create and never changes. Document names may not start with aws, amazon or amzn (CreateDocument's Name,
    https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_CreateDocument.html); this one starts with
    kiln-, and a cluster name is at most 32 characters, well inside the 128 allowed."""
    return f"kiln-{cluster}-session"
