"""Validation rules: one module per family, registered in :data:`RULES` on import.

Families (``validation-rules.md`` section 2): ``tags`` (TAG), ``modes`` (MODE), ``features``
(FEAT), ``tables`` (TBL), ``optimizers``, ``hyperparameters`` and ``programs`` (OPT; the
hyper-parameter ranges are generated from :mod:`tpuemb_cfg.algorithms`), ``accumulation`` (ACC),
``clipping`` (CLIP, QNT), ``sizing`` (SIZE), ``deprecated`` (DEP), ``sparsecore`` (SC: SparseCore
configurations, run with a :class:`SparseCoreContext`), ``plan`` (PLAN: ``tpuemb plan``'s
findings, run on the planner's facts with a :class:`PlanContext`), ``diff`` (DIFF: ``tpuemb
diff``'s, run on each difference with a :class:`DiffContext`), ``checkpoint`` (CKPT: the
checkpoint verdicts of ``tpuemb diff``, run on checkpoint reports with a
:class:`DiffContext`); helpers they share are in ``common``. Add a rule of your own with the
:func:`rule` decorator
(see :mod:`tpuemb_cfg.rules._registry`).
"""

from __future__ import annotations

from collections.abc import Iterator

from tpuemb_cfg.model import SEVERITIES, SEVERITY_RANK, Diagnostic, Severity
from tpuemb_cfg.rules._registry import (
    RULES,
    Context,
    DiffContext,
    PlanContext,
    Rule,
    SparseCoreContext,
    all_rules,
    rule,
)

__all__ = [
    "RULES",
    "SEVERITIES",
    "SEVERITY_RANK",
    "Context",
    "Diagnostic",
    "DiffContext",
    "PlanContext",
    "Rule",
    "Severity",
    "SparseCoreContext",
    "all_rules",
    "rule",
]


@rule("PARSE001", "error", "the file could not be read or parsed")
def parse_failure(ctx: Context) -> Iterator[Diagnostic]:
    """## What it does
    Reports a file that could not be read or parsed, so no other rule ran on it: a missing or
    unreadable file, text that is not valid protobuf text format (with the parser's line and
    column), malformed JSON, bytes that do not decode as a `TPUEmbeddingConfiguration`, or a field
    name the schema does not know.

    ## Why is this bad?
    Nothing else can be checked. `tpuemb validate` exits with status 2 when any file gives this
    diagnostic; it cannot be ignored or suppressed.

    ## Example
    ```
    table_descriptor {
      name: "ads"
      dimension: eight
    }
    ```

    ## Use instead
    ```
    table_descriptor {
      name: "ads"
      dimension: 8
    }
    ```
    Fix the syntax at the position shown, and check the file extension (`.pbtxt` text, `.pb` or
    `.binpb` binary, `.json` JSON).

    Spec: validation-rules.md section 0
    """
    return iter(())


# Importing a family registers its rules.
from tpuemb_cfg.rules import (  # noqa: E402
    accumulation,
    checkpoint,
    clipping,
    deprecated,
    diff,
    features,
    hyperparameters,
    modes,
    optimizers,
    plan,
    programs,
    sizing,
    sparsecore,
    tables,
    tags,
)

FAMILIES = (
    tags,
    modes,
    features,
    tables,
    optimizers,
    hyperparameters,
    programs,
    accumulation,
    clipping,
    sizing,
    deprecated,
    sparsecore,
    plan,
    diff,
    checkpoint,
)
