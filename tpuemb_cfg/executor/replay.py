"""The replay contract: a whole recorded run in, the final state and every activation out.

Input keys (``B.npz``): ``s{step}/f{f}/ids`` int64 [nnz], ``s{step}/f{f}/row_splits`` int64
[batch + 1] (absent: one id per sample), ``s{step}/f{f}/weights`` float32 [nnz] (absent: 1.0),
``s{step}/f{f}/grad`` float32 [batch, dim], ``s{step}/learning_rates`` float32 [K] (exactly when
K > 0). Output keys: ``table/{table}``, ``slot/{table}/{slot}`` and ``s{step}/f{f}/activations``.
Every step is checked before the first one runs, so bad input fails fast and nothing is returned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from tpuemb_cfg.base.errors import InputError

from .batch import FeatureInput, check_learning_rates
from .core import Executor
from .engines import get_engine
from .memory import reduce_hint, replay_estimate, require_memory
from .nonfinite import NonFinite
from .options import Placement, RunOptions
from .plan import Plan
from .records import TableReport
from .storage import choose_backend

if TYPE_CHECKING:
    from .prepared import Prepared

__all__ = ["feature_of", "parse_steps", "replay", "require_replay_memory"]

_KEY = re.compile(r"s(\d+)/(?:f(\d+)/(ids|row_splits|weights|grad)|(learning_rates))")
_FIELDS = ("ids", "row_splits", "weights", "grad")


def feature_of(key: str) -> int | None:
    """The feature index ``f`` of a replay key ``s{step}/f{f}/{field}`` written as the contract
    writes it (no leading zeros), else None (``s{step}/learning_rates``, any other key)."""
    match = _KEY.fullmatch(key)
    if match is None or not match.group(2) or match.group(2) != str(int(match.group(2))):
        return None
    return int(match.group(2))


def parse_steps(
    batches: Mapping[str, Any], num_features: int, source: str | None = None
) -> list[tuple[list[FeatureInput], Any]]:
    """Group the flat replay keys into steps: per step, one ``FeatureInput`` per feature and the
    learning-rate list (or None). Raises ``InputError`` naming the key for an unexpected key, a
    feature index the configuration does not have, or a gap in the step numbers.
    """
    grouped: dict[int, dict[int, dict[str, Any]]] = {}
    rates: dict[int, Any] = {}
    for name, value in batches.items():
        match = _KEY.fullmatch(name)
        if match is None:
            raise InputError(
                "unexpected key; a batches file holds s{step}/f{feature}/ids, .../row_splits, "
                ".../weights, .../grad and s{step}/learning_rates",
                path=source, key=name,
            )
        step = int(match.group(1))
        feature = int(match.group(2)) if match.group(2) else -1
        canonical = (f"s{step}/learning_rates" if match.group(4)
                     else f"s{step}/f{feature}/{match.group(3)}")
        if name != canonical:  # s0/f00/ids would silently take the place of s0/f0/ids
            clash = (", a key this file also holds (one of the two arrays would be lost)"
                     if canonical in batches else "")
            raise InputError(
                f"step and feature numbers are written without leading zeros, in ASCII digits: "
                f"this key would be read as {canonical}{clash}; rename it {canonical}",
                path=source, key=name,
            )
        if match.group(4):
            rates[step] = value
            continue
        if feature >= num_features:
            raise InputError(
                f"feature index {feature} does not exist: the configuration has {num_features} "
                f"feature(s), 0..{num_features - 1}",
                path=source, key=name,
            )
        grouped.setdefault(step, {}).setdefault(feature, {})[match.group(3)] = value
    steps = sorted(set(grouped) | set(rates))
    if not steps:
        raise InputError(
            "missing: the batches file holds no step (expected s0/f0/ids, s0/f0/grad, ...)",
            path=source, key="s0/f0/ids",
        )
    for expected, step in enumerate(steps):
        if step != expected:
            raise InputError(
                f"missing: step {expected} is absent but step {step} is present; steps are "
                f"numbered 0..{steps[-1]} without gaps",
                path=source, key=f"s{expected}/f0/ids",
            )
    out: list[tuple[list[FeatureInput], Any]] = []
    for step in steps:
        features = grouped.get(step, {})
        inputs: list[FeatureInput] = []
        for f in range(num_features):
            arrays = features.get(f, {})
            if "ids" not in arrays:
                present = ", ".join(f"s{step}/f{f}/{k}" for k in sorted(arrays)) or "nothing"
                raise InputError(
                    f"missing: step {step} skips feature {f} (found {present}); every step must "
                    "give every feature",
                    path=source, key=f"s{step}/f{f}/ids",
                )
            inputs.append(FeatureInput(*(arrays.get(k) for k in _FIELDS)))
        out.append((inputs, rates.get(step)))
    return out


def require_replay_memory(plan: Plan, headers: Mapping[str, Any], max_memory: int | None, *,
                          engine: str = "numba", init_bytes: int | None = None) -> None:
    """Refuse (``UsageError``, as ``core.require_memory``) a replay whose whole-process estimate
    (``memory.replay_estimate``: the process, tables and slots, the largest recorded step, the
    activations kept until the output is written, the batches and ``init_bytes`` of initial
    arrays) exceeds ``max_memory`` (None: the default limit). ``headers``: the batches' arrays
    by key, or anything with ``shape`` and ``nbytes`` (the ``.npy`` headers, read before the
    file is decompressed); ``engine``: the engine's name."""
    parts = replay_estimate(plan, headers, engine=engine, init_bytes=init_bytes)
    require_memory(parts.total, max_memory, process=parts.process,
                   counted="the process, tables, slots, a step's working arrays, the batches "
                   "and the activations", reduce=reduce_hint(parts, tables="all"))


