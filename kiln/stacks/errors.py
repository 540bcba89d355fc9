"""What the stacks refuse: a spec they cannot build, said as kiln says input errors.

`kiln validate` refuses each of these first; the stacks check again for specs built in code (the construct library's
users, tests), so a bypassed rule is still one line (exit 2), never a traceback. A ValueError too, as the CDK's
own refusals are.
"""

from __future__ import annotations

from kiln.contracts.errors import InputError


class UnbuildableSpec(InputError, ValueError):
    """A spec the stacks cannot build, named by its field: one line."""
