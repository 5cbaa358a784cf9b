"""Issue 21, part B ("Safety, round two"): the run itself, each defect as the user met it.

Counts a user gives (tokens, replicas, steps, npz array shapes) are covered by the memory
estimate or refused; damaged checkpoints, out-of-range integers, NUMBA_DISABLE_JIT, specs that
raise BaseException or call os._exit, learning rates that overflow float32, seeds and sizes
(one grammar each), uint64 ids and the library's Executor arguments and threads. The helpers are
test_robustness.py's and test_robustness_simulate.py's.
"""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
import threading
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from test_robustness import QUICKSTART, SPEC, one_line, refused, run, snapshot

from tpuemb_cfg import InputError, UsageError, load
from tpuemb_cfg.base import units
from tpuemb_cfg.base.errors import NumericalError
from tpuemb_cfg.commands.simulate import parse_size
from tpuemb_cfg.formats import limits
from tpuemb_cfg.formats.npzio import atomic_write_npz, read_npz
from tpuemb_cfg.sim.history import LIMIT
from tpuemb_cfg.sim.synthetic import SyntheticData, history_bytes
from tpuemb_cfg.simulate import Executor, MultiWorkerRun, SyntheticRun
from tpuemb_cfg.validation import settings

TINY = (ROOT / "tests" / "data" / "multiworker" / "tiny.pbtxt").read_text()
HUGE = TINY.replace("vocabulary_size: 16", "vocabulary_size: 100000000000").replace(
    "dimension: 2", "dimension: 1000")
GIB = 2**30


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder, holding ``c.pbtxt`` (one SGD table of 16 x 2, constant rate 0.5);
    8 GiB of memory available, whatever the machine has."""
    (tmp_path / "c.pbtxt").write_text(TINY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(limits, "available_memory", lambda meminfo="": 8 * GIB)
    return tmp_path



def tpuemb(*args: str, cwd: Path, env: dict[str, str] | None = None,
           memory: int | None = None) -> subprocess.CompletedProcess[str]:
    """The real command in a new process (``python -m tpuemb_cfg ARGS``); ``memory``: its
    address-space limit in bytes, so that what once exhausted memory fails fast here."""
    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([sys.executable, "-m", "tpuemb_cfg", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, preexec_fn=limit,
                          env={**os.environ, **(env or {})})


# --------------------------------------------------------------------------------------------
# 1. Counts a user gives are covered by the estimate or refused


@pytest.mark.parametrize("counts", [["--init-tokens", "2147483648", "--replicas-to-aggregate", "4"],
                                    ["--replicas-to-aggregate", "2147483648"]])
def test_tokens_and_replicas_of_2_31_need_no_memory(tmp_path: Path, counts: list[str]) -> None:
    """2^31 tokens were 2^31 list entries (killed by the kernel at 16.7 GB): a run of them now
    fits in 4 GiB of address space."""
    (tmp_path / "c.pbtxt").write_text(TINY)
    done = tpuemb("simulate", "c.pbtxt", "--workers", "2", "--steps", "2", "--engine", "numpy",
                  "--out-dir", "o", "-q", *counts, cwd=tmp_path, memory=4 * GIB,
                  env={"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["gradients"]["computed"] == 4


def _deflated_zeros(path: Path, arrays: dict[str, np.ndarray], key: str, shape: tuple[int, ...]
                    ) -> None:
    """An npz of ``arrays`` plus ``key``: float32 zeros of ``shape``, compressed, written a
    block at a time (never whole in memory)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, array in arrays.items():
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, array)
            archive.writestr(name + ".npy", buffer.getvalue())
        with archive.open(key + ".npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(
                member, {"descr": "<f4", "fortran_order": False, "shape": shape})
            block = bytes(2**22)
            left = int(np.prod(shape)) * 4
            while left:
                member.write(block[:min(left, len(block))])
                left -= min(left, len(block))


