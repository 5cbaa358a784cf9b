"""Shared test helpers.

GOLDEN is the folder of TensorFlow-written cases: ``tests/data/golden`` (a copy of the project's
``shared/golden``, so the suite runs from a clone anywhere); ``TPUEMB_GOLDEN`` points elsewhere.
The data ships with the tests, so a missing file is a broken checkout or a wrong
``TPUEMB_GOLDEN``: ``golden(...)`` and ``require_data`` fail the test (never skip it), inside the
test, so the rest of the module still collects and runs.

Naming: ``run_cli`` runs the ``tpuemb`` command in-process; other helpers that run something say
what they run (``run_workers``, ...).
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from tpuemb_cfg.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
GOLDEN = Path(os.environ.get("TPUEMB_GOLDEN") or DATA / "golden")
EXAMPLES = ROOT / "examples"


_BACKGROUND = "test_reproducible.py::test_golden_replays_give_the_same_bytes_under_every_setting"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The digest comparison (``test_reproducible``) waits for its background subprocesses: it
    runs last, so they have the whole suite's time and no test waits behind it."""
    for index, item in enumerate(items):
        if item.nodeid.endswith(_BACKGROUND):
            items.append(items.pop(index))
            return


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the subprocesses of the digest comparison (``test_reproducible``) when it is to
    run: they take a core of their own for a while, at a lower priority than the suite, which
    keeps one busy."""
    if session.config.option.collectonly:
        return
    _freeze_the_collected()
    for item in session.items:
        if item.nodeid.endswith(_BACKGROUND) and GOLDEN.joinpath("optimizers").is_dir():
            item.module.start_settings()  # type: ignore[attr-defined]
            return


def _freeze_the_collected() -> None:
    """Keep what collection built (the test modules and what they imported, the items and
    their parameters: alive for the whole session) out of the garbage collector's full
    passes, which otherwise walk all of it again every time (``gc.freeze``). Garbage is
    collected first, so nothing that could be freed (or finalized) is frozen."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session) -> None:
    for item in getattr(session, "items", []):
        if item.nodeid.endswith(_BACKGROUND):
            item.module.stop_settings()  # type: ignore[attr-defined]
            return


def require_data(path: Path) -> Path:
    """``path``, which the test needs; fails the test (with where to look) when it is missing."""
    if not path.exists():
        pytest.fail(f"test data not found at {path}: the suite's data lives in tests/data "
                    "(TPUEMB_GOLDEN, when set, must point at a copy of tests/data/golden)",
                    pytrace=False)
    return path


def golden(*parts: str) -> Path:
    """Path inside the golden folder; fails the test (``require_data``) when it is missing."""
    return require_data(GOLDEN.joinpath(*parts))


def golden_names(folder: str, pattern: str, *, exclude: str | None = None) -> list[Any]:
    """Sorted names in the golden ``folder`` matching ``pattern`` (leaving out names containing
    ``exclude``), for ``parametrize``. A missing folder gives one name that is not there, so the
    module still collects and its test fails in ``golden(...)`` with the reason."""
    path = GOLDEN / folder
    if not path.is_dir():
        return ["no-golden-data"]
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
