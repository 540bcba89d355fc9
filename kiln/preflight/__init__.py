"""`kiln preflight`: read-only checks of the user's AWS account that catch before deploy what fails during it."""
