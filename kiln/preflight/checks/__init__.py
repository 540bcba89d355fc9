"""One module per preflight check; each exposes CHECK (kiln.preflight.check.Check)."""
