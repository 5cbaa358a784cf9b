"""The run of a SparseCore spec (docs/sparsecore/simulate.md): the replay of recorded batches
or synthetic steps, with the preprocessing's limits and id dropping (``sim.sparsecore``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tpuemb_cfg.executor.replay_keys import parse_steps
from tpuemb_cfg.formats.limits import available_memory
from tpuemb_cfg.formats.npzio import read_npz
from tpuemb_cfg.run.base import Progress, Run, RunResult
from tpuemb_cfg.run.files import Anchored, plan_tables, read_state_file
from tpuemb_cfg.run.request import RunRequest
from tpuemb_cfg.sim.synthetic import SyntheticData

__all__ = ["SparseCoreMode"]


class SparseCoreMode(Run):
    """A SparseCore spec's run: ``request.batches`` replayed (O.npz's arrays returned), else
    ``request.steps`` synthetic steps; ``compare_dropping`` runs every step again without the
    limits and reports the drift. ``setup``: the ``sim.sparsecore.SparseCoreSetup``."""

    kind = "sparsecore"

    def __init__(self, setup: Any, request: RunRequest, label: str, real: Anchored) -> None:
        super().__init__(request, label, real)
        if request.bag_sizes != "auto":  # e.g. uniform: ragged bags of 1 to the input's last axis
            plan = setup.prepared.plan.with_bags(bag_sizes=request.bag_sizes)
            setup = replace(setup, prepared=replace(setup.prepared, plan=plan))
        self.setup = setup
        self.allow_id_dropping = bool(setup.allow_id_dropping
                                      if request.allow_id_dropping is None
                                      else request.allow_id_dropping)
        self.sim: Any = None

    def plan(self, *, machine_memory: Callable[[], int | None] = available_memory,
             say: Callable[[Any], str] = str) -> dict[str, Any]:
        from tpuemb_cfg.sim.sparsecore.run import describe

        request = self.request
        return {**describe(self.setup, engine=request.options.engine,
                           compare=request.compare_dropping),
                "config": self.label, "allow_id_dropping": self.allow_id_dropping,
                "compare_dropping": request.compare_dropping,
                "run": (f"a replay of {request.batches}" if request.batches is not None
                        else f"{request.steps} synthetic steps")}

    def plan_text(self, info: dict[str, Any]) -> str:
        from tpuemb_cfg.sim.sparsecore.report import plan_text

        return plan_text(info)

    def start(self) -> None:
        """I.npz read, the run made, B.npz read (its keys checked from the ``.npy`` headers,
        before any array is decompressed)."""
        from tpuemb_cfg.sim.sparsecore.run import SparseCoreRun

        request = self.request
        with self.named_as_typed():
            init = (read_state_file(self.where(request.init),
                                    plan_tables(self.setup.prepared.plan))
                    if request.init is not None else None)
            self.sim = run = SparseCoreRun(self.setup, request.options,
                                           allow_id_dropping=self.allow_id_dropping,
                                           compare=request.compare_dropping,
                                           initial_state=init, state_source=request.init)
            source = request.batches
            if source is None:
                self._data = SyntheticData(run.plan, seed=request.options.seed,
                                           ids=request.data.ids,
                                           sequence_lengths=request.data.sequence_lengths)
                return
            count = len(run.plan.features)

            def check(headers: Any) -> None:
                parse_steps(headers, count, source)  # the keys, before any array is decompressed

            batches = read_npz(self.where(source), max_bytes=request.options.memory_limit,
                               check_keys=check)
            self._steps = parse_steps(batches, count, source)
        self.total = len(self._steps)

    def run(self, progress: Progress | None = None, *,
            checkpoint: Callable[[], None] | None = None,
            on_batch: Callable[[int, Any], None] | None = None) -> None:
        request, run = self.request, self.sim
        with self.named_as_typed():
            if request.batches is None:
                for step in range(request.steps):
                    run.synthetic_step(self._data)
                    if progress is not None:
                        progress(step + 1)
                return
            out: dict[str, Any] = {}
            for step, (inputs, rates) in enumerate(self._steps):
                activations = run.replay_step(inputs, rates, source=request.batches)
                for f, activation in enumerate(activations):
                    out[f"s{step}/f{f}/activations"] = activation
                if progress is not None:
                    progress(step + 1)
            out.update(run.executor.state_arrays())
            self._out = out

    def result(self) -> RunResult:
        """The summary (``config`` last but the tables file's ``tables_written``, when
        ``request.out_dir`` names the folder of one), O.npz's arrays of a replay, the tables
        and slots of a synthetic run's tables file (``request.tables`` not ``none``)."""
        request, run = self.request, self.sim
        summary = dict(run.summary())
        out = None
        if request.batches is not None:
            summary.update({"batches": request.batches, "out": request.out})
            out = self._out
        else:
            data = self._data
            summary.update({"seed": request.options.seed, "ids": str(data.ids),
                            "sequence_lengths": str(data.sequence_lengths)})
        summary["config"] = self.label
        state = None
        if request.out_dir is not None:
            tables = request.tables if request.batches is None else "none"
            state = run.executor.state_arrays() if tables != "none" else None
            summary["tables_written"] = "all" if state is not None else "none"
        return RunResult(summary, state, out)
