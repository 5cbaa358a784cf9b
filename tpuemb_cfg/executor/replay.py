"""The replay contract: a whole recorded run in, the final state and every activation out.

Input keys (``B.npz``): ``s{step}/f{f}/ids`` int64 [nnz], ``s{step}/f{f}/row_splits`` int64
[batch + 1] (absent: one id per sample), ``s{step}/f{f}/weights`` float32 [nnz] (absent: 1.0),
``s{step}/f{f}/grad`` float32 [batch, dim], ``s{step}/learning_rates`` float32 [K] (exactly when
K > 0). Output keys: ``table/{table}``, ``slot/{table}/{slot}`` and ``s{step}/f{f}/activations``.
Every step is checked before the first one runs, so bad input fails fast and nothing is returned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from .batch import FeatureInput, check_batch, check_gradient, check_learning_rates
from .core import Executor, TableReport, require_memory
from .plan import Plan

__all__ = ["parse_steps", "replay", "require_replay_memory"]

_KEY = re.compile(r"s(\d+)/(?:f(\d+)/(ids|row_splits|weights|grad)|(learning_rates))")
_FIELDS = ("ids", "row_splits", "weights", "grad")


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


def require_replay_memory(plan: Plan, sizes: Mapping[str, int], max_memory: int | None) -> None:
    """Refuse (``UsageError``, as ``core.require_memory``) a replay whose tables, slots and step
    (``Plan.memory_estimate``), batches (``sizes``: bytes by key, e.g. from the ``.npy`` headers
    before the file is decompressed) and activations (as large as the gradients) exceed
    ``max_memory`` (None: the default limit)."""
    output_bytes = sum(size for name, size in sizes.items() if name.endswith("/grad"))
    require_memory(plan.memory_estimate() + output_bytes + sum(sizes.values()), max_memory,
                   counted="tables, slots, a step's working arrays, the batches and the "
                   "activations")


def replay(
    config: Any,
    batches: Mapping[str, Any],
    init: Mapping[str, Any] | None = None,
    *,
    combiners: str | Sequence[str] | Mapping[int, str] | None = None,
    seed: int = 0,
    batches_source: str | None = None,
    init_source: str | None = None,
    max_memory: int | None = None,
    validate_config: bool = True,
    on_step: Callable[[int, Mapping[str, TableReport]], None] | None = None,
    engine: str = "numba",
    backend: str = "local",
    ray_address: str | None = None,
    shards: int | None = None,
) -> dict[str, np.ndarray]:
    """Run every step of ``batches`` from the state ``init``; return the replay output arrays.

    ``config``: a ``Prepared`` (``tpuemb_cfg.session``; nothing is parsed or planned again) or
    anything ``prepare`` takes; ``validate_config=False`` skips validation. Arrays must have the
    contract's dtypes exactly (int64 ids, float32 floats). ``combiners`` as for ``Executor`` (a
    ``Prepared`` is re-planned with them). ``max_memory``: refuse (``UsageError``) when the
    state (estimated from the prepared plan), the inputs and the activations would need more
    bytes (default: 80% of the memory available, as for ``Executor``). Raises ``InputError``
    (naming the key and, when given, the source file) for any bad input, before any step runs.
    ``on_step(step, reports)`` is called after each step with the per-table ``TableReport`` of
    that step. ``engine``: ``numba`` (default) or ``numpy`` (see
    ``tpuemb_cfg.executor.engines``): the same bits (docs/numerics.md).
    ``backend``, ``ray_address``, ``shards``: where the tables live, as for ``Executor``; with
    ``backend="ray"``, ``max_memory`` is each host actor's limit, and the returned tables and
    slots are live ``ShardedArray`` views (``npzio.atomic_write_npz`` streams them host by host)
    valid while the Ray session lasts.
    """
    from ..session import prepare  # until replay takes only a Prepared

    prepared = prepare(config, combiners=combiners, check=validate_config)
    if backend != "ray":
        require_replay_memory(
            prepared.plan, {name: int(np.asarray(value).nbytes) for name, value in batches.items()},
            max_memory)
    executor = Executor(
        prepared,
        initial_state=init,
        seed=seed,
        state_source=init_source,
        strict=True,
        engine=engine,
        backend=backend,
        ray_address=ray_address,
        shards=shards,
        max_memory=max_memory if backend == "ray" else None,
        check_memory=False,  # checked above, with the inputs and outputs counted too
    )
    plan = executor.plan
    steps = parse_steps(batches, len(plan.features), batches_source)
    for step, (inputs, rates) in enumerate(steps):
        checked = check_batch(inputs, plan, step, batches_source, strict=True)
        check_learning_rates(rates, plan, step, batches_source, strict=True)
        if plan.updates:
            for item, feature, c in zip(inputs, plan.features, checked, strict=True):
                check_gradient(item.grad, plan, feature, c.batch, step, batches_source, True)
    out: dict[str, np.ndarray] = {}
    for step, (inputs, rates) in enumerate(steps):
        activations = executor.step(inputs, rates, source=batches_source, strict=True)
        for f, activation in enumerate(activations):
            out[f"s{step}/f{f}/activations"] = activation
        if on_step is not None:
            on_step(step, executor.last_report)
    out.update(executor.state_arrays())
    return out
