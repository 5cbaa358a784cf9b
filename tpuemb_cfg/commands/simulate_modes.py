"""What ``tpuemb simulate`` does with an open run (``tpuemb_cfg.run``): shows its progress
(``_progress``), writes its files atomically (``_outputs``, ``npzio``) and prints its plan or
summary, for each mode: the synthetic run (one worker or several), the replay and the run of a
SparseCore spec."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tpuemb_cfg.base.errors import OutputError
from tpuemb_cfg.commands._outputs import batches_file, require_disk_space, write_run
from tpuemb_cfg.commands._progress import RunLog
from tpuemb_cfg.commands.flags import echo
from tpuemb_cfg.commands.simulate_options import say
from tpuemb_cfg.formats.atomic import OutputSet
from tpuemb_cfg.formats.limits import available_memory
from tpuemb_cfg.formats.npzio import atomic_write_npz
from tpuemb_cfg.run import Run
from tpuemb_cfg.sim.report import run_text, workers_text

__all__ = ["print_plan", "replay", "sparsecore", "synthetic"]


def print_plan(run: Run, as_json: bool, machine_memory: Any = available_memory) -> None:
    """``--dry-run``: the run's plan and memory estimate on stdout (``--json``: as JSON)."""
    info = run.plan(machine_memory=machine_memory, say=say)
    echo(json.dumps(info, indent=2) if as_json else run.plan_text(info))


def _combiner_note(run: Run) -> None:
    """After a run's output: which combiners a configuration that records none was run with."""
    note = run.combiner_note
    if note is not None:
        echo(f"note: {note}", err=True)


def replay(run: Run, *, as_json: bool, quiet: bool) -> None:
    """``--batches B.npz --out O.npz``: replay the steps, write O.npz, print the summary."""
    request = run.request
    out_path, lost = request.out, "a replay writes nothing before its end: run it again"
    assert out_path is not None
    log = RunLog.for_stderr(quiet)
    run.start()
    with run.lost(lost), run.named_as_typed(), log.steps(run.total) as advance:
        run.run(progress=advance)
    with run.lost(lost), run.named_as_typed(), run.phase("output"), log.timed() as took:
        result = run.result()
        assert result.out is not None
        atomic_write_npz(run.where(out_path), result.out)
    log.outputs([(out_path, run.where(out_path))], took())
    if as_json:
        echo(json.dumps(result.summary, indent=2))
    elif not quiet:
        echo(f"replayed {result.summary['steps']} step(s) of {request.batches} on {run.label}; "
             f"wrote {out_path}", err=True)
        _combiner_note(run)


def synthetic(run: Run, *, as_json: bool, quiet: bool) -> None:
    """A synthetic run on one worker or several: run with progress, write OUT_DIR/tables.npz
    (as ``--tables`` says) and summary.json (and the plot), print the summary."""
    with run.named_as_typed():
        summary = _several(run, quiet) if run.kind == "workers" else _one(run, quiet)
        out_dir = Path(str(run.request.out_dir))
        if as_json:
            echo(json.dumps(summary, indent=2))
        else:
            echo(workers_text(summary) if run.kind == "workers"
                 else run_text(summary, str(out_dir / "tables.npz"), run.request.plot))
            if not quiet:
                _combiner_note(run)


def _write(run: Run, result: Any, outputs: Any) -> None:
    """OUT_DIR's files of a synthetic run: tables.npz, summary.json and the plot
    (``outputs``: the ``OutputSet`` they are staged in, None: written at once)."""
    request = run.request
    out_dir, plot = str(request.out_dir), request.plot
    write_run(Path(run.where(out_dir)), result.summary, result.state, run.label,
              run.where(plot) if plot is not None else None, shown_dir=Path(out_dir),
              outputs=outputs)


def _written(run: Run) -> list[tuple[str, str]]:
    """The files a synthetic run has written, as ``(as typed, real path)`` pairs."""
    request = run.request
    out_dir = Path(str(request.out_dir))
    shown = [str(out_dir / name) for name in ("tables.npz", "summary.json")
             if name != "tables.npz" or request.tables != "none"]
    pairs = [(path, str(Path(run.where(str(out_dir))) / Path(path).name)) for path in shown]
    pairs += [(path, run.where(path)) for path in (request.plot, request.save_batches)
              if path is not None]
    return pairs


def _several(run: Run, quiet: bool) -> dict[str, Any]:
    """``--workers N``: the multi-worker run, its files written; its summary."""
    log = RunLog.for_stderr(quiet)
    with run.lost("a multi-worker run keeps no checkpoint: run it again"):
        run.start()
        with log.steps(run.total, unit=run.unit, detail=run.detail) as advance:
            run.run(progress=advance)
        with run.phase("output"):
            result = run.result()
            with log.timed() as took:
                _write(run, result, None)
    log.outputs(_written(run), took())
    return result.summary


