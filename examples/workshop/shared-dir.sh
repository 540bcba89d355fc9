#!/usr/bin/env bash
# A step of the workshop's own (bootstrap.steps in workshop-g6-pcs.yaml): on the login node, at every boot, a shared
# working directory on FSx for Lustre that every participant and every job sees. Idempotent: install -d leaves an
# existing directory's contents alone.
set -euo pipefail
install -d -m 2775 -o ec2-user -g ec2-user /fsx/workshop
