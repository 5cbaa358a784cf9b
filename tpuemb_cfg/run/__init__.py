"""The run layer: one entry, :func:`open_run`, for every simulated run of a configuration.

``open_run(source, RunRequest(...))`` prepares ``source`` once and returns a :class:`Run`
behind which the synthetic run (one worker), the multi-worker run, the replay of recorded
batches and the run of a SparseCore spec share their steps::

    run = open_run("config.pbtxt", RunRequest(steps=50, seed=3))
    info = run.plan()          # the plan and memory estimate: nothing allocated
    run.start()                # refused here, before allocating, when it would not fit
    run.run(progress=print)    # progress(done) after each step (of run.total)
    result = run.result()      # result.summary, result.state (the tables file's arrays)

The session (``session.source_kind``) tells a SparseCore spec from a legacy configuration,
once; the request's fields choose the rest (``RunRequest.mode``). The backend the tables live
on is asked for what it adds (each ``Backend`` is also ``executor.hooks.RunHooks``): its
session, its plan, how a lost host is reported. Nothing here draws progress or writes a
file: ``tpuemb simulate`` shows and writes what a run returns. Errors are ``InputError`` (a
bad request, a bad input file), ``UsageError`` (what cannot be run as asked) and
``NumericalError``.
"""

from __future__ import annotations

import importlib.resources
from typing import Any

from tpuemb_cfg import session
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.run.base import Progress, Run, RunResult
from tpuemb_cfg.run.files import Anchored
from tpuemb_cfg.run.legacy import ReplayRun, SyntheticMode, WorkersMode
from tpuemb_cfg.run.request import RunRequest
from tpuemb_cfg.run.sparsecore import SparseCoreMode

__all__ = ["BUILT_IN", "Progress", "Run", "RunRequest", "RunResult", "open_run", "run_kind"]

#: How messages name the configuration of a run given none (the built-in example).
BUILT_IN = "<built-in example>"


def run_kind(source: Any) -> str:
    """``sparsecore`` or ``legacy``: which runs ``source`` takes (``session.source_kind``; a
    missing source is the built-in example, legacy)."""
    return "legacy" if source is None else session.source_kind(source)


def open_run(source: Any, request: RunRequest | None = None) -> Run:
    """The :class:`Run` of ``source`` as ``request`` asks (default: 100 synthetic steps).

    ``source``: anything ``session.prepare`` takes (a configuration file or message, a spec),
    a SparseCore spec file or ``SparseCoreConfig``, or None for the built-in example. The
    configuration is parsed, validated and planned here (a SparseCore spec: compiled); the
    request's paths are anchored first, so a spec that changes the folder changes none of them.
    Raises ``InputError`` for a request its source cannot take and for a configuration that
    cannot be run.
    """
    request = request if request is not None else RunRequest()
    if not isinstance(request, RunRequest):
        raise InputError(f"open_run: request must be a RunRequest; received "
                         f"{type(request).__name__}")
    kind = run_kind(source)
    label = _label(source)
    real = Anchored(request.batches, request.init, request.out, request.out_dir,
                    request.checkpoint, request.plot, request.save_batches)
    if kind == "sparsecore":
        _refuse_for_sparsecore(request)
        with real.named_as_typed():
            setup = session.prepare_sparsecore(source)  # a spec's code may chdir: paths anchored
        return SparseCoreMode(setup, request, label, real)
    if request.compare_dropping or request.allow_id_dropping is not None:
        raise InputError("RunRequest compare_dropping and allow_id_dropping apply to "
                         "SparseCore specs only (docs/sparsecore/simulate.md)")

    mode = request.mode
    if mode == "replay" and source is None:
        raise InputError("RunRequest batches: a replay needs the configuration the batches "
                         "were recorded for (source)")
    with real.named_as_typed():
        # One parse of the file: diagnostics get line:column and suppressions, then the plan.
        prepared = session.prepare(source if source is not None else _default_config())
        prepared = session.with_combiner_arguments(prepared, request.combiners)
        if request.bag_sizes != "auto" and mode != "replay":
            prepared = _with_bags(prepared, request.bag_sizes)
    if mode == "replay":
        return ReplayRun(prepared, request, label, real)
    return (WorkersMode if mode == "workers" else SyntheticMode)(prepared, request, label, real)


def _label(source: Any) -> str:
    """``source`` as messages name it: a path as given, else its file, else what it is."""
    import os

    if source is None:
        return BUILT_IN
    if isinstance(source, str | os.PathLike):
        return os.fspath(source)
    path = getattr(source, "path", None)
    return path if isinstance(path, str) else f"<{type(source).__name__}>"


def _refuse_for_sparsecore(request: RunRequest) -> None:
    """What a SparseCore run has no use for: its combiners are its tables', its data one
    worker's in this process."""
    wrong = [name for name, given in (
        ("combiners", bool(request.combiners)), ("save_batches", request.save_batches),
        ("plot", request.plot), ("checkpoint_every", request.checkpoint_every),
        ("resume", request.resume), ("learning_rate", request.learning_rate),
        ("workers", request.several is not None), ("schedules", bool(request.schedules)),
        ("backend", request.backend != "local")) if given]
    if wrong:
        raise InputError(f"RunRequest {', '.join(wrong)}: not available for a SparseCore spec "
                         "(its combiners are its tables', its tables live in this process); "
                         "see docs/sparsecore/simulate.md")


def _default_config() -> Any:
    """The built-in example configuration (``tpuemb_cfg/data/default_config.pbtxt``)."""
    from tpuemb_cfg.formats.io import load

    resource = importlib.resources.files("tpuemb_cfg.data") / "default_config.pbtxt"
    return load(resource.read_bytes(), "text")


def _with_bags(prepared: Any, bag_sizes: str) -> Any:
    from dataclasses import replace

    return replace(prepared, plan=prepared.plan.with_bags(bag_sizes=bag_sizes))