class _Checkpoints:
    """``--checkpoint-every``: where a run's checkpoints go, and the last one written (for the
    hint after a lost backend host)."""

    def __init__(self, run: Any, log: RunLog) -> None:
        request = run.request
        self.run = run
        self.log = log  # the RunLog told of each checkpoint written
        self.shown = Path(str(request.checkpoint))  # as typed, for messages
        self.out_dir = request.out_dir
        self.real_dir = Path(run.where(str(request.out_dir)))
        self.real = run.where(str(self.shown))
        self.saved = [run.step] if request.resume else []  # the step of the checkpoint resumed

    def save(self) -> None:

        try:
            self.real_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"cannot create the folder: {exc.strerror or exc}",
                              path=str(self.out_dir)) from None
        with self.run.phase("checkpoint"), self.log.timed() as took:
            atomic_write_npz(self.real, self.run.checkpoint_arrays())  # atomic
        self.saved[:] = [self.run.step]
        self.log.checkpoint(str(self.shown), self.run.step, os.path.getsize(self.real), took())

    def resume_hint(self) -> str:
        if not self.saved:
            return _unsaved_hint(self.shown, resume=False)
        return (f"the last checkpoint is {self.shown} (step {self.saved[0]}): run the "
                "same command with --resume to continue from it on a fresh cluster")


def _unsaved_hint(checkpoint: Path, *, resume: bool) -> str:
    """Where to resume from when a host is lost before the run saved a checkpoint
    (``resume``: it was resuming one, which is as it was)."""
    if resume:
        return (f"the checkpoint {checkpoint} is as it was: run the same command (with "
                "--resume) again on a fresh cluster")
    return "this run wrote no checkpoint (--checkpoint-every N keeps one): run it again"


def _one(run: Any, quiet: bool) -> dict[str, Any]:
    """One worker: the synthetic run (resumed, checkpointed, its batches streamed), its files
    written; its summary."""
    request = run.request
    save_batches = request.save_batches
    log = RunLog.for_stderr(quiet)
    kept: list[_Checkpoints] = []  # once the run has started (resumed)

    def hint() -> str:
        return (kept[0].resume_hint() if kept else
                _unsaved_hint(Path(str(request.checkpoint)), resume=request.resume))

    # A host lost in any phase: one line naming it, the phase and the checkpoint.
    with run.lost(hint):
        run.start()
        if save_batches is not None:
            require_disk_space("--save-batches", run.where(save_batches), run.batches_bytes())
        checkpoints = _Checkpoints(run, log)
        kept.append(checkpoints)
        # Staged together: the batches (streamed during the run), then the tables, the
        # summary and the plot, renamed into place at the end - or none of them.
        with OutputSet(make_dirs=True) as outputs:
            with batches_file(outputs, run.where(save_batches) if save_batches is not None
                              else None) as on_batch, \
                    log.steps(run.total, start=run.first, detail=run.detail) as advance:
                run.run(progress=advance, checkpoint=checkpoints.save, on_batch=on_batch)
            with run.phase("output"):
                result = run.result()
                began = log.clock()
                _write(run, result, outputs)
    log.outputs(_written(run), log.clock() - began)  # committed with the set
    summary: dict[str, Any] = result.summary
    return summary


def sparsecore(run: Any, *, as_json: bool, quiet: bool) -> None:
    """A SparseCore spec's replay (O.npz written) or synthetic run, its summary folder
    written (when ``out_dir``), its report printed."""
    from tpuemb_cfg.sim.sparsecore.report import run_text

    request = run.request
    with run.named_as_typed():
        run.start()
        log = RunLog.for_stderr(quiet)
        with log.steps(run.total) as advance:
            run.run(progress=advance)
        result = run.result()
        source = "synthetic data"
        if request.batches is not None:
            out = str(request.out)
            with log.timed() as took:
                atomic_write_npz(run.where(out), result.out)
            log.outputs([(out, run.where(out))], took())
            source = request.batches
    summary = result.summary
    config = run.setup.config
    header = (f"tpuemb simulate: {summary['steps']} step(s) of {source} on {run.label} "
              f"(SparseCore, {config.api}; {config.topology.describe()}, seed "
              f"{request.options.seed})")
    if request.out_dir is not None:
        summary_dir = Path(request.out_dir)
        real = Path(run.where(request.out_dir))
        log = RunLog.for_stderr(quiet)
        with log.timed() as took:
            write_run(real, summary, result.state, run.label, shown_dir=summary_dir)
        names = ["tables.npz"] if result.state is not None else []
        log.outputs([(str(summary_dir / name), str(real / name))
                     for name in [*names, "summary.json"]], took())
    echo(json.dumps(summary, indent=2) if as_json else run_text(summary, header))
