"""The construct library accepts only reviewed cdk-nag findings (its imports: tests/architecture/test_layers.py)."""

from __future__ import annotations

from tests.support.paths import ROOT

CONSTRUCTS = ROOT / "kiln" / "constructs"


def test_cdk_nag_findings_are_acknowledged_only_from_the_reviewed_list() -> None:
    """Rule ids and reasons live in acknowledgements.py (review.py applies them); no other construct module spells one
    out."""
    spelled = {
        path.name
        for path in CONSTRUCTS.glob("*.py")
        if path.name not in ("acknowledgements.py", "review.py") and "AwsSolutions-" in path.read_text()
    }
    assert spelled == set()
