"""Node-side training launcher, smoke job and readiness check. Standard library and torch only.

Importing this package is cheap; the modules that need torch import it themselves.
"""
