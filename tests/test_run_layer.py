"""The run layer (``tpuemb_cfg.run``): ``open_run`` gives the CLI's results for every mode,
refuses what will not fit before allocating, and refuses bad requests with ``InputError``.

Each mode is run twice, through ``tpuemb simulate`` and through ``open_run``, and the arrays
and summaries compared: the command is a thin layer over the library, so they must agree bit
for bit (the summary's ``config`` and ``out_dir``, which the command adds, aside).
"""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, run_simulate

import tpuemb_cfg
from tpuemb_cfg import InputError, UsageError
from tpuemb_cfg.run import Run, RunRequest, RunResult, open_run

TINY = ROOT / "tests" / "data" / "multiworker" / "tiny.pbtxt"
SPARSECORE = EXAMPLES / "sparsecore" / "simulate_jax_limits.py"


def _run(source: Any, request: RunRequest) -> tuple[Run, RunResult, list[int]]:
    """``open_run`` through to the result, with every progress count seen."""
    run = open_run(source, request)
    run.start()
    seen: list[int] = []
    run.run(progress=seen.append)
    return run, run.result(), seen


def _cli_json(*args: str) -> dict[str, Any]:
    code, output = run_simulate(*args, "--json", "--quiet")
    assert code == 0, output
    found: dict[str, Any] = json.loads(output)
    return found


def _same_arrays(path: Path, arrays: dict[str, Any]) -> None:
    with np.load(path) as written:
        assert sorted(written.files) == sorted(arrays)
        for key in written.files:
            assert np.array_equal(written[key], np.asarray(arrays[key])), key


def _without(summary: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in summary.items() if k not in keys}


def test_the_lazy_names_are_the_run_layers() -> None:
    from tpuemb_cfg import facade, simulate

    assert tpuemb_cfg.open_run is open_run and tpuemb_cfg.RunRequest is RunRequest
    assert simulate.open_run is open_run and simulate.Run is Run
    assert facade.RunRequest is RunRequest and facade.RunResult is RunResult


def test_a_synthetic_run_is_the_commands(tmp_path: Path) -> None:
    out_dir = tmp_path / "cli"
    cli = _cli_json(str(TINY), "--steps", "4", "--seed", "7", "--tables", "all",
                    "--out-dir", str(out_dir))
    run, result, seen = _run(str(TINY), RunRequest(steps=4, seed=7, tables="all"))
    assert run.kind == "synthetic" and run.total == 4
    assert seen == [1, 2, 3, 4]
    assert result.summary == _without(cli, "config", "out_dir")
    assert result.state is not None
    _same_arrays(out_dir / "tables.npz", result.state)
    # and the library's run object made without the run layer ends with the same tables
    from tpuemb_cfg.simulate import SyntheticRun

    alone = SyntheticRun(str(TINY), seed=7)
    alone.run(4)
    for key, value in alone.saved_state("all").items():
        assert np.array_equal(result.state[key], value), key


def test_a_resumed_run_ends_where_the_whole_run_does(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "checkpoint.npz")
    whole = _run(str(TINY), RunRequest(steps=4, seed=2, tables="all"))[1]
    first = open_run(str(TINY), RunRequest(steps=2, seed=2, checkpoint=checkpoint,
                                           checkpoint_every=2))
    first.start()
    saved: list[dict[str, Any]] = []
    first.run(checkpoint=lambda: saved.append(first.checkpoint_arrays()))
    assert len(saved) == 1
    np.savez(checkpoint, **saved[0])  # the caller writes the file
    run, result, seen = _run(str(TINY), RunRequest(steps=4, seed=2, tables="all",
                                                   checkpoint=checkpoint, resume=True))
    assert run.first == 2 and seen == [3, 4]
    assert result.state is not None and whole.state is not None
    for key, value in whole.state.items():
        assert np.array_equal(result.state[key], value), key


def test_a_multi_worker_run_is_the_commands(tmp_path: Path) -> None:
    cli = _cli_json(str(TINY), "--steps", "3", "--workers", "2", "--out-dir",
                    str(tmp_path / "cli"))
    run, result, seen = _run(str(TINY), RunRequest(steps=3, workers=2))
    assert run.kind == "workers" and run.unit == "gradient event"
    with pytest.raises(InputError, match="a workers run keeps no checkpoint"):
        run.checkpoint_arrays()
    assert seen[-1] == run.total == 2 * 2 * 3
    assert result.summary == _without(cli, "config", "out_dir")


def test_a_replay_is_the_commands(tmp_path: Path) -> None:
    batches, out = tmp_path / "b.npz", tmp_path / "o.npz"
    code, output = run_simulate(str(TINY), "--steps", "3", "--save-batches", str(batches),
                                "--out-dir", str(tmp_path / "run"), "--quiet")
    assert code == 0, output
    cli = _cli_json(str(TINY), "--batches", str(batches), "--out", str(out))
    run, result, seen = _run(str(TINY), RunRequest(batches=str(batches), out=str(out)))
    assert run.kind == "replay" and seen == [1, 2, 3]
    assert result.summary == cli
    assert result.out is not None
    _same_arrays(out, result.out)


