"""Small descriptor helpers that work on every protobuf runtime in the supported range."""

from __future__ import annotations

from typing import Any


def is_repeated(field: Any) -> bool:
    """Whether a FieldDescriptor is repeated (``label`` is deprecated in protobuf 7)."""
    flag = getattr(field, "is_repeated", None)
    if isinstance(flag, bool):
        return flag
    return bool(field.label == field.LABEL_REPEATED)