@pytest.mark.parametrize(("extra", "words"), [
    # 256 MiB of gradients, as much again of activations, and the process (memory.py's
    # BASE_PROCESS + NUMBA_PROCESS: 47 + 105 MiB): 664 MiB; the table is a few KiB.
    ("s0/f0/grad", ("the simulation needs about 664 MiB (estimate: the process, tables, slots, "
                    "a step's working arrays, the batches and the activations), more than the "
                    "memory limit of 64 MiB",)),
    ("s0/f9/grad", ("b.npz: key s0/f9/grad: error: feature index 9 does not exist",)),
])
def test_a_compressed_npz_is_checked_before_it_inflates(work: Path, extra: str,
                                                        words: tuple[str, ...]) -> None:
    """256 MiB of zeros compress to a few hundred KB: the keys and the sizes are checked from
    the .npy headers, before any array data is decompressed."""
    _deflated_zeros(work / "b.npz", {"s0/f0/ids": np.array([1, 3])}, extra, (2**25, 2))
    assert (work / "b.npz").stat().st_size < 2**21
    before = snapshot(work)
    tracemalloc.start()
    try:
        result = run("simulate", "c.pbtxt", "--batches", "b.npz", "--out", "o.npz",
                     "--max-memory", "64M")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20  # nothing was decompressed
    one_line(result, 2, *words)
    assert snapshot(work) == before


