"""Issue 12 for `tpuemb simulate`, `tpuemb bench` and the library's Executor: typos and hostile
input never cost data and never print a traceback.

One test (at least) per kind of mistake, each asserting the exact behaviour: the exit status,
exactly one line on stderr, no traceback, the inputs' bytes unchanged and nothing written. The
other commands and the shared mechanisms (tpuemb_cfg.formats.atomic) are covered in
test_robustness.py, whose helpers this module reuses.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from test_robustness import one_line, refused, run

from tpuemb_cfg import UsageError, load, simulate
from tpuemb_cfg.commands import _outputs
from tpuemb_cfg.commands.simulate import parse_size
from tpuemb_cfg.executor.memory import memory_estimate
from tpuemb_cfg.formats import limits
from tpuemb_cfg.formats.npzio import read_npz
from tpuemb_cfg.run.bench import Workload, check_memory, memory_needed
from tpuemb_cfg.session import prepare
from tpuemb_cfg.sim.multiworker import MAX_WORKERS, MultiWorkerRun  # the runs the CLI makes
from tpuemb_cfg.sim.synthetic import SyntheticRun
from tpuemb_cfg.simulate import Executor

TINY = (ROOT / "tests" / "data" / "multiworker" / "tiny.pbtxt").read_text()
HUGE = TINY.replace("vocabulary_size: 16", "vocabulary_size: 100000000000").replace(
    "dimension: 2", "dimension: 1000")
GIB = 2**30


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder of the test, holding the configuration ``c.pbtxt`` (one small table)
    and the recorded steps ``b.npz`` of a replay; 8 GiB of memory available, whatever the
    machine has."""
    (tmp_path / "c.pbtxt").write_text(TINY)
    np.savez(tmp_path / "b.npz", **{"s0/f0/ids": np.array([1, 3], dtype=np.int64),
                                    "s0/f0/grad": np.ones((2, 2), dtype=np.float32)})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(limits, "available_memory", lambda meminfo="": 8 * GIB)
    return tmp_path



# --------------------------------------------------------------------------------------------
# 1. Outputs never replace inputs


@pytest.mark.parametrize("kind", ["same", "symlink", "hardlink"])
def test_replay_out_is_never_its_batches(work: Path, kind: str) -> None:
    target = {"same": "b.npz", "symlink": "link.npz", "hardlink": "hard.npz"}[kind]
    if kind == "symlink":
        (work / "link.npz").symlink_to("b.npz")
    elif kind == "hardlink":
        os.link(work / "b.npz", work / "hard.npz")
    line = refused(work, "simulate", "c.pbtxt", "--batches", "b.npz", "--out", target)
    assert line.startswith(f"refusing to write --out {target}: it is the same file as the input "
                           "--batches b.npz")


@pytest.mark.parametrize(("option", "value"), [("--out", "c.pbtxt"), ("--init", "o.npz")])
def test_replay_out_is_never_its_config_or_init(work: Path, option: str, value: str) -> None:
    args = ["simulate", "c.pbtxt", "--batches", "b.npz", "--out", "o.npz", option, value]
    if option == "--init":
        np.savez(work / "o.npz", x=np.zeros(1))
    line = refused(work, *args)
    assert "it is the same file as the input" in line
    assert ("CONFIG c.pbtxt" if option == "--out" else "--init o.npz") in line


def test_plot_is_never_the_config_nor_another_output(work: Path) -> None:
    line = refused(work, "simulate", "c.pbtxt", "--plot", "c.pbtxt")
    assert line == ("refusing to write --plot c.pbtxt: it is the same file as the input CONFIG "
                    "c.pbtxt; writing it would destroy the input - choose another output path")
    line = refused(work, "simulate", "c.pbtxt", "--out-dir", "o", "--plot", "o/summary.json")
    assert line == ("--out-dir o/summary.json and --plot o/summary.json are the same file; give "
                    "each output its own path")


def test_out_dir_outputs_are_never_the_spec(work: Path) -> None:
    (work / "o").mkdir()
    (work / "o" / "summary.json").write_text('{"steps": 1}')
    line = refused(work, "simulate", "c.pbtxt", "--spec", "o/summary.json", "--out-dir", "o")
    assert "it is the same file as the input --spec o/summary.json" in line


