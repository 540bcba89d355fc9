"""Node-side Prometheus exporters: Slurm's view of the cluster and the EFA devices' hardware counters.

Run as ``kiln-metrics slurm|efa --listen ADDRESS:PORT``; beside them ``kiln-metrics targets`` and
``kiln-metrics agent-config`` give the Prometheus agent its nodes and configuration. The package imports the
standard library, prometheus_client and kiln.catalog's exporters and names (standard library only): a node
installs it without the toolkit's CDK, boto3 or pydantic.
"""

from __future__ import annotations