def replay(
    prepared: Prepared,
    batches: Mapping[str, Any],
    init: Mapping[str, Any] | None = None,
    *,
    options: RunOptions | None = None,
    placement: Placement | None = None,
    sources: tuple[str | None, str | None] = (None, None),
    on_step: Callable[[int, Mapping[str, TableReport]], None] | None = None,
    on_nonfinite: Callable[[NonFinite], None] | None = None,
) -> dict[str, np.ndarray]:
    """Run every step of ``batches`` from the state ``init``; return the replay output arrays.

    ``prepared``: the configuration (a ``Prepared``, ``tpuemb_cfg.session.prepare``; nothing is
    parsed or planned again; ``tpuemb_cfg.simulate.replay`` takes a path or a message).
    ``options``/``placement``: as for ``Executor`` (``RunOptions``, ``Placement``). With tables
    in this process, ``max_memory`` refuses (``UsageError``) a replay whose whole-process
    estimate (``require_replay_memory``) exceeds it (default: 80% of the memory available;
    ``check_memory=False``: the caller has checked, e.g. from the ``.npy`` headers); with the
    Ray backend it is each host actor's limit, and the returned tables
    and slots are live ``ShardedArray`` views (``npzio.atomic_write_npz`` streams them host by
    host) valid while the Ray session lasts. ``sources``: the files ``batches`` and ``init``
    were read from, named in errors. Arrays must have the contract's dtypes exactly (int64 ids,
    float32 floats); every step is checked once, before the first one runs: ``InputError``
    names the key and the source. ``on_step(step, reports)`` is called after each step with
    the per-table ``TableReport`` of that step. A step that leaves a parameter NaN or infinite
    keeps TensorFlow's result (``Executor``; ``strict_finite``: ``NumericalError``);
    ``on_nonfinite(event)`` is then called once, at the end, with the first such value and its
    cause (``nonfinite.NonFinite``).
    """
    options = options if options is not None else RunOptions()
    placement = placement if placement is not None else Placement()
    batches_source, init_source = sources
    if choose_backend(placement.backend).in_process and options.check_memory:
        require_replay_memory(
            prepared.plan, {name: np.asarray(value) for name, value in batches.items()},
            options.memory_limit, engine=get_engine(options.engine).name,
            init_bytes=(sum(int(np.asarray(v).nbytes) for v in init.values())
                        if init is not None else None))
        # Checked above, with the inputs and outputs counted too.
        options = replace(options, max_memory=None, check_memory=False)
    executor = Executor(prepared, options, placement, initial_state=init,
                        state_source=init_source, strict=True)
    plan = executor.plan
    checked = [
        executor.check_step(
            inputs, check_learning_rates(rates, plan, step, batches_source, strict=True), step,
            source=batches_source, strict=True, finite=True)
        for step, (inputs, rates) in enumerate(
            parse_steps(batches, len(plan.features), batches_source))
    ]
    out: dict[str, np.ndarray] = {}
    for step, inputs in enumerate(checked):
        activations = executor.run_checked_step(inputs, batches_source)
        for f, activation in enumerate(activations):
            out[f"s{step}/f{f}/activations"] = activation
        if on_step is not None:
            on_step(step, executor.last_report)
    out.update(executor.state_arrays())
    if on_nonfinite is not None and executor.nonfinite is not None:
        on_nonfinite(executor.nonfinite)
    return out
