"""The replay contract's keys (``B.npz``: ``s{step}/f{f}/ids``, ``.../row_splits``,
``.../weights``, ``.../grad``, ``s{step}/learning_rates``): which feature a key names, the keys
grouped into steps, and :class:`FeatureInput`, one feature's arrays for one step.

Light on purpose (the standard library only): ``tpuemb plan`` reads a B.npz sample through these
without loading the executor (``executor.replay`` runs the steps, ``executor.batch`` checks
them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tpuemb_cfg.base.errors import InputError

__all__ = ["FeatureInput", "feature_of", "parse_steps"]

_KEY = re.compile(r"s(\d+)/(?:f(\d+)/(ids|row_splits|weights|grad)|(learning_rates))")
_FIELDS = ("ids", "row_splits", "weights", "grad")


@dataclass(frozen=True)
class FeatureInput:
    """One feature's arrays for one step (the replay contract's ``s{step}/f{f}/...`` keys).

    ``ids`` int [nnz]; ``row_splits`` int [batch + 1] (None: one id per sample); ``weights``
    float [nnz] (None: 1.0); ``grad`` float [batch, dim], the loss gradient with respect to the
    feature's activation (needed by ``Executor.step`` only).
    """

    ids: Any
    row_splits: Any = None
    weights: Any = None
    grad: Any = None


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
