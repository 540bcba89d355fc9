"""Node-side Prometheus exporters: Slurm's view of the cluster and the EFA devices' hardware counters.

Run as ``kiln-metrics slurm|efa --listen ADDRESS:PORT``. The package imports the standard library and
prometheus_client only: a node installs it without the toolkit's CDK, boto3 or pydantic.
"""

from __future__ import annotations
