"""The runs of a legacy configuration: synthetic data on one worker (``sim.synthetic``) or
several (``sim.multiworker``), and the replay of recorded batches (``executor.replay``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.checkpoints.state import is_checkpoint
from tpuemb_cfg.executor.core import CHECKPOINT_REMEDY
from tpuemb_cfg.executor.engines import get_engine
from tpuemb_cfg.executor.replay import replay, require_replay_memory
from tpuemb_cfg.executor.replay_keys import parse_steps
from tpuemb_cfg.formats.limits import available_memory
from tpuemb_cfg.formats.npzio import read_npz
from tpuemb_cfg.run.base import Progress, Run, RunResult
from tpuemb_cfg.run.files import (
    Anchored,
    plan_tables,
    read_state_file,
    state_file_bytes,
)
from tpuemb_cfg.run.plans import replay_plan, synthetic_plan
from tpuemb_cfg.run.request import RunRequest
from tpuemb_cfg.sim.multiworker import MultiWorkerRun
from tpuemb_cfg.sim.options import WorkerOptions
from tpuemb_cfg.sim.synthetic import SyntheticRun

__all__ = ["ReplayRun", "SyntheticMode", "WorkersMode", "memory_report"]


def memory_report(estimate: Any) -> dict[str, Any]:
    """A summary's ``memory``: the run's estimate (an ``Estimate``'s parts, or total bytes),
    the same for the same run on this machine (measured figures would make equal runs write
    different summaries: ``benchmarks/bench_memory.py`` measures the peak)."""
    parts = estimate.as_dict() if hasattr(estimate, "as_dict") else {"total_bytes": estimate}
    return {"estimate": parts}


class _Legacy(Run):
    """A run of a ``Prepared`` configuration."""

    def __init__(self, prepared: Any, request: RunRequest, label: str, real: Anchored) -> None:
        super().__init__(request, label, real)
        self.prepared = prepared

    @property
    def combiner_note(self) -> str | None:
        note: str | None = self.prepared.combiner_note
        return note


class _Synthetic(_Legacy):
    """A run on synthetic data: its plan, and the tables file of its result."""

    sim: Any = None

    def plan(self, *, machine_memory: Callable[[], int | None] = available_memory,
             say: Callable[[Any], str] = str) -> dict[str, Any]:
        plan, info = synthetic_plan(self.prepared, self.request, self.label,
                                    self.backend.in_process)
        return self._with_backend_plan(info, plan, machine_memory, say)

    def _state(self, summary: dict[str, Any], state: Any) -> dict[str, Any] | None:
        """``state`` as the tables file holds it (``tables``: all, touched rows, or none)."""
        tables = self.request.tables
        summary["tables_written"] = tables
        if tables == "touched":
            summary["rows_written"] = {
                table.name: int(len(state[f"table/{table.name}/rows"]))
                for table in self.prepared.plan.tables}
        return dict(state) if tables != "none" else None


class SyntheticMode(_Synthetic):
    """One worker on synthetic data: resumed from and checkpointed to ``request.checkpoint``,
    its batches handed to ``on_batch``."""

    kind = "synthetic"

    def start(self) -> None:

        request = self.request
        with self.named_as_typed():
            init = (read_state_file(self.where(request.init), plan_tables(self.prepared.plan))
                    if request.init is not None else None)
            self.sim = run = SyntheticRun(self.prepared, request.options, request.placement,
                                          data=request.data, initial_state=init,
                                          state_source=request.init)
            if request.resume:
                checkpoint = request.checkpoint
                assert checkpoint is not None
                read_state = self.backend.read_state()
                run.restore(read_state(self.where(checkpoint), remedy=CHECKPOINT_REMEDY),
                            checkpoint)
                if run.step > request.steps:  # continuing would rewrite a longer run's outputs
                    raise UsageError(
                        f"--resume: the checkpoint {checkpoint} is at step {run.step}, "
                        f"past --steps {request.steps}; give --steps {run.step} or more to "
                        "continue that run, or another --out-dir without --resume to start a "
                        "new one")
        self.first = run.step

    @property
    def step(self) -> int:
        """The steps run so far (a resumed run: from its checkpoint's)."""
        return int(self.sim.step)

    def batches_bytes(self) -> int:
        """About how many bytes the batches of the steps still to run take (``save_batches``)."""
        return int((self.request.steps - self.sim.step) * self.sim.data.batch_bytes())

    def checkpoint_arrays(self) -> dict[str, Any]:
        """The full state of the run now: what a checkpoint file holds."""
        arrays: dict[str, Any] = self.sim.checkpoint_arrays()
        return arrays

    def detail(self) -> str:
        history = self.sim.history
        return f"loss {history[-1]['loss']:.6g}" if history else ""

    def run(self, progress: Progress | None = None, *,
            checkpoint: Callable[[], None] | None = None,
            on_batch: Callable[[int, Any], None] | None = None) -> None:
        request = self.request
        self.sim.run(request.steps, checkpoint_every=request.checkpoint_every,
                     checkpoint=checkpoint, progress=progress, on_batch=on_batch,
                     tables=request.tables, plot=request.plot is not None)

    def result(self) -> RunResult:
        request, run = self.request, self.sim
        tables, plot = request.tables, request.plot is not None
        summary = run.summary()
        state = run.saved_state(tables)
        summary["memory"] = memory_report(run.memory_estimate(
            request.steps, tables=tables, checkpoints=request.checkpoint_every is not None,
            plot=plot))
        return RunResult(summary, self._state(summary, state))


class WorkersMode(_Synthetic):
    """Several workers feeding one chief on synthetic data (no checkpoints)."""

    kind = "workers"
    unit = "gradient event"

    def start(self) -> None:

        request = self.request
        several = request.several
        assert several is not None
        with self.named_as_typed():
            self.sim = run = MultiWorkerRun(self.prepared, request.options, request.placement,
                                            data=request.data,
                                            workers=WorkerOptions(**several))
        self.total = 2 * run.num_workers * request.steps

    def detail(self) -> str:
        # a gradient computed or delivered; the chief's updates so far
        run = self.sim
        loss = f", loss {run.loss[-1]:.6g}" if run.loss else ""
        return f"updates {run.global_step:,}{loss}"

    def run(self, progress: Progress | None = None, *,
            checkpoint: Callable[[], None] | None = None,
            on_batch: Callable[[int, Any], None] | None = None) -> None:
        request = self.request
        self.sim.run(request.steps, progress=progress, tables=request.tables,
                     plot=request.plot is not None)

    def result(self) -> RunResult:
        request, run = self.request, self.sim
        tables = request.tables
        summary = run.summary()
        summary["memory"] = memory_report(run.memory_estimate(
            request.steps, tables=tables, plot=request.plot is not None))
        return RunResult(summary, self._state(summary, run.saved_state(tables)))


class ReplayRun(_Legacy):
    """The recorded steps of ``request.batches`` from the tables of ``request.init``."""

    kind = "replay"

    def plan(self, *, machine_memory: Callable[[], int | None] = available_memory,
             say: Callable[[Any], str] = str) -> dict[str, Any]:
        info = replay_plan(self.prepared, self.request, self.label, self._real,
                           self.backend.in_process)
        return self._with_backend_plan(info, self.prepared.plan, machine_memory, say)

    def start(self) -> None:
        """B.npz and I.npz read, after their ``.npy`` headers said the replay fits
        (``max_memory``) and B.npz holds the replay contract's keys."""
        request = self.request
        batches_path, init_path = request.batches, request.init
        assert batches_path is not None
        limit = request.options.memory_limit
        local = self.backend.in_process
        prepared = self.prepared
        count = [0]
        with self.named_as_typed():
            init_bytes = (state_file_bytes(self.where(init_path))
                          if init_path is not None and local else None)

            def check(headers: Any) -> None:
                """From the .npy headers, before any array is decompressed: the keys, and
                whether the replay fits (max_memory)."""
                count[0] = len(parse_steps(headers, len(prepared.plan.features), batches_path))
                if local:
                    require_replay_memory(prepared.plan, headers, limit,
                                          engine=get_engine(request.options.engine).name,
                                          init_bytes=init_bytes)

            self._batches = read_npz(self.where(batches_path), max_bytes=limit if local else None,
                                     check_keys=check)
            read_state = self.backend.read_state()
            if init_path is None:
                self._init = None
            elif is_checkpoint(self.where(init_path)):  # a TensorFlow checkpoint's embedding
                self._init = read_state_file(self.where(init_path), plan_tables(prepared.plan))
            else:
                self._init = read_state(self.where(init_path))
        self.total = count[0]

    def run(self, progress: Progress | None = None, *,
            checkpoint: Callable[[], None] | None = None,
            on_batch: Callable[[int, Any], None] | None = None) -> None:

        request = self.request
        tables: dict[str, dict[str, Any]] = {}
        for table in self.prepared.plan.tables:
            tables[table.name] = {"optimizer": table.optimizer.name}
        nonfinite: list[dict[str, Any]] = []  # the first NaN or infinity, with its cause

        def record(step: int, reports: Any) -> None:
            for name, report in reports.items():
                for field, value in report.as_dict().items():
                    tables[name].setdefault(field, []).append(value)
            if progress is not None:
                progress(step + 1)

        # The memory was checked from the .npy headers (start), before any array was read.
        options = request.options
        if self.backend.in_process:
            options = replace(options, check_memory=False)
        with self.named_as_typed():
            out = replay(self.prepared, self._batches, self._init, options=options,
                         placement=request.placement, sources=(request.batches, request.init),
                         on_step=record,
                         on_nonfinite=lambda event: nonfinite.append(event.as_dict()))
        self._out, self._tables, self._nonfinite = out, tables, nonfinite

    def result(self) -> RunResult:
        out = self._out
        steps = sum(1 for k in out if k.endswith("/activations") and "/f0/" in k)
        summary = {"steps": steps, "config": self.label, "out": self.request.out,
                   "tables": self._tables,
                   **({"nonfinite": self._nonfinite[0]} if self._nonfinite else {})}
        return RunResult(summary, out=out)
