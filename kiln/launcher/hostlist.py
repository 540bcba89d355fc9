"""Expand Slurm hostlist expressions the way ``scontrol show hostnames`` does.

``node[01-03,7],gpu-[1-2]-x`` names node01 node02 node03 node7 gpu-1-x gpu-2-x:
ranges keep the zero padding of their lower bound, a name may carry several
bracket groups (expanded left to right, leftmost varying slowest) and text
after a group. Order and duplicates are kept, as scontrol keeps them. Forms
scontrol prints garbage for (unbalanced or nested brackets, empty ranges,
reversed ranges) raise ValueError instead.
"""

from __future__ import annotations

import itertools
import re

# Slurm refuses a single range with more hosts than this; so do we.
MAX_RANGE_HOSTS = 65536

_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


def expand(expression: str) -> list[str]:
    """Return every host EXPRESSION names, in order, duplicates kept."""
    hosts: list[str] = []
    for item in _split_items(expression):
        hosts.extend(_expand_item(item))
    return hosts


def first_host(expression: str) -> str:
    """Return the first host EXPRESSION names."""
    hosts = expand(expression)
    if not hosts:
        raise ValueError(f"hostlist {expression!r} names no host")
    return hosts[0]


def _split_items(expression: str) -> list[str]:
    items, current, depth = [], [], 0
    for char in expression:
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"hostlist {expression!r}: nested '['")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"hostlist {expression!r}: ']' without '['")
        if depth == 0 and (char == "," or char.isspace()):
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise ValueError(f"hostlist {expression!r}: '[' without ']'")
    items.append("".join(current))
    return [item for item in items if item]


def _expand_item(item: str) -> list[str]:
    # Alternating literal text and bracket bodies: "gpu-[1-2]-x" -> ["gpu-", "1-2", "-x"].
    pieces = re.split(r"\[([^\]]*)\]", item)
    choices = [[piece] if index % 2 == 0 else _expand_ranges(piece, item) for index, piece in enumerate(pieces)]
    return ["".join(parts) for parts in itertools.product(*choices)]


def _expand_ranges(body: str, item: str) -> list[str]:
    values: list[str] = []
    for part in body.split(","):
        match = _RANGE.fullmatch(part)
        if not match:
            raise ValueError(f"hostlist {item!r}: invalid range {part!r} (want N or N-M with digits only)")
        low, high = match.group(1), match.group(2)
        if high is None:
            values.append(low)
            continue
        start, stop = int(low), int(high)
        if start > stop:
            raise ValueError(f"hostlist {item!r}: range {part!r} runs backwards")
        if stop - start + 1 > MAX_RANGE_HOSTS:
            raise ValueError(f"hostlist {item!r}: range {part!r} has more than {MAX_RANGE_HOSTS} hosts")
        width = len(low)
        values.extend(f"{number:0{width}d}" for number in range(start, stop + 1))
    return values
