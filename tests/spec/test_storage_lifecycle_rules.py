"""Spec rules of the data's lifecycle: an attached bucket or file system is named whole, and nothing describes a
new one beside it. Each bad spec is one line naming the field (exit 2)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from kiln.spec import parse_spec
from tests.support.specs import MINIMAL_SPEC, assert_refused_in_one_line

NETWORK = {"vpc_id": "vpc-0123456789abcdef0", "private_subnet_id": "subnet-0123456789abcdef0"}
ATTACH = {
    "file_system_id": "fs-0123456789abcdef0",
    "mount_name": "abcdefgh",
    "security_group_id": "sg-0123456789abcdef0",
}


def _spec(lustre: dict | None = None, bucket: dict | None = None, network: dict | None = NETWORK) -> dict:
    spec = copy.deepcopy(MINIMAL_SPEC)
    spec["storage"] = {k: v for k, v in (("lustre", lustre), ("bucket", bucket)) if v is not None}
    if network is not None:
        spec["network"] = network
    return spec


def test_attaching_a_file_system_and_a_bucket_is_valid() -> None:
    spec = parse_spec(_spec(ATTACH, {"name": "team-datasets", "existing": True}))
    assert spec.storage.lustre.attached and spec.storage.bucket.existing


NEW_FILE_SYSTEM = [
    ("deployment", "SCRATCH_2"),
    ("storage_gib", 2400),
    ("throughput_per_tib", 500),
    ("compression", "NONE"),
    ("efa", True),
    ("data_repository", {"export": False}),
]

CASES = [
    *(
        (
            f"attach-with-{field}",
            _spec({**ATTACH, field: value}),
            f"storage.lustre.{field}",
            "describes a file system kiln creates, but file_system_id attaches fs-0123456789abcdef0 as it is: "
            "remove it",
        )
        for field, value in NEW_FILE_SYSTEM
    ),
    (
        "attach-without-mount-name",
        _spec({k: v for k, v in ATTACH.items() if k != "mount_name"}),
        "storage.lustre.mount_name",
        "is required with file_system_id: `aws fsx describe-file-systems --file-system-ids fs-0123456789abcdef0",
    ),
    (
        "attach-without-group",
        _spec({k: v for k, v in ATTACH.items() if k != "security_group_id"}),
        "storage.lustre.security_group_id",
        "is required with file_system_id: a group the file system admits Lustre clients from",
    ),
    (
        "attach-in-a-new-vpc",
        _spec(ATTACH, network=None),
        "storage.lustre.file_system_id",
        "needs network.vpc_id and network.private_subnet_id",
    ),
    (
        "mount-name-without-attach",
        _spec({"mount_name": "abcdefgh"}),
        "storage.lustre.mount_name",
        "applies only with file_system_id (a file system kiln creates gets its own)",
    ),
    (
        "group-without-attach",
        _spec({"security_group_id": "sg-0123456789abcdef0"}),
        "storage.lustre.security_group_id",
        "applies only with file_system_id",
    ),
    ("bad-file-system-id", _spec({**ATTACH, "file_system_id": "fs-1"}), "storage.lustre.file_system_id", "fs-0123"),
    ("bad-mount-name", _spec({**ATTACH, "mount_name": "too-long-name"}), "storage.lustre.mount_name", "1-8 letters"),
    ("bad-group-id", _spec({**ATTACH, "security_group_id": "sg_1"}), "storage.lustre.security_group_id", "sg-0123"),
    (
        "existing-bucket-without-name",
        _spec(bucket={"existing": True}),
        "storage.bucket.existing",
        "got true without storage.bucket.name: name the bucket to attach",
    ),
    (
        "existing-bucket-with-retain",
        _spec(bucket={"name": "team-datasets", "existing": True, "retain": True}),
        "storage.bucket.retain",
        "does not apply with existing: true (kiln neither creates nor deletes a bucket it attaches): remove it",
    ),
]


@pytest.mark.parametrize(("spec", "field", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_bad_lifecycle_spec_is_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture, spec: dict, field: str, words: str
) -> None:
    assert_refused_in_one_line(tmp_path, capsys, spec, field, words)
