"""Regenerate ``exponential_decay.json`` next to this file. RUN ONLY IN A TENSORFLOW VENV.

    /path/to/tf-venv/bin/python tests/data/tf/generate_exponential_decay.py

Needs tensorflow-cpu 2.21 (with its Keras 3). Not a test and never imported by the suite.

Issue 35's schedule, 0.1 times 0.96 every 7 steps (smooth and staircase), evaluated by
TensorFlow for global steps 0..199 as ``schedules.json``'s cases are: Keras 3's
``ExponentialDecay`` called with an int64 variable holding the step, as an optimizer's
``iterations``. Values are TensorFlow's float32 results, stored as the Python floats they convert
to exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import tensorflow as tf

HERE = Path(__file__).resolve().parent
STEPS = 200


def main() -> None:
    cases = []
    for staircase in (False, True):
        config = {"initial_learning_rate": 0.1, "decay_steps": 7, "decay_rate": 0.96,
                  "staircase": staircase}
        schedule = keras.optimizers.schedules.ExponentialDecay(**config)
        step = tf.Variable(0, dtype=tf.int64)
        values = []
        for value in range(STEPS):
            step.assign(value)
            rate = schedule(step)
            assert rate.dtype == tf.float32, rate.dtype
            values.append(float(rate.numpy()))
        cases.append({"name": "issue35" + ("_staircase" if staircase else ""),
                      "library": "keras", "class_name": "ExponentialDecay", "config": config,
                      "steps": {"range": [0, STEPS]}, "values": values})
    out = {"generator": {"tensorflow": tf.__version__, "keras": keras.__version__},
           "cases": cases}
    (HERE / "exponential_decay.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
