"""Shared test helpers.

GOLDEN is the folder of TensorFlow-written cases. CI clones the project with shared/ beside the
clone (<clone>/../shared); TPUEMB_GOLDEN overrides the location. A test that needs it calls
``golden(...)`` inside the test, never at import or collection time, so that a missing folder skips
the test instead of failing the collection.

Naming: ``run_cli`` runs the ``tpuemb`` command in-process; other helpers that run something say
what they run (``run_workers``, ...).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from tpuemb_cfg.cli import main

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(os.environ.get("TPUEMB_GOLDEN", ROOT.parent / "shared" / "golden"))
EXAMPLES = ROOT / "examples"


def golden(*parts: str) -> Path:
    """Path inside the golden folder; skips the test (with the reason) when it is not there."""
    path = GOLDEN.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"golden data not found at {path} (set TPUEMB_GOLDEN)")
    return path


def golden_names(folder: str, pattern: str, *, exclude: str | None = None) -> list[Any]:
    """Sorted names in the golden ``folder`` matching ``pattern`` (leaving out names containing
    ``exclude``), for ``parametrize``. A missing folder gives one parameter that skips, with the
    reason, so the module still collects."""
    path = GOLDEN / folder
    if not path.is_dir():
        reason = f"golden data not found at {path} (set TPUEMB_GOLDEN)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-golden-data")]
    return sorted(p.name for p in path.glob(pattern) if exclude is None or exclude not in p.name)


#: Tables "a" (non-lazy Adam, a dynamic learning rate, ENABLED accumulation) and "b" (momentum,
#: weight decay, DISABLED accumulation): the start of a configuration whose tables, mode and
#: features a test appends.
ADAM_AND_MOMENTUM_TABLES = """
table_descriptor { name: "a" vocabulary_size: 300 dimension: 4 optimization_parameters {
  adam { beta1: 0.9 beta2: 0.99 epsilon: 1e-6 use_non_lazy_adam: true }
  learning_rate { dynamic { } } gradient_accumulation_status: ENABLED } }
table_descriptor { name: "b" vocabulary_size: 50 dimension: 2 optimization_parameters {
  momentum { momentum: 0.9 } learning_rate { constant: 0.05 }
  weight_decay_factor: 0.01 gradient_accumulation_status: DISABLED } }
"""


#: The golden optimizer cases: ``tf/`` (written by TensorFlow's CPU kernels) and ``spec/``.
OPTIMIZER_CASES = GOLDEN / "optimizers"


def optimizer_case_names() -> list[str]:
    """``kind/name`` of every golden optimizer case (a folder holding ``case.json``), sorted, for
    ``parametrize``; empty when the golden folder is missing."""
    return sorted(
        f"{kind}/{case.name}"
        for kind in ("tf", "spec")
        if (OPTIMIZER_CASES / kind).is_dir()
        for case in (OPTIMIZER_CASES / kind).iterdir()
        if (case / "case.json").is_file()
    )


def run_cli(*args: str, stdin: str | None = None) -> Result:
    """``tpuemb ARGS`` in-process through click's ``CliRunner``: ``exit_code``, ``output`` (stdout
    and stderr as the terminal shows them), ``stdout``, ``stderr``."""
    return CliRunner().invoke(main, list(args), input=stdin)


def run_simulate(*args: str) -> tuple[int, str]:
    """``tpuemb simulate ARGS``: the exit code and the output."""
    result = run_cli("simulate", *args)
    return result.exit_code, result.output


# The Python callables of the CustomOptimizer / CustomCombiner tests (TensorFlow's signatures).


def sgd(gradient, embedding_table, slot_variables, learning_rate, hyperparameters):  # type: ignore[no-untyped-def]
    """A CustomOptimizer's computation: plain SGD."""
    return embedding_table - learning_rate * gradient


def adagrad(gradient, embedding_table, slot_variables, learning_rate, hyperparameters):  # type: ignore[no-untyped-def]
    """A CustomOptimizer's computation: Adagrad with one slot, the accumulator."""
    accumulator = slot_variables[0] + gradient * gradient
    return embedding_table - learning_rate * gradient / np.sqrt(accumulator), accumulator


def total(valency, vectors):  # type: ignore[no-untyped-def]
    """A CustomCombiner's computation: the sum of the bag's vectors."""
    return vectors[:valency].sum(axis=0)
