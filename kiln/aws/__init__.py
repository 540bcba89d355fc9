"""kiln's one AWS layer for the commands: the session and its clients (session.py), AWS's refusals in one line
(errors.py), and the ways to run a command on a cluster's nodes (remote/). Callers import each name from its module."""
