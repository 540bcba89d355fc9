"""The TTL reaper's Lambda code: stdlib + boto3 only (the Lambda runtime's), shared with `kiln ci down/sweep`."""
