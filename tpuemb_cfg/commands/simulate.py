"""`tpuemb simulate`: replay recorded steps (--batches) or run the synthetic example.

A thin command over the run layer (``tpuemb_cfg.run``): its options are parsed and checked
(``simulate_options``), they become a ``RunRequest``, ``open_run`` prepares the configuration
once and returns the ``Run`` of the mode (synthetic, multi-worker, replay, SparseCore), and
``simulate_modes`` shows its progress and plan, writes its files and prints its summary.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from tpuemb_cfg.base import units
from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.commands import simulate_modes as modes
from tpuemb_cfg.commands._outputs import require_matplotlib
from tpuemb_cfg.commands._progress import log_every
from tpuemb_cfg.commands.flags import keras_backend_option
from tpuemb_cfg.commands.simulate_options import (
    SPEC_KEY,
    backend_option,
    check_placement,
    check_replay_outputs,
    check_synthetic_outputs,
    config_errors,
    engine_option,
    given,
    option_name,
    parse_size,
    ray_runtime_env,
    refuse_given,
    seed_option,
    simulate_options,
    source_of,
)
from tpuemb_cfg.executor.storage import choose_backend
from tpuemb_cfg.formats.limits import available_memory
from tpuemb_cfg.run import BUILT_IN, RunRequest, open_run, run_kind

__all__ = ["available_memory", "backend_option", "engine_option", "parse_size", "ray_runtime_env",
           "seed_option", "simulate"]

_SYNTHETIC_ONLY = ("steps", "out_dir", "plot", "checkpoint_every", "resume", "learning_rate",
                   "bag_sizes", "ids", "sequence_lengths", "save_batches", "tables_output")
_REPLAY_ONLY = ("init_path", "out_path")
#: Options a SparseCore run has no use for (its combiners are the tables', its data one worker's).
_SPARSECORE_REFUSED = ("combiners", "save_batches", "plot", "checkpoint_every",
                       "resume", "learning_rate", "workers", "replicas_to_aggregate",
                       "max_staleness", "init_tokens", "delay", "ray_address", "shards",
                       "runtime_env", "no_ship")
_WORKERS = ("workers", "replicas_to_aggregate", "max_staleness", "init_tokens", "delay")


@click.command("simulate")
@keras_backend_option
@simulate_options
@click.pass_context
def simulate(ctx: click.Context, /, **o: Any) -> None:
    """Run the configured training updates of CONFIG on the CPU, in float32.

    \b
    Replay recorded steps (the replay contract, docs/simulate.md):
      tpuemb simulate CONFIG --batches B.npz [--init I.npz] --out O.npz [--combiner ...]
    Synthetic run (no --batches; no CONFIG runs the built-in example):
      tpuemb simulate [CONFIG] [--steps N] [--out-dir DIR] [--plot FILE.png] [--json]
      tpuemb simulate [CONFIG] --dry-run        (the plan and the memory estimate)
      (--dry-run also shows a --batches replay's or a --workers run's plan)
    Several workers (docs/multiworker.md), all options from a spec file:
      tpuemb simulate [CONFIG] --workers N [--replicas-to-aggregate R | --max-staleness S]
      tpuemb simulate CONFIG --spec sim.pbtxt [options overriding the spec]
    SparseCore spec (docs/sparsecore/simulate.md): limits, id dropping, their cost:
      tpuemb simulate SPEC.py [--batches B.npz --out O.npz] [--compare-dropping]
    """

    # None: the library's default, 80% of the memory available (--backend ray: what the
    # cluster's nodes have available); its refusal says so and suggests what works.
    limit = parse_size(o["max_memory"]) if o["max_memory"] is not None else None
    check_placement(ctx, o["backend"], limit)
    log_every()  # a bad TPUEMB_LOG_EVERY is refused before anything starts
    spec = ctx.meta.get(SPEC_KEY)
    out_dir = Path(o["out_dir"])
    base = RunRequest(
        seed=o["seed"], engine=o["engine"], max_memory=limit,
        strict_finite=o["strict_finite"], backend=o["backend"], shards=o["shards"],
        ray_address=o["ray_address"],
        runtime_env=choose_backend(o["backend"]).runtime_env(o["runtime_env"]),
        ship=not o["no_ship"],
        # Not given (here or by --spec): a compiled spec's tags get the spec's learning rates.
        learning_rate=(o["learning_rate"] if source_of(ctx, "learning_rate") != "DEFAULT"
                       else None),
        schedules=spec.schedules if spec is not None else (),
        schedules_source=spec.path if spec is not None else None,
        ids=o["ids"], sequence_lengths=o["sequence_lengths"], steps=o["steps"],
        combiners=o["combiners"], bag_sizes=o["bag_sizes"], tables=o["tables_output"],
        out_dir=str(out_dir), checkpoint=str(out_dir / "checkpoint.npz"))
    config, batches, dry_run = o["config"], o["batches_path"], o["dry_run"]
    if config is not None and run_kind(config) == "sparsecore":  # limits and id dropping
        _sparsecore(ctx, o, base, spec)
        return
    if o["compare_dropping"] or o["allow_id_dropping"] is not None:
        raise UsageError("--compare-dropping and --allow-id-dropping apply to SparseCore specs "
                         "only (docs/sparsecore/simulate.md)")
    if any(o[name] is not None for name in _WORKERS):
        if batches is not None:
            raise UsageError("--workers, --replicas-to-aggregate, --max-staleness, --init-tokens "
                             "and --delay apply to synthetic runs, not to --batches replays")
        _check_workers(ctx, o)
        # A spec's checkpoint, resume and batches options do not apply to several workers.
        request = replace(base, plot=o["plot"], **{n: o[n] for n in _WORKERS})
        if not dry_run:
            check_synthetic_outputs(config, spec, out_dir, o["plot"], resume=False,
                                    checkpoints=False, tables=o["tables_output"])
        _synthetic(config, request, o)
    elif batches is not None:
        refuse_given(ctx, _SYNTHETIC_ONLY,
                     "appl to synthetic runs only, not to --batches replays")
        if config is None:
            raise UsageError("--batches needs CONFIG: tpuemb simulate CONFIG --batches B.npz "
                             "--out O.npz")
        if o["out_path"] is None and not dry_run:
            raise UsageError("--batches needs --out O.npz (where the final tables, slots and "
                             "activations go)")
        if spec is not None and spec.schedules:
            raise UsageError(f"{spec.path}: learning_rate_schedule applies to synthetic runs; a "
                             "replay sends its recorded learning rates")
        request = replace(base, batches=batches, init=o["init_path"], out=o["out_path"],
                          out_dir=None, checkpoint=None)
        if not dry_run:
            check_replay_outputs(config, spec, batches, o["init_path"], o["out_path"])
        with config_errors(config), _session(request, dry_run):
            run = open_run(config, request)
            if dry_run:
                modes.print_plan(run, o["as_json"], available_memory)
            else:
                modes.replay(run, as_json=o["as_json"], quiet=o["quiet"])
    else:
        refuse_given(ctx, ("out_path",),
                     "needs --batches (replay mode); a synthetic run writes to --out-dir")
        _refuse_init_with_resume(o)
        if o["save_batches"] is not None and o["resume"]:
            raise UsageError("--save-batches cannot be combined with --resume: the steps before "
                             "the checkpoint are not in this process; run from the start to save "
                             "every step's batches")
        request = replace(base, plot=o["plot"], save_batches=o["save_batches"],
                          checkpoint_every=o["checkpoint_every"], resume=o["resume"],
                          init=o["init_path"])
        if not dry_run:
            check_synthetic_outputs(config, spec, out_dir, o["plot"], resume=o["resume"],
                                    checkpoints=o["checkpoint_every"] is not None,
                                    tables=o["tables_output"], save_batches=o["save_batches"],
                                    init=o["init_path"])
        _synthetic(config, request, o)


def _session(request: Any, dry_run: bool) -> contextlib.AbstractContextManager[None]:
    """The backend's session of a run. None for a ``--dry-run``: nothing runs (with
    ``--backend ray`` its plan joins the cluster only to read its nodes)."""
    if dry_run:
        return contextlib.nullcontext()
    return choose_backend(request.backend).session(request.placement.options)


def _refuse_init_with_resume(o: dict[str, Any]) -> None:
    if o["init_path"] is not None and o["resume"]:
        raise UsageError("--init cannot be combined with --resume: a resumed run continues from "
                         "its checkpoint; --init starts a new run from given tables")


def _check_workers(ctx: click.Context, o: dict[str, Any]) -> None:
    """The multi-worker options, before anything is read."""
    names = [option_name(n) for n in ("checkpoint_every", "resume", "save_batches",
                                      *_REPLAY_ONLY) if given(ctx, n)]
    if o["save_batches"] is not None and "--save-batches" not in names:  # from a --spec
        names.append("--save-batches")
    if names:
        raise UsageError(f"{', '.join(names)} cannot be combined with a multi-worker run")
    max_staleness = o["max_staleness"]
    if max_staleness is not None and max_staleness < 0:
        raise UsageError(
            f"--max-staleness {max_staleness}: a gradient more than S updates old is "
            "dropped, so a negative S drops every gradient and nothing is ever trained; "
            "expected 0 or more (0: only gradients computed on the latest tables apply)")
    for option, value, low in (("--max-staleness", max_staleness, 0),
                               ("--replicas-to-aggregate", o["replicas_to_aggregate"], 1),
                               ("--init-tokens", o["init_tokens"], -1)):
        if value is not None and not low <= value <= units.MAX_INT64:
            raise UsageError(f"{option} {value}: expected {low} to {units.MAX_INT64} "
                             "(2^63 - 1: TensorFlow holds it in an int64)")


def _synthetic(config: str | None, request: Any, o: dict[str, Any]) -> None:
    """A synthetic run (one worker or several): opened in the backend's session, then run
    (or its plan printed)."""
    dry_run = o["dry_run"]
    with config_errors(config if config is not None else BUILT_IN), _session(request, dry_run):
        if request.plot is not None and not dry_run:
            require_matplotlib()
        checkpoint = request.checkpoint
        if request.resume and not dry_run and not os.path.exists(os.path.abspath(checkpoint)):
            raise UsageError(f"--resume: no checkpoint at {checkpoint}; run with "
                             "--checkpoint-every N first, or drop --resume")
        run = open_run(config, request)
        if dry_run:
            with run.named_as_typed():
                modes.print_plan(run, o["as_json"], available_memory)
        else:
            modes.synthetic(run, as_json=o["as_json"], quiet=o["quiet"])


def _sparsecore(ctx: click.Context, o: dict[str, Any], base: Any, spec: Any) -> None:
    """A SparseCore spec: the options checked, the outputs checked before anything is read,
    then the replay (``--batches``) or the synthetic run, or the plan (``--dry-run``)."""
    names = [option_name(n) for n in _SPARSECORE_REFUSED if given(ctx, n)]
    if given(ctx, "backend") and o["backend"] != "local":
        names.append("--backend " + o["backend"])
    if spec is not None:
        names.append("--spec")
    if names:
        raise UsageError(f"{', '.join(names)}: not available for a SparseCore spec (its "
                         "combiners are its tables', its tables live in this process); "
                         "see docs/sparsecore/simulate.md")
    config, batches, out, dry_run = o["config"], o["batches_path"], o["out_path"], o["dry_run"]
    replay = batches is not None
    if replay:
        refuse_given(ctx, ("steps", "ids", "sequence_lengths", "tables_output", "bag_sizes"),
                     "appl to synthetic runs only, not to --batches replays")
        if out is None and not dry_run:
            raise UsageError("--batches needs --out O.npz (where the final tables, slots and "
                             "activations go)")
    else:  # a SparseCore synthetic run starts from --init (an .npz or a checkpoint) too
        refuse_given(ctx, ("out_path",),
                     "needs --batches (replay mode); a synthetic run writes to --out-dir")
    summary_dir = Path(o["out_dir"]) if (not replay or given(ctx, "out_dir")) else None
    if not dry_run:
        if replay:
            check_replay_outputs(config, None, batches, o["init_path"], out)
        if summary_dir is not None:
            check_synthetic_outputs(config, None, summary_dir, None, resume=False,
                                    checkpoints=False,
                                    tables=o["tables_output"] if not replay else "none",
                                    init=o["init_path"])
    request = replace(base, learning_rate=None, combiners=(), batches=batches,
                      init=o["init_path"], out=out, checkpoint=None,
                      out_dir=str(summary_dir) if summary_dir is not None else None,
                      compare_dropping=o["compare_dropping"],
                      allow_id_dropping=o["allow_id_dropping"])
    with config_errors(config):
        run = open_run(config, request)
        if dry_run:
            modes.print_plan(run, o["as_json"])
        else:
            modes.sparsecore(run, as_json=o["as_json"], quiet=o["quiet"])
