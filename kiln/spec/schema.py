"""The spec's JSON Schema, for editor completion (committed as spec.schema.json)."""

from __future__ import annotations

import json
from typing import Any

from kiln.spec.models import ClusterSpec

SCHEMA_ID = "https://kiln.dev/spec/v1/spec.schema.json"


def schema() -> dict[str, Any]:
    """Return the JSON Schema of a version-1 cluster spec."""
    document = ClusterSpec.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **document}


def schema_text() -> str:
    """Return the schema as the exact text committed in spec.schema.json."""
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"
