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
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result
from hypothesis import settings

from tpuemb_cfg.cli import main

# A keras-rs spec runs on the Keras backend this machine would choose (KERAS_BACKEND, else
# keras.json): the suite sees Keras' default (TensorFlow) unless a test names one, whatever the
# machine sets (an empty KERAS_HOME: no keras.json). Subprocesses inherit it.
os.environ.pop("KERAS_BACKEND", None)
os.environ["KERAS_HOME"] = tempfile.mkdtemp(prefix="tpuemb-keras-home-")

# ------------------------------------------------------------------------------------------------
# Test profiles (docs/testing.md)

#: The suite's two profiles: ``default`` (what ``pytest`` and CI run: each property test's own
#: example count, the short one) and ``long`` (before a release: every property test runs
#: ``LONG_EXAMPLES`` examples, or the count its own call of ``examples`` gives, at random rather
#: than derandomized). Chosen by ``TPUEMB_TEST_PROFILE=long`` or hypothesis' own
#: ``--hypothesis-profile=long`` (which pytest applies after this file is read, before any test
#: module is).
PROFILE_ENV = "TPUEMB_TEST_PROFILE"
PROFILES = ("default", "long")
#: Examples per property test in the long profile, unless the test names its own.
LONG_EXAMPLES = 2000
#: Examples of every ``examples(...)`` call of a property test, whatever the profile (the
#: release check's ``TPUEMB_PROPERTY_EXAMPLES=10000``; README, docs/testing.md).
EXAMPLES_ENV = "TPUEMB_PROPERTY_EXAMPLES"

settings.register_profile("default", deadline=None)
settings.register_profile("long", deadline=None, max_examples=LONG_EXAMPLES, derandomize=False)
if os.environ.get(PROFILE_ENV, "default") not in PROFILES:
    raise pytest.UsageError(f"{PROFILE_ENV}={os.environ[PROFILE_ENV]!r}: the profiles are "
                            f"{', '.join(PROFILES)}")
settings.load_profile(os.environ.get(PROFILE_ENV, "default"))


def long_profile() -> bool:
    """Whether the long profile is loaded (``TPUEMB_TEST_PROFILE=long`` or
    ``--hypothesis-profile=long``)."""
    return settings.get_current_profile_name() == "long"


def examples(default: int, long: int = LONG_EXAMPLES) -> int:
    """A property test's example count: ``default`` in the default profile, ``long`` in the
    long one, ``TPUEMB_PROPERTY_EXAMPLES`` in either when it is set. Read when the test module
    is imported (after the profile is chosen)."""
    given = os.environ.get(EXAMPLES_ENV)
    if given:
        return int(given)
    return max(default, long) if long_profile() else default


def derandomized(count: int) -> bool:
    """Whether a property test of ``count`` examples draws the same ones on every run: in the
    default profile, up to 300 (CI's runs are reproducible); never in the long one (each release
    check explores anew)."""
    return not long_profile() and count <= 300


ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
GOLDEN = Path(os.environ.get("TPUEMB_GOLDEN") or DATA / "golden")
EXAMPLES = ROOT / "examples"