# --------------------------------------------------------------------------------------------
# 2. Outputs checked before any work, written together at the end


@pytest.mark.parametrize(("args", "words"), [
    (["--batches", "b.npz", "--out", "missing/o.npz"], "folder missing does not exist"),
    (["--plot", "missing/p.png"], "create it first (mkdir -p missing) or choose another --plot"),
    (["--out-dir", "c.pbtxt/o"], "c.pbtxt is a file, not a folder; choose another --out-dir"),
    (["--plot", "p.jpg"], "--plot p.jpg: cannot write .jpg files; use one of the extensions "
                          ".png, .svg, .pdf"),
    (["--plot", "-"], "--plot -: the plot is an image file"),
    (["--batches", "b.npz", "--out", "o.txt"], "--out o.txt: cannot write .txt files"),
])
def test_bad_output_paths_are_refused_before_the_run(work: Path, args: list[str],
                                                     words: str) -> None:
    refused(work, "simulate", "c.pbtxt", *args, words=(words,))


def test_an_unwritable_checkpoint_is_refused_before_the_run(work: Path) -> None:
    (work / "o" / "checkpoint.npz").mkdir(parents=True)
    refused(work, "simulate", "c.pbtxt", "--out-dir", "o", "--checkpoint-every", "1",
            words=("o/checkpoint.npz: error: is a folder",))


def test_read_only_out_dir_is_refused(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (work / "locked").mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: (
        False if Path(path).name == "locked" and mode & os.W_OK else real_access(path, mode)))
    refused(work, "simulate", "c.pbtxt", "--out-dir", "locked",
            words=("folder locked is not writable (permission denied); choose another --out-dir",))


