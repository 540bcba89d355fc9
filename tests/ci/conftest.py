"""Fixtures for the `kiln ci` tests: fake credentials, a region and moto (tests/support/fake_aws.py); the environments
made of tiny stacks are built with tests/support/ci.py."""

from __future__ import annotations

from tests.support.fake_aws import aws_env as aws_env  # autouse: fake credentials, no user AWS config, a region
from tests.support.fake_aws import moto as moto