def zipf_sample() -> Any:
    """``examples/plan/zipf_sample.py`` as a module (the sample writer the plan tests use);
    loaded once."""
    import importlib.util

    if "zipf_sample" not in sys.modules:
        spec = importlib.util.spec_from_file_location("zipf_sample",
                                                      EXAMPLES / "plan" / "zipf_sample.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["zipf_sample"] = module
        spec.loader.exec_module(module)
    return sys.modules["zipf_sample"]


_BACKGROUND = "test_reproducible.py::test_golden_replays_give_the_same_bytes_under_every_setting"
#: Tests that share nothing with the others and run many processes of their own (the CLI
#: property test, the README's examples; the multi-node Ray tests, which mostly wait for nodes
#: to start, die and be noticed): when the session runs them beside other tests, each group runs
#: in one pytest process of its own started at collection (``TPUEMB_FOREGROUND=1`` there), beside
#: the suite, and each of their items here waits for that process and reports the outcome it
#: recorded (``--junitxml``): the same tests, with the same checks, off the critical path. The
#: multi-node tests are two groups of about a minute each (mostly waiting), not one of two: the
#: lost head (a cluster of its own) with the shipping and operating tests, the rest of
#: ``test_ray_nodes`` on its module's cluster. An item is in the first group naming it.
_OWN_PROCESS = (
    ("test_cli_properties.py::test_every_command_under_every_input_is_safe",
     "test_cli_properties.py::test_the_ray_options_under_any_value_are_refused_in_one_line",
     "test_readme.py::"),
    ("test_ray_nodes.py::test_a_lost_head_", "test_ray_ship.py::", "test_ray_operate.py::"),
    ("test_ray_nodes.py::",),
)
_FOREGROUND = "TPUEMB_FOREGROUND"
_own_runs: dict[int, dict[str, Any]] = {}  # per group: its process, log and outcomes


def _group(item: pytest.Item) -> int | None:
    """The group of ``_OWN_PROCESS`` that ``item`` runs in, if any."""
    for index, names in enumerate(_OWN_PROCESS):
        if any(name in item.nodeid for name in names):
            return index
    return None


def _runs_apart(item: pytest.Item) -> bool:
    return _group(item) is not None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that wait for background processes run last (those run in their own process,
    then the digest comparison of ``test_reproducible``), so the processes have the whole
    suite's time and no test waits behind them."""
    apart = [item for item in items if _runs_apart(item)]
    items[:] = [item for item in items if not _runs_apart(item)] + apart
    for index, item in enumerate(items):
        if item.nodeid.endswith(_BACKGROUND):
            items.append(items.pop(index))
            break


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the subprocesses of the digest comparison (``test_reproducible``) when it is to
    run: they take a core of their own for a while, at a lower priority than the suite, which
    keeps one busy."""
    if session.config.option.collectonly:
        return
    _freeze_the_collected()
    apart = [item for item in session.items if _runs_apart(item)]
    if apart and len(apart) < len(session.items) and os.environ.get(_FOREGROUND) != "1":
        for index in range(len(_OWN_PROCESS)):
            group = [item for item in apart if _group(item) == index]
            if group:
                _start_apart(session, index, group)
                for item in group:
                    _no_fixtures_here(item)
    for item in session.items:
        if item.nodeid.endswith(_BACKGROUND) and GOLDEN.joinpath("optimizers").is_dir():
            item.module.start_settings()  # type: ignore[attr-defined]
            return


def _start_apart(session: pytest.Session, group: int, items: list[pytest.Item]) -> None:
    folder = tempfile.mkdtemp(prefix="tpuemb-apart-")
    report = os.path.join(folder, "report.xml")
    log = open(os.path.join(folder, "log.txt"), "w+", encoding="utf-8")  # noqa: SIM115
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={report}", *(item.nodeid for item in items)]
    _own_runs[group] = {"folder": folder, "report": report, "log": log,
                        "process": subprocess.Popen(
                            command, cwd=session.config.rootpath,
                            env={**os.environ, _FOREGROUND: "1",
                                 PROFILE_ENV: settings.get_current_profile_name()}, stdout=log,
                            stderr=subprocess.STDOUT)}


def _no_fixtures_here(item: pytest.Item) -> None:
    """An item whose own process runs it sets up none of its fixtures here: its outcome is read
    from that process's report, and setting them up here too would start a second copy of what
    they start (Ray nodes, fork servers) for nothing."""
    item.setup = lambda: None  # type: ignore[method-assign]


def _own_outcomes(run: dict[str, Any]) -> dict[tuple[str, str], tuple[str, str]]:
    """(module, test name) -> (outcome, message and text) from a group's process's report."""
    if "outcomes" not in run:
        returncode = run["process"].wait()
        run["log"].seek(0)
        run["output"] = f"exit {returncode}\n" + run["log"].read()
        outcomes: dict[tuple[str, str], tuple[str, str]] = {}
        if os.path.exists(run["report"]):
            import xml.etree.ElementTree as ET

            for case in ET.parse(run["report"]).getroot().iter("testcase"):
                outcome, text = "passed", ""
                for kind in ("failure", "error", "skipped"):
                    found = case.find(kind)
                    if found is not None:
                        outcome = kind
                        text = (found.get("message") or "") + "\n" + (found.text or "")
                        break
                module = case.get("classname", "").rsplit(".", 1)[-1]
                outcomes[(module, case.get("name", ""))] = (outcome, text)
        run["outcomes"] = outcomes
    return run["outcomes"]  # type: ignore[no-any-return]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """An item run in its own process: its outcome is the one that process recorded."""
    group = _group(pyfuncitem)
    run = _own_runs.get(group) if group is not None else None
    if run is None:
        return None
    outcome = _own_outcomes(run).get((pyfuncitem.module.__name__, pyfuncitem.name))
    if outcome is None:
        pytest.fail("the test's own pytest process recorded no outcome for it:\n"
                    + run["output"], pytrace=False)
    kind, text = outcome
    if kind == "skipped":
        pytest.skip(text.strip().splitlines()[0] if text.strip() else "skipped")
    if kind != "passed":
        pytest.fail(f"in the test's own pytest process ({kind}):\n{text}", pytrace=False)
    return True


def _freeze_the_collected() -> None:
    """Keep what collection built (the test modules and what they imported, the items and
    their parameters: alive for the whole session) out of the garbage collector's full
    passes, which otherwise walk all of it again every time (``gc.freeze``). Garbage is
    collected first, so nothing that could be freed (or finalized) is frozen."""
    gc.collect()
    gc.freeze()


def pytest_sessionfinish(session: pytest.Session) -> None:
    import shutil

    for run in _own_runs.values():
        process = run["process"]
        if process.poll() is None:
            process.kill()
            process.wait()
        run["log"].close()
        shutil.rmtree(run["folder"], ignore_errors=True)
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


def interrupt_reshard(monkeypatch: pytest.MonkeyPatch, at: int = 3) -> list[int]:
    """Make the reshard engine's ``at``-th read of rows raise KeyboardInterrupt (a Ctrl-C in
    the middle of ``tpuemb checkpoint reshard``); the returned list counts the reads."""
    import tpuemb_cfg.checkpoints.reshard as reshard

    calls = [0]
    real = reshard._gather

    def interrupted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        if calls[0] == at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(reshard, "_gather", interrupted)
    return calls


def without_tensorstore(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import tensorstore`` fail, as without the extra ``orbax``."""
    import builtins

    real_import = builtins.__import__

    def no_tensorstore(name: str, *args: object, **kwargs: object) -> object:
        if name == "tensorstore":
            raise ImportError("no tensorstore")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_tensorstore)


def partition(pairs: Iterable[tuple[str, str]]) -> set[frozenset[str]]:
    """(table, key) pairs as the sets of tables sharing a key (stacking groups compared
    regardless of their keys' spelling)."""
    groups: dict[str, set[str]] = {}
    for table, key in pairs:
        groups.setdefault(key, set()).add(table)
    return {frozenset(g) for g in groups.values()}