def test_read_npz_refuses_what_would_not_fit_before_decompressing(work: Path) -> None:
    _deflated_zeros(work / "z.npz", {"small": np.arange(3)}, "zeros", (2**25, 2))
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as info:
            read_npz(work / "z.npz", max_bytes=64 * 2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20
    assert str(info.value) == (
        f"{work / 'z.npz'}: key zeros: error: the arrays of the file take 256 MiB once read (2 of "
        "2 arrays; the largest, this one, shape (33554432, 2) of float32: 256 MiB), more than the "
        "memory limit of 64 MiB; nothing was decompressed - if the file is right and the machine "
        "can hold it, raise the limit (--max-memory; max_bytes= in Python)")


def test_an_npz_header_larger_than_its_data_is_refused(work: Path) -> None:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<i8", "fortran_order": False, "shape": (2**40,)})
    with zipfile.ZipFile(work / "b.npz", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("s0/f0/ids.npy", header.getvalue() + bytes(16))
    refused(work, "simulate", "c.pbtxt", "--batches", "b.npz", "--out", "o.npz", words=(
        "b.npz: key s0/f0/ids: error: cannot read the array (its header declares shape "
        "(1099511627776,) of int64 (8 TiB), but the member holds 16 bytes of data",))


def test_a_run_whose_history_would_not_fit_is_refused(work: Path) -> None:
    """A single worker's history stops growing at sim.history.LIMIT steps (issue 33: its
    estimate is the same for 20,000 and 2,000,000 steps); the multi-worker record of every
    gradient still grows with the steps, and counts in the estimate."""
    parts = []
    for steps in ("20000", "2000000"):
        result = run("simulate", "c.pbtxt", "--steps", steps, "--dry-run", "--json",
                     "--out-dir", "o")
        assert result.exit_code == 0, result.output
        parts.append(json.loads(result.stdout)["memory"]["estimate"]["history_bytes"])
    assert parts[0] == parts[1] == history_bytes(
        SyntheticRun(load(TINY.encode(), "text"), engine="numpy").plan, LIMIT + 1)
    line = refused(work, "simulate", "c.pbtxt", "--workers", "8", "--steps", "5000",
                   "--max-memory", "32M", "--out-dir", "o")
    assert "the record of 8 x 5,000 gradients" in line and "run fewer steps or workers" in line


@pytest.mark.parametrize("text", [TINY, QUICKSTART])
def test_history_bytes_bound_the_history(text: str) -> None:
    """history_bytes is an upper bound of the records, the summary's lists and their text, and
    not far above them."""
    run_ = SyntheticRun(load(text.encode(), "text"), engine="numpy")
    run_.run(2)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run_.run(202)
        summary = run_.summary()
        text_ = json.dumps(summary, indent=2)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(text_) > 0
    bound = history_bytes(run_.plan, 200)
    assert kept <= bound <= 4 * kept, (kept, bound)


# --------------------------------------------------------------------------------------------
# 2. Damaged checkpoints under --resume


def _text(value: str) -> np.ndarray:
    return np.frombuffer(value.encode(), dtype=np.uint8).copy()


@pytest.mark.parametrize(("damage", "key", "problem"), [
    (lambda a: a.pop("executor/step"), "executor/step", "missing"),
    (lambda a: a.update({"executor/step": np.array([4, 4])}), "executor/step",
     "int64 of shape (2,) found, expected an integer scalar"),
    (lambda a: a.update({"executor/step": np.array(-3)}), "executor/step",
     "-3 found, expected a step number (0 or more)"),
    (lambda a: a.update({"run/rng": _text('{"bit_generator": "PCG64", "state": 5}')}), "run/rng",
     "not a state of the run's generator ('int' object is not subscriptable)"),
    (lambda a: a.update({"run/history": _text("[1, 2, 3, 4]")}), "run/history",
     "record 0: expected an object with step, loss and tables"),
    (lambda a: a.update({"run/history": _text("[]")}), "run/history",
     "0 record(s) found for the 4 step(s) of executor/step"),
    (lambda a: a.update({"run/history": _text('{"stride": 3, "steps": 4, "records": []}')}),
     "run/history", "expected stride (a power of 2), steps (4, the step of executor/step) and "
     "records"),
    (lambda a: a.pop("table/t"), "table/t", "missing: a checkpoint holds every table and slot"),
])
def test_a_damaged_checkpoint_is_refused_before_the_run(work: Path, damage: object, key: str,
                                                        problem: str) -> None:
    result = run("simulate", "c.pbtxt", "--steps", "4", "--checkpoint-every", "2",
                 "--out-dir", "o", "-q")
    assert result.exit_code == 0, result.output
    arrays = dict(read_npz(work / "o" / "checkpoint.npz"))
    damage(arrays)  # type: ignore[operator]
    atomic_write_npz(work / "o" / "checkpoint.npz", arrays)
    line = refused(work, "simulate", "c.pbtxt", "--steps", "6", "--resume", "--out-dir", "o")
    assert line == (f"o/checkpoint.npz: key {key}: error: {problem}; the checkpoint is damaged "
                    "(tpuemb writes it whole, so it was changed or cut short since): run again "
                    "without --resume, or resume from an older copy of it")


@pytest.mark.parametrize("cut", [True, False])
def test_an_unreadable_checkpoint_is_called_damaged_not_a_savez_job(work: Path, cut: bool
                                                                    ) -> None:
    result = run("simulate", "c.pbtxt", "--steps", "2", "--checkpoint-every", "2",
                 "--out-dir", "o", "-q")
    assert result.exit_code == 0, result.output
    checkpoint = work / "o" / "checkpoint.npz"
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[:len(data) // 2] if cut else b"PK\x03\x04 cut short")
    line = refused(work, "simulate", "c.pbtxt", "--steps", "4", "--resume", "--out-dir", "o")
    assert line.startswith("o/checkpoint.npz: error: cannot read as .npz (")
    assert line.endswith("; the checkpoint is damaged (tpuemb writes it whole, so it was changed "
                         "or cut short since): run again without --resume, or resume from an "
                         "older copy of it")
    assert "numpy.savez" not in line


# --------------------------------------------------------------------------------------------
# 3. Integers out of range


@pytest.mark.parametrize(("option", "value", "low"), [
    ("--max-staleness", "9223372036854775808", "0"),
    ("--replicas-to-aggregate", "9223372036854775808", "1"),
    ("--init-tokens", "-2", "-1"),
])
def test_out_of_range_worker_counts_are_refused_with_the_range(work: Path, option: str,
                                                               value: str, low: str) -> None:
    line = refused(work, "simulate", "c.pbtxt", "--workers", "2", option, value)
    assert line == (f"{option} {value}: expected {low} to 9223372036854775807 (2^63 - 1: "
                    "TensorFlow holds it in an int64)")


def test_the_library_refuses_staleness_beyond_int64(work: Path) -> None:
    with pytest.raises(UsageError, match=r"^max_staleness=9223372036854775808: expected at most "
                                         r"9223372036854775807"):
        MultiWorkerRun(load(TINY.encode(), "text"), workers=2, max_staleness=2**63)


# --------------------------------------------------------------------------------------------
# 4. NUMBA_DISABLE_JIT


def test_numba_disable_jit_runs_the_numpy_engine(tmp_path: Path) -> None:
    (tmp_path / "c.pbtxt").write_text(QUICKSTART)
    off = tpuemb("simulate", "c.pbtxt", "--steps", "3", "--out-dir", "off", "-q", cwd=tmp_path,
                 env={"NUMBA_DISABLE_JIT": "1"})
    assert off.returncode == 0, off.stderr
    assert off.stderr == ("warning: NUMBA_DISABLE_JIT is set, so numba's kernels cannot be "
                          "compiled; running the NumPy engine instead (same results, slower); "
                          "unset NUMBA_DISABLE_JIT for the numba engine, or choose --engine "
                          "numpy to silence this\n")
    numpy_run = tpuemb("simulate", "c.pbtxt", "--steps", "3", "--out-dir", "np", "-q",
                       "--engine", "numpy", cwd=tmp_path)
    assert numpy_run.returncode == 0, numpy_run.stderr
    assert ((tmp_path / "off" / "tables.npz").read_bytes()
            == (tmp_path / "np" / "tables.npz").read_bytes())


# --------------------------------------------------------------------------------------------
# 5. Specs and custom computations that raise BaseException or call os._exit


@pytest.mark.parametrize(("body", "message"), [
    ("class Stop(BaseException):\n    pass\n\nraise Stop('no table today')\n",
     "spec.py:4:1: error: Stop (a BaseException subclass): no table today"),
    ("import os\nos._exit(0)\n",
     "spec.py:2:1: error: the spec called os._exit(0), which would end tpuemb at once, with "
     "nothing written and nothing said; a spec only defines feature_config (and build "
     "arguments)"),
    ("import os\ntry:\n    os._exit(0)\nexcept BaseException:\n    pass\n" + SPEC,
     "spec.py: error: the spec called os._exit(0), which would end tpuemb at once, with nothing "
     "written and nothing said; a spec only defines feature_config (and build arguments)"),
])
@pytest.mark.parametrize("command", ["compile", "simulate"])
def test_a_spec_cannot_end_tpuemb_silently(tmp_path: Path, body: str, message: str,
                                           command: str) -> None:
    (tmp_path / "spec.py").write_text(body)
    args = ["-o", "out.pbtxt"] if command == "compile" else ["--steps", "1", "--out-dir", "o"]
    done = tpuemb(command, "spec.py", *args, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, message + "\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.py"]


def test_a_custom_optimizer_calling_sys_exit_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "spec.py").write_text(
        "import sys\nfrom tpuemb_cfg.embedding import CustomOptimizer, FeatureConfig, "
        "TableConfig\n\ndef quit_(*args):\n    sys.exit(0)\n\n"
        "table = TableConfig(10, 2, optimizer=CustomOptimizer(quit_, 0.1), name='t')\n"
        "feature_config = FeatureConfig(table)\nper_replica_batch_size = 4\n")
    done = tpuemb("simulate", "spec.py", "--steps", "1", "--out-dir", "o", "-q", "--engine",
                  "numpy", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (
        2, "spec.py: error: table 't': the CustomOptimizer's custom_computation raised "
           "SystemExit: 0\n")
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------------------------
# 6. Learning rates that overflow float32


@pytest.mark.parametrize("rate", ["3e38", "1e30"])
def test_an_overflowing_learning_rate_is_named_not_a_batches_key(work: Path, rate: str) -> None:
    line = refused(work, "simulate", "--learning-rate", rate, "--steps", "20", "--out-dir", "o",
                   "--strict-finite")
    assert line.startswith("step ")
    assert "non-finite" in line and "lower the learning rate" in line
    assert f"the run sends learning_rate={float(rate):.6g} on every dynamic tag" in line
    assert line.endswith("(set by --learning-rate)")
    assert "key s" not in line and "grad" not in line


def test_an_overflowing_learning_rate_is_said_then_named_by_default(work: Path) -> None:
    """Without --strict-finite the update's result is kept and said (with its cause, the
    learning rate); the synthetic run then stops at the activations that read it, naming the
    same cause."""
    result = run("simulate", "--learning-rate", "3e38", "--steps", "20", "--out-dir", "o", "-q")
    assert result.exit_code == 2
    warning, error = result.stderr.splitlines()
    assert warning.startswith("warning: step 1: the update of table 'item' left ")
    assert "lower the learning rate" in warning
    assert error.startswith("step 2: the activations of feature ")
    assert warning.removeprefix("warning: ") in error


def test_an_overflowing_schedule_is_named(work: Path) -> None:
    (work / "q.pbtxt").write_text(QUICKSTART)
    (work / "sim.pbtxt").write_text("learning_rate_schedule { tag: 1 constant: 1e30 }\n"
                                    "strict_finite: true\n")
    line = refused(work, "simulate", "q.pbtxt", "--spec", "sim.pbtxt", "--steps", "20",
                   "--out-dir", "o")
    assert line.startswith("step 1: the update of table 'item' left ")
    assert "the schedule of tag 1 gives 1e+30 at step 1" in line
    assert line.endswith("(set by the --spec schedule)")


def test_the_executor_reports_the_update_that_overflowed(work: Path) -> None:
    config = load(TINY.replace("constant: 0.5", "constant: 3e38").encode(), "text")
    for engine in ("numba", "numpy"):
        executor = Executor(config, engine=engine, strict_finite=True)
        with pytest.raises(NumericalError) as info:
            executor.step([{"ids": np.array([1, 3]), "grad": np.full((2, 2), 2, np.float32)}])
        assert str(info.value) == (
            "step 0: the update of table 't' left 4 parameter(s) non-finite (first: -inf at row "
            "1, column 0): lr * G overflowed: 3.00000001e+38 * 2 is beyond float32's 3.4e38, "
            "with learning rate 3e+38 (the configuration's constant learning rate); lower the "
            "learning rate")
        assert info.value.table == "t"


# --------------------------------------------------------------------------------------------
# 7. One grammar for sizes, one for seeds


def test_8g_is_8_gib_wherever_a_size_is_given(work: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    monkeypatch.setenv("TPUEMB_MAX_INPUT", "8G")
    assert limits.max_input_bytes() == 8 * GIB  # the environment
    assert parse_size("8G") == 8 * GIB  # --max-memory
    assert settings.parse_size("8G") == 8 * GIB  # memory-budget in [tool.tpuemb]
    assert units.parse_size("8GB") == units.parse_size("8GiB") == 8 * GIB
    (work / "huge.pbtxt").write_text(HUGE)
    line = refused(work, "simulate", "huge.pbtxt", "--max-memory", "8G", "--out-dir", "o")
    assert "more than the memory limit of 8 GiB" in line
    with pytest.raises(UsageError, match="more than the memory limit of 8 GiB"):
        Executor(load(HUGE.encode(), "text"), max_memory="8G")  # the library: the same grammar


def test_a_pyproject_memory_budget_takes_the_same_sizes(work: Path) -> None:
    (work / "pyproject.toml").write_text('[tool.tpuemb]\nmemory-budget = "64"\n')
    result = run("validate", "c.pbtxt", "--fail-on", "warning")
    assert result.exit_code == 1, result.output
    assert "exceed the per-host memory budget of 64 bytes" in result.output
    (work / "pyproject.toml").write_text('[tool.tpuemb]\nmemory-budget = "1K"\n')
    assert run("validate", "c.pbtxt", "--fail-on", "warning").exit_code == 0  # 1 KiB fits
    (work / "pyproject.toml").write_text('[tool.tpuemb]\nmemory-budget = "1e9"\n')
    one_line(run("validate", "c.pbtxt"), 2, "pyproject.toml: key tool.tpuemb.memory-budget: "
             "error: '1e9': not a size; expected bytes or a number with a binary unit")


@pytest.mark.parametrize("command", [["simulate", "c.pbtxt", "--out-dir", "o"],
                                     ["bench", "--vocab", "100", "--ids", "8", "--steps", "1"]])
@pytest.mark.parametrize("seed", ["-1", "18446744073709551616", "1.5"])
def test_simulate_and_bench_read_seeds_alike(work: Path, command: list[str], seed: str) -> None:
    line = refused(work, *command, "--seed", seed)
    assert line == f"--seed {seed}: not a seed; expected a whole number from 0 to 2^64 - 1"


def test_seeds_are_whole_64_bit_numbers(work: Path) -> None:
    plan = Executor(load(TINY.encode(), "text")).plan
    batch = SyntheticData(plan, seed=1).next_batch()[0].ids
    assert not np.array_equal(SyntheticData(plan, seed=1 + 2**32).next_batch()[0].ids, batch)
    SyntheticData(plan, seed=2**64 - 1).next_batch()
    with pytest.raises(TypeError, match=r"^seed=1\.5: not a seed \(float\); expected a whole "):
        Executor(load(TINY.encode(), "text"), seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^seed=-1: not a seed; expected a whole number from 0"):
        SyntheticRun(load(TINY.encode(), "text"), seed=-1)
    result = run("simulate", "c.pbtxt", "--seed", "18446744073709551615", "--steps", "1",
                 "--out-dir", "o", "--json", "-q")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["seed"] == 2**64 - 1


def test_the_spec_file_seed_is_checked_where_it_is_written(work: Path) -> None:
    (work / "sim.pbtxt").write_text("steps: 1\nseed: -1\n")
    refused(work, "simulate", "c.pbtxt", "--spec", "sim.pbtxt",
            words=("sim.pbtxt:2:1: error: seed: -1 found, expected a whole number from 0 to "
                   "2^64 - 1",))


# --------------------------------------------------------------------------------------------
# 8. Ids as found


def test_a_uint64_id_is_reported_as_found(work: Path) -> None:
    arrays: dict[str, np.ndarray] = {
        "s0/f0/ids": np.array([1, 2**64 - 1], dtype=np.uint64),
        "s0/f0/grad": np.ones((2, 2), dtype=np.float32)}
    atomic_write_npz(work / "b.npz", arrays)
    refused(work, "simulate", "c.pbtxt", "--batches", "b.npz", "--out", "o.npz", words=(
        "b.npz: key s0/f0/ids: error: id 18446744073709551615 at index 1 is outside table 't': "
        "ids must be in [0, 16)",))


# --------------------------------------------------------------------------------------------
# 9. The library's Executor: arguments and threads


def test_executor_arguments_get_clear_errors(work: Path) -> None:
    executor = Executor(load(TINY.encode(), "text"))
    with pytest.raises(InputError, match=r"batch: NoneType found; a batch is a sequence with one "
                                         r"FeatureInput"):
        executor.step(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^max_memory=1\.5: not a size \(float\)"):
        Executor(load(TINY.encode(), "text"), max_memory=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^max_memory='lots': not a size"):
        Executor(load(TINY.encode(), "text"), max_memory="lots")


def test_two_threads_stepping_one_executor_lose_no_update(
        work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps are serialized: two threads of 30 steps each end where 60 sequential steps do (SGD
    with one batch: the order of the steps does not matter), and no two steps update at once.
    Each update waits 5 ms here, so that unserialized steps overlap on any machine (without the
    lock they did, and the compiled steps of two threads updated the same rows at once)."""
    config = load(TINY.replace("constant: 0.5", "constant: 0.001").encode(), "text")
    batch = [{"ids": np.array([1, 3, 3, 5]), "grad": np.ones((4, 2), np.float32)}]
    sequential = Executor(config)
    for _ in range(60):
        sequential.step(batch)
    inside: list[int] = []
    overlapped: list[int] = []
    backward = Executor._backward

    def slow_backward(self: Executor, *args: object, **kwargs: object) -> None:
        inside.append(1)
        if len(inside) > 1:
            overlapped.append(self.step_index)
        time.sleep(0.005)
        try:
            backward(self, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            inside.pop()

    monkeypatch.setattr(Executor, "_backward", slow_backward)
    shared = Executor(config)
    start = threading.Barrier(2)

    def steps() -> None:
        start.wait()
        for _ in range(30):
            shared.step(batch)

    threads = [threading.Thread(target=steps) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlapped == []
    assert shared.step_index == 60
    assert np.array_equal(shared.state_arrays()["table/t"],
                          sequential.state_arrays()["table/t"])
