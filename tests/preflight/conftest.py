"""Fixtures for the preflight tests: fake AWS settings and a moto account (plans, stubs: tests/support/preflight.py).

moto answers EC2 (offerings, subnets, images, instances), SSM's global-infrastructure parameters, S3, FSx and
STS. It has no Service Quotas for EC2, SageMaker or FSx and no capacity reservations: those calls go to a botocore
Stubber on a client of the same service (`stubbed`).
"""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from kiln.preflight.aws import AwsClients
from tests.support.fake_aws import REGION
from tests.support.fake_aws import aws_env as aws_env  # autouse: fake credentials, no user AWS config, a region


@pytest.fixture
def aws(aws_env: None) -> Iterator[AwsClients]:
    """Clients on an in-process moto account in REGION."""
    with mock_aws():
        yield AwsClients.from_session(boto3.Session(region_name=REGION), REGION)