def test_os_error_while_writing_leaves_no_output(work: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    refused(work, "simulate", "c.pbtxt", "--steps", "2", "--out-dir", "o", "--plot", "p.png",
            words=("error: cannot write: No space left on device",))


def test_a_failing_plot_leaves_neither_tables_nor_summary(work: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(_outputs, "_draw", broken)
    refused(work, "simulate", "c.pbtxt", "--steps", "2", "--out-dir", "o", "--plot", "p.png",
            words=("p.png: error: cannot write: Input/output error",))


def test_plot_never_follows_a_symlink_planted_at_a_temporary_name(work: Path) -> None:
    victim = work / "victim.txt"
    victim.write_text("precious")
    for name in (".p.png.tmp.png", ".p.png.tmp", "p.png.tmp"):  # the old predictable names
        (work / name).symlink_to(victim)
    result = run("simulate", "c.pbtxt", "--steps", "2", "--out-dir", "o", "--plot", "p.png", "-q")
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious"
    assert (work / "p.png").read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in work.iterdir() if p.name.startswith(".")) == [
        ".p.png.tmp", ".p.png.tmp.png"]  # nothing of tpuemb's left beside them


@pytest.mark.parametrize(("suffix", "magic"), [(".png", b"\x89PNG"), (".SVG", b"<?xml"),
                                               (".pdf", b"%PDF")])
def test_plot_format_follows_the_extension(work: Path, suffix: str, magic: bytes) -> None:
    result = run("simulate", "c.pbtxt", "--steps", "2", "--out-dir", "o", "--plot",
                 "run" + suffix, "-q")
    assert result.exit_code == 0, result.output
    assert (work / ("run" + suffix)).read_bytes().startswith(magic)


def test_plot_through_a_symlink_replaces_its_target_and_keeps_the_link(work: Path) -> None:
    (work / "plots").mkdir()
    (work / "plots" / "run.png").write_bytes(b"old")
    (work / "latest.png").symlink_to("plots/run.png")
    result = run("simulate", "c.pbtxt", "--steps", "1", "--out-dir", "o", "--plot", "latest.png",
                 "-q")
    assert result.exit_code == 0, result.output
    assert (work / "latest.png").is_symlink()
    assert (work / "plots" / "run.png").read_bytes().startswith(b"\x89PNG")


# --------------------------------------------------------------------------------------------
# 4. Memory guards: refuse before allocating, suggest a limit that works


def suggested_limit(message: str) -> int:
    """The bytes of the ``--max-memory SIZE`` a refusal suggests."""
    return parse_size(message.split("--max-memory ")[1].split()[0])


# 10,000,000 x 256 with SGD: a 9.5 GiB table, more than the 6.4 GiB a run may use with 8 GiB
# available, less than the 64 GiB of the machine the tests below pretend to be.
BIG = TINY.replace("vocabulary_size: 16", "vocabulary_size: 10000000").replace(
    "dimension: 2", "dimension: 256")


def test_executor_refuses_what_the_machine_cannot_hold(work: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "total_memory", lambda: 64 * GIB)
    needed = memory_estimate(prepare(load(BIG.encode(), "text")).plan)
    with pytest.raises(UsageError) as info:
        Executor(load(BIG.encode(), "text"))
    message = str(info.value)
    assert message.startswith("the simulation needs about ")
    assert "more than the 6.4 GiB it may use here (80% of the memory available)" in message
    assert needed <= suggested_limit(message) < 2.5 * needed
    with pytest.raises(UsageError) as info:
        Executor(load(BIG.encode(), "text"), max_memory=8 * GIB)
    assert "more than the memory limit of 8 GiB" in str(info.value)
    assert "raise the limit to --max-memory" in str(info.value)
    assert needed <= suggested_limit(str(info.value)) < 2.5 * needed
    # Beyond the machine (364 TiB): no --max-memory is suggested, only what can be done.
    with pytest.raises(UsageError) as info:
        Executor(load(HUGE.encode(), "text"), max_memory=10 * GIB)
    assert "more than this machine has (64 GiB)" in str(info.value)
    assert "--max-memory" not in str(info.value)


def test_suggested_limits_admit_the_run_in_either_unit() -> None:
    for needed in (1, 999_999, 2**30, 130 * 10**9, 1023 * GIB, 700 * 2**40):
        suggested = limits.suggest_memory(needed)
        assert parse_size(suggested) >= needed  # --max-memory
        assert limits.parse_size(suggested) >= needed  # TPUEMB_MAX_INPUT: the same grammar


def test_executor_memory_check_can_be_skipped(work: Path) -> None:
    Executor(load(TINY.encode(), "text"), max_memory=1, check_memory=False)  # tiny: nothing to fear
    with pytest.raises(UsageError, match="--max-memory 1M"):
        Executor(load(TINY.encode(), "text"), max_memory=1)


def test_simulate_refuses_a_huge_configuration_in_one_line(work: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "total_memory", lambda: 64 * GIB)
    (work / "big.pbtxt").write_text(BIG)
    line = refused(work, "simulate", "big.pbtxt", "--out-dir", "o")
    assert "the simulation needs about" in line and "set a limit to try anyway" in line
    assert suggested_limit(line) >= memory_estimate(prepare(load(BIG.encode(), "text")).plan)
    (work / "huge.pbtxt").write_text(HUGE)
    line = refused(work, "simulate", "huge.pbtxt", "--out-dir", "o")
    assert "more than this machine has (64 GiB)" in line and "--max-memory" not in line


def test_bench_refuses_before_allocating_and_names_a_vocab_that_fits(
        work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "total_memory", lambda: 64 * GIB)
    line = refused(work, "bench", "--vocab", "100000000000", "--dim", "1000", "--engine",
                   "numpy")
    assert line.startswith("the benchmark of a 100,000,000,000 x 1000 table needs about ")
    assert "more than the 6.4 GiB it may use here" in line
    vocab = int(line.split("use --vocab ")[1].split()[0])
    check_memory(Workload(vocab=vocab, dim=1000))  # the suggestion fits
    with pytest.raises(UsageError):
        check_memory(Workload(vocab=vocab * 2, dim=1000))  # and is not far below what would
    assert "--max-memory" not in line  # 364 TiB: more than the machine, no limit suggested
    line = refused(work, "bench", "--vocab", "10000000", "--dim", "128", "--engine", "numpy")
    assert suggested_limit(line) >= memory_needed(Workload(vocab=10_000_000, dim=128))


def test_bench_max_memory_refusal_suggests_a_limit_that_works(work: Path) -> None:
    line = refused(work, "bench", "--vocab", "100000", "--dim", "4", "--ids", "8",
                   "--max-memory", "1M")
    assert "more than the memory limit of 1 MiB" in line
    check_memory(Workload(vocab=100_000, dim=4, ids=8), suggested_limit(line))  # it works


def test_memory_error_the_estimate_missed_is_one_line(work: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def exhausted(self: SyntheticRun) -> None:
        raise MemoryError("Unable to allocate 8.00 GiB for an array")

    monkeypatch.setattr(SyntheticRun, "run_step", exhausted)
    line = refused(work, "simulate", "c.pbtxt", "--out-dir", "o")
    assert line.startswith("tpuemb: out of memory (Unable to allocate 8.00 GiB for an array); ")


# --------------------------------------------------------------------------------------------
# 5. Interrupts


def test_ctrl_c_mid_run_leaves_no_partial_output(work: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real_step = SyntheticRun.run_step

    def interrupted(self: SyntheticRun) -> dict[str, object]:
        if self.step == 3:
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(SyntheticRun, "run_step", interrupted)
    result = run("simulate", "c.pbtxt", "--steps", "5", "--out-dir", "o",
                 "--checkpoint-every", "2", "--plot", "p.png")
    one_line(result, 130, "tpuemb: interrupted; no output file was left half-written")
    assert sorted(p.name for p in (work / "o").iterdir()) == ["checkpoint.npz"]
    assert not (work / "p.png").exists()
    checkpoint = read_npz(work / "o" / "checkpoint.npz")  # complete, at step 2
    assert int(checkpoint["executor/step"]) == 2


def test_ctrl_c_mid_multi_worker_run_writes_nothing(work: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(self: MultiWorkerRun, worker: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(MultiWorkerRun, "_start", interrupted)
    refused(work, "simulate", "c.pbtxt", "--workers", "2", "--out-dir", "o", code=130,
            words=("tpuemb: interrupted",))


def test_ctrl_c_inside_a_compiled_call_is_an_interrupt(work: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal whose handler raises while numba's dispatcher calls back into Python comes out
    as ``SystemError: ... returned a result with an exception set`` caused by the
    ``KeyboardInterrupt`` (seen once in the real command below): still 130 and one line."""
    def interrupted(self: MultiWorkerRun, worker: int) -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise SystemError("CPUDispatcher(<function deduplicate>) returned a result with an "
                              "exception set") from exc

    monkeypatch.setattr(MultiWorkerRun, "_start", interrupted)
    refused(work, "simulate", "c.pbtxt", "--workers", "2", "--out-dir", "o", code=130,
            words=("tpuemb: interrupted",))


def test_a_system_error_not_caused_by_a_signal_is_not_an_interrupt(
        work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from tpuemb_cfg.base.interrupt import wrapped
    from tpuemb_cfg.cli import main

    def broken(self: MultiWorkerRun, worker: int) -> None:
        raise SystemError("a real bug")

    monkeypatch.setattr(MultiWorkerRun, "_start", broken)
    result = CliRunner().invoke(main, ["simulate", "c.pbtxt", "--workers", "2", "--out-dir", "o"])
    assert isinstance(result.exception, SystemError), result.output  # a bug stays a bug
    looped = SystemError("a cycle")
    looped.__context__ = ValueError("inner")
    looped.__context__.__context__ = looped
    assert wrapped(looped) is None
    cause = KeyboardInterrupt()
    chained = SystemError("outer")
    chained.__cause__ = RuntimeError("middle")
    chained.__cause__.__context__ = cause
    assert wrapped(chained) is cause


def test_ctrl_c_of_the_real_command_mid_run(tmp_path: Path) -> None:
    """A real SIGINT while `tpuemb simulate` runs: 130, one line, no partial output; the
    checkpoints it wrote are complete."""
    script = Path(sys.executable).parent / "tpuemb"
    if not script.exists():
        pytest.skip("the tpuemb console script is not installed beside this Python")
    (tmp_path / "c.pbtxt").write_text(TINY)
    process = subprocess.Popen(
        [str(script), "simulate", "c.pbtxt", "--steps", "1000000", "--checkpoint-every", "50",
         "--out-dir", "o", "-q"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "o" / "checkpoint.npz").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()
        assert (tmp_path / "o" / "checkpoint.npz").exists(), "no checkpoint within a minute"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err
    assert err.decode() == "tpuemb: interrupted; no output file was left half-written\n"
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["checkpoint.npz"]
    read_npz(tmp_path / "o" / "checkpoint.npz")


# --------------------------------------------------------------------------------------------
# 6. Option ranges


def test_negative_max_staleness_is_refused(work: Path) -> None:
    line = refused(work, "simulate", "c.pbtxt", "--workers", "2", "--max-staleness", "-1")
    assert line.startswith("--max-staleness -1: a gradient more than S updates old is dropped, "
                           "so a negative S drops every gradient")
    (work / "sim.pbtxt").write_text("workers { count: 2 max_staleness: -3 }\n")
    refused(work, "simulate", "c.pbtxt", "--spec", "sim.pbtxt",
            words=("sim.pbtxt:1:20: error: workers.max_staleness: -3 found, expected 0 or more",))


def test_the_library_keeps_tensorflows_negative_staleness(work: Path) -> None:
    """accumulator.md section 3: one worker, S = -1: staleness 0 > -1, dropped."""
    several = simulate.MultiWorkerRun(load(TINY.encode(), "text"), workers=1, max_staleness=-1,
                                      delay="fixed:2")
    several.run(1)
    summary = several.summary()
    assert (summary["global_step"], summary["stale_counter"]) == (0, 1)


def test_huge_worker_counts_are_refused_at_once(work: Path) -> None:
    started = time.monotonic()
    line = refused(work, "simulate", "c.pbtxt", "--workers", "100000")
    assert time.monotonic() - started < 10
    assert line.startswith(f"--workers 100000: at most {MAX_WORKERS} workers are simulated")
    assert f"use --workers {MAX_WORKERS} or fewer" in line
    (work / "sim.pbtxt").write_text("workers { count: 100000 }\n")
    refused(work, "simulate", "c.pbtxt", "--spec", "sim.pbtxt",
            words=("workers.count: 100000 found, expected at most 1024",))


def test_multi_worker_progress_starts_with_the_first_gradient(work: Path) -> None:
    several = simulate.MultiWorkerRun(load(TINY.encode(), "text"), workers=3,
                                      replicas_to_aggregate=2)
    events: list[int] = []
    several.run(2, progress=events.append)
    assert events == list(range(1, 2 * 3 * 2 + 1))  # every computation and every delivery


def test_resume_refuses_a_checkpoint_past_steps(work: Path) -> None:
    result = run("simulate", "c.pbtxt", "--steps", "4", "--checkpoint-every", "2",
                 "--out-dir", "o", "-q")
    assert result.exit_code == 0, result.output
    line = refused(work, "simulate", "c.pbtxt", "--steps", "2", "--resume", "--out-dir", "o")
    assert line == ("--resume: the checkpoint o/checkpoint.npz is at step 4, past --steps 2; "
                    "give --steps 4 or more to continue that run, or another --out-dir without "
                    "--resume to start a new one")
    result = run("simulate", "c.pbtxt", "--steps", "4", "--resume", "--out-dir", "o", "-q")
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------------------------
# 7. Accurate hints


def test_random_bytes_as_batches_say_what_they_are(work: Path) -> None:
    (work / "r.npz").write_bytes(np.random.default_rng(1).bytes(300))
    line = refused(work, "simulate", "c.pbtxt", "--batches", "r.npz", "--out", "o.npz")
    assert "r.npz: error: cannot read as .npz: the file starts with" in line
    assert "pickle" not in line


def test_max_memory_beyond_the_machine_is_refused_before_any_work(tmp_path: Path) -> None:
    """Issue 16: an explicit --max-memory is checked against the machine's physical memory."""
    from tpuemb_cfg.formats.limits import total_memory

    total = total_memory()
    if total is None:
        pytest.skip("this platform does not report its physical memory")
    out_dir = tmp_path / "out"
    result = run("simulate", "--steps", "1", "--out-dir", str(out_dir),
                 "--max-memory", str(2 * total))
    one_line(result, 2, "more than this machine has")
    assert not out_dir.exists()
