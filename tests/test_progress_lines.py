"""`tpuemb simulate`'s progress lines when standard error is a file or a pipe (issue 26, item 5).

A Ray Job, CI or ``nohup`` sends standard error to a file: there the bar of a terminal would show
nothing until the end. Each line starts with its UTC time; a step line comes for the first and
the last step and otherwise at most every ``TPUEMB_LOG_EVERY`` seconds (default 10), with the
rate, the time left and the loss; each checkpoint and the outputs get a line of their own.

The rate limit is checked with an injected clock (no test waits); the command itself runs as a
subprocess with standard error to a pipe (a synthetic run with checkpoints), and in-process
(click's ``CliRunner``, whose stderr is no file descriptor and so gets no lines, with that check
patched to say yes) for a replay of its batches and a multi-worker run.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import EXAMPLES, ROOT

from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.cli import main
from tpuemb_cfg.commands import _progress
from tpuemb_cfg.commands._progress import LOG_EVERY, RunLog, format_duration, log_every

STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) tpuemb simulate: (.*)$")


def _lines(text: str) -> list[str]:
    """The log lines of ``text`` without their time stamps (other lines left out)."""
    return [m.group(2) for m in map(STAMP.match, text.splitlines()) if m is not None]


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _log(every: float, clock: Clock) -> tuple[RunLog, io.StringIO]:
    stream = io.StringIO()
    # 2026-11-26 14:00:00 UTC as the wall clock of every line
    return RunLog("lines", stream, every=every, clock=clock, wall=lambda: 1795701600.0), stream


def test_step_lines_come_first_last_and_at_most_every_n_seconds() -> None:
    clock = Clock()
    log, stream = _log(10.0, clock)
    losses = iter(range(100, 0, -1))
    with log.steps(25, detail=lambda: f"loss {next(losses)}") as advance:
        assert advance is not None
        for step in range(1, 26):  # a step a second
            clock.now = float(step)
            advance(step)
    # step 1 (the first), 11 and 21 (10 s after the line before), 25 (the last); detail() is
    # asked only for a line that is written
    assert stream.getvalue().splitlines() == [
        "2026-11-26T14:00:00Z tpuemb simulate: step 1/25 (4%), 1 steps/s, ETA 24 s, loss 100",
        "2026-11-26T14:00:00Z tpuemb simulate: step 11/25 (44%), 1 steps/s, ETA 14 s, loss 99",
        "2026-11-26T14:00:00Z tpuemb simulate: step 21/25 (84%), 1 steps/s, ETA 4 s, loss 98",
        "2026-11-26T14:00:00Z tpuemb simulate: step 25/25 (100%), 1 steps/s, took 25 s, "
        "loss 97",
    ]


def test_a_resumed_run_counts_its_rate_from_the_checkpoint_step() -> None:
    clock = Clock()
    log, stream = _log(60.0, clock)
    with log.steps(1000, start=400, unit="step") as advance:
        assert advance is not None
        clock.now = 4.0  # 8 steps in 4 s: 2 steps/s, 592 left
        advance(408)
        clock.now = 30.0  # within a minute of the line before: nothing
        advance(460)
        clock.now = 64.0
        advance(520)  # 120 steps in 64 s: 1.875 steps/s, 480 left: 256 s
    assert _lines(stream.getvalue()) == [
        "step 408/1,000 (41%), 2 steps/s, ETA 4 min 56 s",
        "step 520/1,000 (52%), 1.88 steps/s, ETA 4 min 16 s",
    ]


def test_every_zero_writes_every_step_and_a_run_already_done_writes_none() -> None:
    clock = Clock()
    log, stream = _log(0.0, clock)
    with log.steps(3, unit="gradient event") as advance:
        assert advance is not None
        for done in (1, 2, 3):
            clock.now = done / 2
            advance(done)
    assert _lines(stream.getvalue()) == [
        "gradient event 1/3 (33%), 2 gradient events/s, ETA 1 s",
        "gradient event 2/3 (67%), 2 gradient events/s, ETA 0 s",
        "gradient event 3/3 (100%), 2 gradient events/s, took 2 s",
    ]
    with log.steps(5, start=5) as advance:  # resumed at its last step: nothing to run
        assert advance is None


def test_checkpoint_and_output_lines_name_path_size_and_seconds(tmp_path: Path) -> None:
    log, stream = _log(10.0, Clock())
    (tmp_path / "a").write_bytes(b"x" * 3000)
    (tmp_path / "b").write_bytes(b"y" * 72)
    log.checkpoint("run/checkpoint.npz", 1200, 5 << 20, 0.314)
    log.outputs([("run/a", str(tmp_path / "a")), ("run/b", str(tmp_path / "b"))], 1.5)
    assert _lines(stream.getvalue()) == [
        "checkpoint run/checkpoint.npz written at step 1,200 (5 MiB in 0.31 s)",
        "wrote run/a, run/b (3 KiB in 1.50 s)",
    ]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_the_bar_and_no_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    log = RunLog.for_stderr(quiet=False)
    assert log.view == "bar"
    with log.steps(8, start=3) as advance:  # a run resumed at step 3: a bar of 5
        assert advance is not None
        for done in range(4, 9):
            advance(done)
    log.checkpoint("c.npz", 8, 10, 0.1)  # a line would tear the bar: nothing
    log.outputs([("o.npz", "o.npz")], 0.1)
    shown = terminal.getvalue()
    assert "simulating" in shown and "5/5" in shown and "6/5" not in shown
    assert _lines(shown) == []


def test_quiet_and_silent_views_write_nothing() -> None:
    silent = RunLog("silent", io.StringIO())
    with silent.steps(10) as advance:
        assert advance is None
    silent.checkpoint("c.npz", 1, 10, 0.1)
    assert RunLog.for_stderr(quiet=True).view == "silent"


def test_log_every_reads_the_environment_variable() -> None:
    assert log_every({}) == LOG_EVERY == 10.0
    assert log_every({"TPUEMB_LOG_EVERY": " 30 "}) == 30.0
    assert log_every({"TPUEMB_LOG_EVERY": "0"}) == 0.0
    for bad in ("-1", "ten", "inf", "nan"):
        with pytest.raises(UsageError, match=r"TPUEMB_LOG_EVERY='.*': expected the seconds"):
            log_every({"TPUEMB_LOG_EVERY": bad})


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0.2, 59.4, 60, 185, 3599, 3600, 7650)] == [
        "0 s", "59 s", "1 min 00 s", "3 min 05 s", "59 min 59 s", "1 h 00 min", "2 h 07 min"]


def test_a_bad_log_every_is_refused_before_the_run(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUEMB_LOG_EVERY", "soon")
    result = CliRunner().invoke(main, ["simulate", "--steps", "1", "--out-dir",
                                       str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "TPUEMB_LOG_EVERY='soon'" in result.stderr
    assert not (tmp_path / "o").exists()


def _tpuemb(cwd: Path, *args: str, every: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TPUEMB_LOG_EVERY": every,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "tpuemb_cfg", "simulate", *args], cwd=cwd,
                          env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_run_with_stderr_to_a_pipe_logs_steps_checkpoints_and_outputs(
        tmp_path: Path, _in_process: Callable[..., Result]) -> None:
    (tmp_path / "c.pbtxt").write_bytes((EXAMPLES / "quickstart.pbtxt").read_bytes())
    # An hour between lines: only the first and the last step, whatever the machine's speed.
    done = _tpuemb(tmp_path, "c.pbtxt", "--steps", "5", "--checkpoint-every", "2",
                   "--save-batches", "b.npz", "--out-dir", "out", "--engine", "numpy", "--json",
                   every="3600")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # the lines go to stderr only
    loss = [f"{value:.6g}" for value in summary["loss"]]
    lines = _lines(done.stderr)
    assert len(lines) == 5, done.stderr
    assert re.fullmatch(rf"step 1/5 \(20%\), [\d.e+]+ steps/s, ETA \d+ s, loss {loss[0]}",
                        lines[0]), lines[0]
    for line, step in zip(lines[1:3], (2, 4), strict=True):
        assert re.fullmatch(rf"checkpoint out/checkpoint\.npz written at step {step} "
                            r"\([\d.]+ [KM]iB in \d+\.\d\d s\)", line), line
    checkpoint = (tmp_path / "out" / "checkpoint.npz").stat().st_size
    assert f"({format_size(checkpoint)} in " in lines[2]  # the one left is step 4's
    assert re.fullmatch(rf"step 5/5 \(100%\), [\d.e+]+ steps/s, took \d+ s, loss {loss[4]}",
                        lines[3]), lines[3]
    written = sum((tmp_path / p).stat().st_size
                  for p in ("out/tables.npz", "out/summary.json", "b.npz"))
    assert re.fullmatch(rf"wrote out/tables\.npz, out/summary\.json, b\.npz "
                        rf"\({re.escape(format_size(written))} in \d+\.\d\d s\)", lines[4])
    # The same batches replayed (in-process: stderr patched to count as a descriptor), a line
    # per step (TPUEMB_LOG_EVERY=0), then its output.
    replay = _in_process(tmp_path, "c.pbtxt", "--batches", "b.npz", "--out", "o.npz",
                         "--engine", "numpy")
    assert replay.exit_code == 0, replay.output
    lines = _lines(replay.stderr)
    assert [line.split(",")[0] for line in lines[:5]] == [
        f"step {n}/5 ({20 * n}%)" for n in range(1, 6)]
    size = format_size((tmp_path / "o.npz").stat().st_size)
    assert re.fullmatch(rf"wrote o\.npz \({re.escape(size)} in \d+\.\d\d s\)", lines[5])
    assert len(lines) == 6
    assert "replayed 5 step(s) of b.npz on c.pbtxt; wrote o.npz" in replay.stderr


@pytest.fixture
def _in_process(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """``tpuemb simulate ARGS`` in-process from folder ``cwd``, its stderr taken for a file
    descriptor (click's runner holds it in memory) and a line per step."""
    monkeypatch.setattr(_progress, "_is_descriptor", lambda stream: True)
    monkeypatch.setenv("TPUEMB_LOG_EVERY", "0")

    def run(cwd: Path, *args: str) -> Result:
        monkeypatch.chdir(cwd)
        return CliRunner().invoke(main, ["simulate", *args])

    return run


def test_a_multi_worker_run_logs_its_gradient_events(
        tmp_path: Path, _in_process: Callable[..., Result]) -> None:
    out = tmp_path / "mw"
    result = _in_process(tmp_path, str(EXAMPLES / "quickstart.pbtxt"), "--workers", "2",
                         "--steps", "2", "--out-dir", str(out), "--engine", "numpy", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    lines = _lines(result.stderr)
    assert [line.split(" (")[0] for line in lines[:8]] == [
        f"gradient event {n}/8" for n in range(1, 9)]  # 2 x 2 workers x 2 steps
    assert lines[7].endswith(f"updates {summary['global_step']}, "
                             f"loss {summary['loss'][-1]:.6g}"), lines[7]
    assert lines[8].startswith(f"wrote {out / 'tables.npz'}, {out / 'summary.json'} (")
    assert len(lines) == 9
    quiet = _in_process(tmp_path, str(EXAMPLES / "quickstart.pbtxt"), "--workers", "2",
                        "--steps", "2", "--out-dir", str(tmp_path / "q"), "--engine", "numpy",
                        "-q")
    assert quiet.exit_code == 0 and _lines(quiet.stderr) == []
