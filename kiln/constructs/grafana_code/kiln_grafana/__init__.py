"""The Grafana provisioning function's Lambda code: stdlib + boto3 only (the Lambda runtime's).

It gives a fresh Amazon Managed Grafana workspace kiln's Prometheus data source and dashboards, through the
workspace's Grafana HTTP API and a short-lived service account token it deletes when done.
"""
