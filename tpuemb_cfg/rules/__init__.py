"""Validation rules: one module per family, registered in :data:`RULES` on import.

Families (``validation-rules.md`` section 2): ``tags`` (TAG), ``modes`` (MODE), ``features``
(FEAT), ``tables`` (TBL), ``optimizers`` (OPT), ``accumulation`` (ACC), ``clipping`` (CLIP, QNT),
``sizing`` (SIZE), ``deprecated`` (DEP). Add a rule of your own with the :func:`rule` decorator
(see :mod:`tpuemb_cfg.rules._registry`).
"""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.rules._registry import (
    RULES,
    SEVERITIES,
    SEVERITY_RANK,
    Context,
    Diagnostic,
    Rule,
    Severity,
    rule,
)

__all__ = [
    "RULES",
    "SEVERITIES",
    "SEVERITY_RANK",
    "Context",
    "Diagnostic",
    "Rule",
    "Severity",
    "rule",
]


@rule("PARSE001", "error", "the file could not be read or parsed")
def parse_failure(ctx: Context) -> Iterator[Diagnostic]:
    """The file could not be read or parsed, so no other rule ran on it.

    **What it reports.** A missing or unreadable file, text that is not valid protobuf text format
    (with the parser's line and column), malformed JSON, bytes that do not decode as a
    ``TPUEmbeddingConfiguration``, or a field name the schema does not know. ``tpuemb validate``
    exits with status 2 when any file gives this diagnostic; it cannot be ignored or suppressed.

    **Use instead.** Fix the syntax at the position shown; check the file extension (``.pbtxt``
    text, ``.pb``/``.binpb`` binary, ``.json`` JSON).
    """
    return iter(())


# Importing a family registers its rules.
from tpuemb_cfg.rules import (  # noqa: E402
    accumulation,
    clipping,
    deprecated,
    features,
    modes,
    optimizers,
    sizing,
    tables,
    tags,
)

FAMILIES = (tags, modes, features, tables, optimizers, accumulation, clipping, sizing, deprecated)
