"""How EC2 instances are bought: kiln's capacity types and what each means to every backend (stdlib only)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

CapacityType = Literal["on-demand", "spot", "capacity-block", "reservation"]
CAPACITY_TYPES: tuple[str, ...] = get_args(CapacityType)
RESERVATION_ID = re.compile(r"cr-[0-9a-f]{17}")


@dataclass(frozen=True, kw_only=True)
class CapacityTerms:
    """One capacity type in each backend's words."""

    # AWS PCS PurchaseOption and ParallelCluster CapacityType share these words.
    purchase_option: Literal["ONDEMAND", "SPOT", "CAPACITY_BLOCK"]
    # Bought into a capacity reservation or block (a cr-... id), which also places the nodes.
    reserved: bool


CAPACITY: dict[str, CapacityTerms] = {
    "on-demand": CapacityTerms(purchase_option="ONDEMAND", reserved=False),
    "spot": CapacityTerms(purchase_option="SPOT", reserved=False),
    "capacity-block": CapacityTerms(purchase_option="CAPACITY_BLOCK", reserved=True),
    # An on-demand capacity reservation is on-demand capacity, targeted by the launch template.
    "reservation": CapacityTerms(purchase_option="ONDEMAND", reserved=True),
}


def is_reservation_id(text: object) -> bool:
    """Return True when TEXT is a capacity reservation or block id: cr- and 17 hex digits, nothing more."""
    return isinstance(text, str) and RESERVATION_ID.fullmatch(text) is not None
