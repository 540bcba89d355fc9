"""What a rendered bundle's step ids mean to the layers that read them (the image's manifest and components, the
local cluster), besides kiln.bootstrap, which writes them."""

from __future__ import annotations

# A user step's id among the bundle's steps (KILN_INSTALL_STEPS, KILN_CONFIGURE_STEPS, markers, logs): user_NAME, which
# no kiln step's name starts with.
USER_STEP_PREFIX = "user_"
