"""Regenerate this case's TensorFlow values. RUN ONLY IN A TENSORFLOW VENV.

    /path/to/tf-venv/bin/python tests/data/tf/nonfinite/generate.py   (tensorflow-cpu 2.21)

Not a test, never imported by the suite. Writes ``batches.npz``, ``init.npz`` and
``expected.npz`` (the replay contract's keys) and ``case.json`` for ``config.pbtxt``: Adagrad on
a zero accumulator (issue 34), where an id of weight 0 gives a zero gradient and TensorFlow's
``ResourceSparseApplyAdagrad`` computes ``var -= lr * grad * rsqrt(accum)`` = ``0 * inf`` = NaN.

Each step as the golden optimizer cases compute it (tests/data/golden/optimizers/README.md):
activations ``tf.nn.embedding_lookup_sparse(table, ids, weights, combiner="sum")`` on the table
before the step; the row gradients are ``tf.GradientTape``'s of ``sum(activation * grad)``,
duplicates summed with ``tf.unique`` + ``tf.math.unsorted_segment_sum``; then the kernel on the
touched rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import tensorflow as tf

HERE = Path(__file__).resolve().parent
LR = np.float32(0.5)
VOCAB, DIM = 8, 2
STEPS = [  # one id per bag (no row_splits): ids, weights, the activation gradients
    (np.array([1, 3, 5], np.int64), np.array([1, 0, 1], np.float32),
     np.array([[1, 2], [3, 4], [0.5, 0]], np.float32)),
    (np.array([3, 1, 2], np.int64), np.array([1, 1, 1], np.float32),
     np.array([[0.25, -1], [2, 0.5], [-1.5, 0.75]], np.float32)),
]


def main() -> None:
    rng = np.random.default_rng(34)
    table0 = rng.uniform(-1, 1, (VOCAB, DIM)).astype(np.float32)
    var = tf.Variable(table0)
    accum = tf.Variable(np.zeros((VOCAB, DIM), np.float32))
    batches: dict[str, np.ndarray] = {}
    expected: dict[str, np.ndarray] = {}
    for step, (ids, weights, grad) in enumerate(STEPS):
        batches[f"s{step}/f0/ids"] = ids
        batches[f"s{step}/f0/weights"] = weights
        batches[f"s{step}/f0/grad"] = grad
        n = ids.shape[0]
        indices = np.stack([np.arange(n), np.zeros(n, np.int64)], axis=1)
        sp_ids = tf.SparseTensor(indices, ids, [n, 1])
        sp_weights = tf.SparseTensor(indices, weights, [n, 1])
        with tf.GradientTape() as tape:
            activation = tf.nn.embedding_lookup_sparse(var, sp_ids, sp_weights, combiner="sum")
            objective = tf.reduce_sum(activation * grad)
        expected[f"s{step}/f0/activations"] = activation.numpy()
        sparse = tape.gradient(objective, var)  # IndexedSlices, one slice per occurrence
        unique, position = tf.unique(sparse.indices)
        rows = tf.math.unsorted_segment_sum(sparse.values, position, tf.size(unique))
        tf.raw_ops.ResourceSparseApplyAdagrad(
            var=var.handle, accum=accum.handle, lr=LR, grad=rows, indices=unique,
            use_locking=False, update_slots=True)
    expected["table/t"] = var.numpy()
    expected["slot/t/accumulators"] = accum.numpy()
    np.savez(HERE / "batches.npz", **batches)
    np.savez(HERE / "init.npz", **{"table/t": table0,
                                   "slot/t/accumulators": np.zeros((VOCAB, DIM), np.float32)})
    np.savez(HERE / "expected.npz", **expected)
    (HERE / "case.json").write_text(json.dumps({
        "source": "tensorflow", "tensorflow": tf.__version__,
        "kernel": "ResourceSparseApplyAdagrad (update_slots true)",
        "exercises": "a zero accumulator with a zero row gradient (an id of weight 0, a zero "
                     "gradient column): NaN, then the NaN row read by the next step",
        "nan": {key: np.argwhere(np.isnan(value)).tolist()
                for key, value in expected.items() if np.isnan(value).any()},
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
