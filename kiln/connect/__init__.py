"""`kiln connect`: a shell on the node you log in to, or code-server on this machine, through Session Manager.

run.py finds the node and starts the AWS CLI; iam.py is the least an identity needs to do so; cli.py registers it.
"""
