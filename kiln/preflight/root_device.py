"""Does compute.image.ami_id boot from the device kiln's launch templates map the root volume to?

kiln names the device from the spec's OS (platforms.json, ec2.root_device_names), since the AMI may be known only at
deploy. An AMI whose RootDeviceName is another keeps its root at the image's size, and every node gets the mapped
volume as a second, unformatted disk: the image check (kiln.preflight.checks.image) refuses it with this module's line.
"""

from __future__ import annotations

from kiln.catalog.platforms import root_device_names
from kiln.preflight.findings import Status
from kiln.preflight.plan import Plan


def mismatch(plan: Plan, image: dict) -> tuple[Status, str, str] | None:
    """Return a failure when IMAGE boots from another device than the one the plan's launch templates map, else None
    (also where kiln maps none, or the image names no root device)."""
    wanted, found = plan.root_device_name, image.get("RootDeviceName")
    if wanted is None or found is None or found == wanted:
        return None
    systems = [os for os, device in root_device_names().items() if device == found]
    remedy = f"set compute.image.ami_id to an image of {plan.image_os}, which boots from {wanted}"
    if systems:
        remedy = f"set compute.image.os to the AMI's OS ({' or '.join(systems)}), or {remedy.removeprefix('set ')}"
    return (
        "fail",
        f"boots from {found}, but kiln maps the root volume of {plan.image_os} images to {wanted}: nodes would keep "
        f"the image's root size and get a second, unformatted {wanted}",
        remedy,
    )
