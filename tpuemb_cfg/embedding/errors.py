"""Exceptions of the embedding API.

TensorFlow raises ``ValueError`` for almost every constructor check, including type checks such as
"`table` must be a TableConfig". Code ported from TensorFlow may catch ``ValueError``; code written
for this project may prefer ``TypeError`` for wrong types. :class:`EmbeddingTypeError` is both, so
either ``except`` clause works.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class EmbeddingConfigError(ValueError):
    """An argument of the embedding API has a value TensorFlow would reject."""


class EmbeddingTypeError(EmbeddingConfigError, TypeError):
    """An argument of the embedding API has the wrong type (also a ``ValueError``, as in TF)."""


class EmbeddingOverflowError(EmbeddingConfigError, OverflowError):
    """A number too large for the proto field it goes to (an int beyond float's range, a flag
    beyond a 64-bit integer): protobuf raises ``OverflowError`` there, as TensorFlow does; this is
    also a ``ValueError``."""


class ConfigValidationError(EmbeddingConfigError):
    """The compiled configuration has error diagnostics; ``diagnostics`` holds all of them."""

    def __init__(self, diagnostics: Sequence[Any]) -> None:
        self.diagnostics = list(diagnostics)
        lines = [
            f"the compiled configuration has {len(self.diagnostics)} "
            f"error{'s' if len(self.diagnostics) != 1 else ''}:"
        ]
        for d in self.diagnostics:
            where = f" {d.field_path}" if getattr(d, "field_path", None) else ""
            hint = f" ({d.hint})" if getattr(d, "hint", None) else ""
            lines.append(f"  {d.rule}{where}: {d.message}{hint}")
        super().__init__("\n".join(lines))
