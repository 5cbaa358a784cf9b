"""Shared test helpers.

GOLDEN is the folder of TensorFlow-written cases. CI clones the project with shared/ beside the
clone (<clone>/../shared); TPUEMB_GOLDEN overrides the location.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(os.environ.get("TPUEMB_GOLDEN", ROOT.parent / "shared" / "golden"))
EXAMPLES = ROOT / "examples"


def golden(*parts: str) -> Path:
    """Path inside the golden folder; skips the test (with the reason) when it is not there."""
    path = GOLDEN.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"golden data not found at {path} (set TPUEMB_GOLDEN)")
    return path