def test_the_plan_of_a_replay_reads_only_headers(tmp_path: Path) -> None:
    batches = tmp_path / "b.npz"
    code, output = run_simulate(str(TINY), "--steps", "2", "--save-batches", str(batches),
                                "--out-dir", str(tmp_path / "run"), "--quiet")
    assert code == 0, output
    cli = _cli_json(str(TINY), "--batches", str(batches), "--dry-run", "--max-memory", "1G")
    info = open_run(str(TINY), RunRequest(batches=str(batches), max_memory="1G")).plan()
    # the estimate counts this process's measured memory, which moves between two calls
    memory, shown = info.pop("memory"), cli.pop("memory")
    assert info == cli and info["steps"] == 2 and info["batches_bytes"] > 0
    assert memory["limit_bytes"] == shown["limit_bytes"] == 1 << 30
    assert (memory["estimate"]["tables_and_slots_bytes"]
            == shown["estimate"]["tables_and_slots_bytes"] == 16 * 2 * 4)


def test_a_sparsecore_run_is_the_commands(tmp_path: Path) -> None:
    out_dir = tmp_path / "cli"
    cli = _cli_json(str(SPARSECORE), "--steps", "2", "--allow-id-dropping", "--engine",
                    "numpy", "--out-dir", str(out_dir))
    request = RunRequest(steps=2, allow_id_dropping=True, engine="numpy", out_dir="x")
    run, result, seen = _run(str(SPARSECORE), request)
    assert run.kind == "sparsecore" and seen == [1, 2]
    assert result.summary == _without(cli, "out_dir")
    assert result.state is not None
    _same_arrays(out_dir / "tables.npz", result.state)


def test_a_run_that_will_not_fit_is_refused_before_allocating() -> None:
    huge = TINY.read_text().replace("vocabulary_size: 16", "vocabulary_size: 100000000000")
    huge = huge.replace("dimension: 2", "dimension: 1000")
    from tpuemb_cfg import load

    run = open_run(load(huge.encode(), "text"), RunRequest(steps=2, max_memory="8G"))
    assert run.plan()["memory"]["fits"] is False
    tracemalloc.start()
    try:
        with pytest.raises(UsageError, match="more than the memory limit of 8 GiB"):
            run.start()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20  # nothing of the 400 TB of tables


@pytest.mark.parametrize(("source", "request_", "message"), [
    (None, {"steps": 0}, "RunRequest steps=0: expected a whole number of steps, at least 1"),
    (None, {"tables": "some"}, "RunRequest tables='some': expected all or touched or none"),
    (None, {"resume": True}, "resume and checkpoint_every need checkpoint"),
    (None, {"batches": "b.npz", "workers": 2},
     "RunRequest: workers apply to synthetic runs, not to a replay of batches"),
    (None, {"init": "i.npz", "resume": True, "checkpoint": "c.npz"},
     "RunRequest init: a resumed run continues from its checkpoint"),
    (None, {"max_staleness": -1}, "RunRequest max_staleness=-1: expected 0 or more"),
    # the library refuses what --workers and --replicas-to-aggregate refuse (once, workers=0
    # ran one worker)
    (None, {"workers": 0}, "RunRequest workers=0: expected a whole number, at least 1"),
    (None, {"workers": 2, "replicas_to_aggregate": 0},
     "RunRequest replicas_to_aggregate=0: expected a whole number, at least 1"),
    (None, {"workers": 1.5}, "RunRequest workers=1.5: expected a whole number, at least 1"),
    (None, {"checkpoint": "c.npz", "checkpoint_every": float("nan")},
     "RunRequest checkpoint_every=nan: expected at least 1 step"),
    (None, {"workers": 2, "max_staleness": "3"},
     "RunRequest max_staleness='3': expected 0 or more"),
    (None, {"combiners": (["sum"],)},
     "RunRequest combiners: expected combiner names (sum, mean, sqrtn), found ['sum']"),
])
def test_a_bad_request_is_refused_with_input_error(source: Any, request_: dict[str, Any],
                                                   message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        RunRequest(**request_)


def test_a_request_its_source_cannot_take_is_refused() -> None:
    with pytest.raises(InputError, match="a replay needs the configuration"):
        open_run(None, RunRequest(batches="b.npz"))
    with pytest.raises(InputError, match="apply to SparseCore specs only"):
        open_run(str(TINY), RunRequest(compare_dropping=True))
    with pytest.raises(InputError, match="RunRequest workers: not available for a SparseCore"):
        open_run(str(SPARSECORE), RunRequest(workers=2))
    with pytest.raises(InputError, match="request must be a RunRequest; received dict"):
        open_run(str(TINY), {"steps": 2})  # type: ignore[arg-type]
