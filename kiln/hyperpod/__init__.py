"""`kiln hyperpod`: day-two operations on a deployed SageMaker HyperPod cluster (boto3 only; no synthesis)."""
