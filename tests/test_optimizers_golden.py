"""The update functions against the golden optimizer cases: ``tf/`` (TensorFlow's CPU kernels)
and ``spec/`` (an independent float32 implementation of the spec).

Replay mode gives the activation gradients, so the row gradients do not depend on the tables and
a few lines suffice to rebuild them (gains, per-core partials, de-duplication over the features
of a table, gradient clipping, weight decay, laziness); the registered update then runs on the
updated rows, followed by weight clipping. The executor's own tests replay the cases end to end
(activations included); this test isolates the optimizer arithmetic, at a tolerance (2e-6) much
tighter than the cases' own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import GOLDEN, golden

from tpuemb_cfg.executor.optimizers import UpdateContext, get
from tpuemb_cfg.formats.io import load

TF_CASES = sorted(p.name for p in (GOLDEN / "optimizers" / "tf").glob("*/")) or ["(none)"]
SPEC_CASES = sorted(p.name for p in (GOLDEN / "optimizers" / "spec").glob("*/")) or ["(none)"]
TIGHT = 2e-6


def gains(weights: np.ndarray, splits: np.ndarray, combiner: str) -> np.ndarray:
    """Per-occurrence gain x * s_b (spec 3.1), float32; a zero denominator gives s_b = 0."""
    out = np.zeros_like(weights)
    for b in range(len(splits) - 1):
        x = weights[splits[b] : splits[b + 1]]
        if combiner == "sum":
            scale = np.float32(1.0)
        else:
            total = np.float32(0.0)
            for value in x:
                total = total + (value if combiner == "mean" else value * value)
            denominator = total if combiner == "mean" else np.sqrt(total)
            scale = np.float32(1.0) / denominator if denominator != 0 else np.float32(0.0)
        out[splits[b] : splits[b + 1]] = x * scale
    return out


def bounds(limits: Any) -> tuple[np.float32, np.float32]:
    lower = np.float32(limits.lower.value) if limits.HasField("lower") else np.float32(-np.inf)
    upper = np.float32(limits.upper.value) if limits.HasField("upper") else np.float32(np.inf)
    return lower, upper


def replay_table(folder: Path, info: dict[str, Any], table: Any, num_cores: int) -> None:
    """Replay every step's updates of one table and compare its final parameters and slots."""
    batches, init, expected = (
        np.load(folder / f) for f in ("batches.npz", "init.npz", "expected.npz")
    )
    opt = table.optimization_parameters
    spec = get(opt.WhichOneof("parameters"))
    message = getattr(opt, spec.name)
    hyper = spec.bind(message)
    params = init[f"table/{table.name}"].copy()
    slots = [
        init[f"slot/{table.name}/{s.name}"].copy()
        if f"slot/{table.name}/{s.name}" in init.files
        else np.full_like(params, s.initial_value(message))
        for s in spec.slots
    ]
    # Partials run one after another (spec 5.2); with accumulation there is one, over all cores.
    cores = num_cores if opt.gradient_accumulation_status == 2 else 1  # 2 = DISABLED
    features = [f for f, feat in enumerate(info["features"]) if feat["table"] == table.name]
    for step in range(info["steps"]):
        key = f"s{step}/learning_rates"
        rates = tuple(float(x) for x in (batches[key] if key in batches.files else ()))
        if opt.learning_rate.WhichOneof("learning_rate") == "constant":
            lr = np.float32(opt.learning_rate.constant)
        else:
            lr = np.float32(rates[opt.learning_rate.dynamic.tag])
        for core in range(cores):
            grad = np.zeros_like(params)
            touched: list[np.ndarray] = []
            for f in features:
                key = f"s{step}/f{f}/"
                ids = batches[key + "ids"]
                d_act = batches[key + "grad"]
                splits = batches.get(key + "row_splits", np.arange(len(d_act) + 1))
                weights = batches.get(key + "weights", np.ones(len(ids), np.float32))
                bag = np.repeat(np.arange(len(d_act)), np.diff(splits))
                gain = gains(weights, splits, info["features"][f]["combiner"])
                per_core = len(d_act) // cores
                mine = (bag >= core * per_core) & (bag < (core + 1) * per_core)
                np.add.at(grad, ids[mine], gain[mine, None] * d_act[bag[mine]])
                touched.append(ids[mine])
            rows = np.unique(np.concatenate(touched))
            if not spec.lazy(message):
                rows = np.arange(len(params))
            g = grad[rows]
            if opt.HasField("gradient_clipping_limits"):
                g = np.clip(g, *bounds(opt.gradient_clipping_limits))
            w = params[rows]
            if opt.weight_decay_factor:
                wd = np.float32(opt.weight_decay_factor)
                if opt.multiply_weight_decay_factor_by_learning_rate:
                    wd = wd * lr
                w = w - wd * w
            ctx = UpdateContext(step=step, dynamic_inputs=rates)
            new_p, new_s = spec.update(w, spec.state(*(s[rows] for s in slots)), g, lr, hyper, ctx)
            if opt.HasField("clipping_limits"):
                new_p = np.clip(new_p, *bounds(opt.clipping_limits))
            params[rows] = new_p
            for slot, new in zip(slots, new_s, strict=True):
                slot[rows] = new
    # The README reports float32 NumPy within 9.5e-7 of the expectations; the cases allow 1e-5
    # (tf/) and 1e-4 (spec/). 2e-6 keeps the test sensitive to a mis-ordered float32 operation.
    results = [(f"table/{table.name}", params, f"table {table.name}")] + [
        (f"slot/{table.name}/{s.name}", slot, f"slot {s.name} of table {table.name}")
        for s, slot in zip(spec.slots, slots, strict=True)
    ]
    for key, got, what in results:
        np.testing.assert_allclose(
            got, expected[key], rtol=0, atol=TIGHT, err_msg=f"{folder.name}: {what}"
        )


@pytest.mark.parametrize("case", [f"tf/{c}" for c in TF_CASES] + [f"spec/{c}" for c in SPEC_CASES])
def test_golden_case(case: str) -> None:
    folder = golden("optimizers", *case.split("/"))
    info = json.loads((folder / "case.json").read_text())
    config = load(str(folder / "config.pbtxt"))
    for table in config.table_descriptor:
        replay_table(folder, info, table, max(config.num_tensor_cores, 1))
