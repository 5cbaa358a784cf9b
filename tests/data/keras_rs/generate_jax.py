"""Regenerate ``jax_cases.json.gz`` next to this file. RUN ONLY IN A jax-tpu-embedding VENV.

    KERAS_BACKEND=jax /path/to/venv/bin/python tests/data/keras_rs/generate_jax.py

Needs Python 3.12, jax 0.12.0.1, jax-tpu-embedding 0.2.0, keras 3 and keras-rs 0.4.0 (a CPU is
enough). Not a test and never imported by the suite; tpuemb depends on none of them.

Each case builds keras-rs ``TableConfig``/``FeatureConfig`` objects with Keras 3 optimizers and
runs what keras-rs' JAX ``DistributedEmbedding`` does with them (``keras_rs/src/layers/embedding/
jax/distributed_embedding.py``), minus the TPU:

1. ``sparsecore_build``: ``config_conversion.keras_to_jte_feature_configs`` on the SparseCore
   features keyed by their joined paths (every feature here is on the SparseCore, the base
   class's dict), ``table_stacking.auto_stack_tables(feature_specs, global_device_count,
   num_sc_per_device)`` (``table_stacking="auto"``), ``embedding.
   prepare_feature_specs_for_training``, then each stack's limits and suggested buffer size as
   the largest of its tables' (the loop of ``sparsecore_build``, copied) and
   ``embedding.update_preprocessing_parameters``;
2. ``_sparsecore_preprocess``: one host's batch through ``embedding_utils.
   create_feature_samples`` and ``embedding_utils.stack_and_shard_samples(feature_specs,
   samples, local_device_count, global_device_count, num_sc_per_device)`` (keras-rs' own
   function: ``allow_id_dropping=True``, ``has_leading_dimension=False``).

Stored per case: the inputs (tables with the optimizer's ``class_name`` and ``get_config()``,
features, structure, devices) and the outcome: every stack (its tables in row order, limits,
suggested buffer, total samples, each feature's row offset, column offset and shift, read from
the specs keras-rs would use), and the batch statistics keras-rs gets back (per stack:
``max_ids_per_partition`` and ``max_unique_ids_per_partition`` flattened, ``required_buffer_size_
per_sc``, ``id_drop_counters``). The ids are not stored: ``batch_ids`` below computes them from
integers only (``batch_recipe.py``, which the test uses too), and ``ids_sha256`` checks them.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import keras  # noqa: E402
import keras_rs  # noqa: E402
import numpy as np  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import embedding  # noqa: E402
from jax_tpu_embedding.sparsecore.lib.nn import table_stacking as jte_stacking  # noqa: E402
from keras_rs.src.layers.embedding.jax import config_conversion, embedding_utils  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from batch_recipe import batch_ids  # noqa: E402


def _optimizer(spec: dict[str, Any]) -> Any:
    optimizer = getattr(keras.optimizers, spec["keras"])(**spec.get("kwargs", {}))
    return optimizer


def _plain(value: Any) -> Any:
    """``json.dumps``' fallback: NumPy scalars (from ``get_config``) as Python numbers."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {value!r}")


def run(case: dict[str, Any]) -> dict[str, Any]:
    """What keras-rs' JAX layer makes of a case (module docstring)."""
    optimizers = {oid: _optimizer(o) for oid, o in case["optimizers"].items()}
    for oid, o in case["optimizers"].items():
        o["class_name"] = type(optimizers[oid]).__name__
        o["config"] = json.loads(json.dumps(optimizers[oid].get_config(), default=_plain))
    tables = {tid: keras_rs.layers.TableConfig(
        name=t["name"], vocabulary_size=t["vocabulary_size"], embedding_dim=t["embedding_dim"],
        optimizer=optimizers[t["optimizer"]], combiner=t["combiner"], placement="sparsecore",
        max_ids_per_partition=t["max_ids_per_partition"],
        max_unique_ids_per_partition=t["max_unique_ids_per_partition"])
        for tid, t in case["tables"].items()}
    features = {path: keras_rs.layers.FeatureConfig(
        name=f["name"], table=tables[f["table"]], input_shape=tuple(f["input_shape"]),
        output_shape=tuple(f["output_shape"])) for path, f in case["features"].items()}
    g, nsc, local = case["global_devices"], case["sparse_cores_per_device"], case["local_devices"]
    feature_specs = config_conversion.keras_to_jte_feature_configs(features)
    if case["table_stacking"] == "auto":
        jte_stacking.auto_stack_tables(feature_specs, g, nsc)
    embedding.prepare_feature_specs_for_training(feature_specs, g, nsc)
    stacks = jte_stacking.get_table_stacks(embedding.get_table_specs(feature_specs))
    max_ids, max_unique, buffers, drops = {}, {}, {}, {}
    for name, stack in stacks.items():  # DistributedEmbedding.sparsecore_build's loop
        max_ids[name] = np.max(np.asarray([s.max_ids_per_partition for s in stack], np.int32))
        max_unique[name] = np.max(np.asarray([s.max_unique_ids_per_partition for s in stack],
                                             np.int32))
        sizes = [s.suggested_coo_buffer_size_per_device for s in stack
                 if s.suggested_coo_buffer_size_per_device is not None]
        if sizes:
            buffers[name] = np.max(np.asarray(sizes, np.int32))
        drops[name] = 0
    embedding.update_preprocessing_parameters(
        feature_specs, embedding.SparseDenseMatmulInputStats(
            max_ids_per_partition=max_ids, max_unique_ids_per_partition=max_unique,
            required_buffer_size_per_sc=buffers, id_drop_counters=drops), nsc)
    out_stacks: dict[str, Any] = {}
    for spec in jax.tree.leaves(feature_specs):
        stacked = spec.table_spec.stacked_table_spec
        members = sorted(stacks[stacked.stack_name],
                         key=lambda t: t.setting_in_stack.row_offset_in_shard)
        entry = out_stacks.setdefault(stacked.stack_name, {
            "tables": [t.name for t in members],
            "max_ids_per_partition": int(stacked.max_ids_per_partition),
            "max_unique_ids_per_partition": int(stacked.max_unique_ids_per_partition),
            "suggested_coo_buffer_size_per_device": stacked.suggested_coo_buffer_size_per_device,
            "total_sample_count": int(stacked.total_sample_count),
            "features": {}})
        move = spec.id_transformation
        entry["features"][spec.name] = {"row_offset": move.row_offset,
                                        "col_offset": move.col_offset,
                                        "col_shift": move.col_shift}
    # One host's batch: rows = global batch / hosts, hosts = global / local devices.
    hosts = g // local
    inputs, digest = {}, hashlib.sha256()
    for index, (path, f) in enumerate(sorted(case["features"].items())):
        rows = f["input_shape"][0] // hosts
        ids = batch_ids(rows, f["ids_per_row"], index, case["tables"][f["table"]]
                        ["vocabulary_size"], case["span"], case["spread"], case["salt"])
        digest.update(ids.tobytes())
        inputs[path] = ids
    samples = embedding_utils.create_feature_samples(feature_specs, inputs, None)
    _, stats = embedding_utils.stack_and_shard_samples(feature_specs, samples, local, g, nsc)
    batch = {name: {
        "max_ids_per_partition": np.asarray(stats.max_ids_per_partition[name]).reshape(-1)
        .tolist(),
        "max_unique_ids_per_partition": np.asarray(stats.max_unique_ids_per_partition[name])
        .reshape(-1).tolist(),
        "required_buffer_size_per_sc": np.asarray(stats.required_buffer_size_per_sc[name])
        .reshape(-1).tolist(),
        "id_drop_counters": int(np.sum(stats.id_drop_counters[name])),
    } for name in out_stacks}
    return {"stacks": out_stacks, "batch": batch, "ids_sha256": digest.hexdigest()}


# -- the cases -------------------------------------------------------------------------------------

MLPERF = [("0", 40000000, 3), ("1", 39060, 2), ("9", 40000000, 7), ("10", 3067956, 3),
          ("11", 405282, 8), ("19", 40000000, 12), ("20", 40000000, 100), ("21", 40000000, 27),
          ("22", 590152, 10)]


def mlperf() -> dict[str, Any]:
    """keras-rs' examples/ml_perf main.py with configs/v6e_32_full_dataset.py: the 9 tables of at
    least 21,000 rows, dim 128, Adagrad(0.0034) each, sum, 8192 / 4096, global batch 16384 on a
    v6e-32 (32 chips of 2 SparseCores, 8 hosts of 4). input_shape as main.py gives it
    ``(batch, 1)``; the batch holds each feature's multi-hot length (feature_list_length)."""
    tables, features, optimizers = {}, {}, {}
    for name, vocab, k in MLPERF:
        optimizers[name] = {"keras": "Adagrad", "kwargs": {"learning_rate": 0.0034}}
        tables[name] = {"name": name, "vocabulary_size": vocab, "embedding_dim": 128,
                        "optimizer": name, "combiner": "sum", "max_ids_per_partition": 8192,
                        "max_unique_ids_per_partition": 4096}
        features[f"{name}_id"] = {"name": name, "table": name, "input_shape": [16384, 1],
                                  "output_shape": [16384, 128], "ids_per_row": k}
    return {"name": "mlperf_dlrm_dcnv2_v6e_32", "tables": tables, "features": features,
            "optimizers": optimizers, "global_devices": 32, "sparse_cores_per_device": 2,
            "local_devices": 4, "table_stacking": "auto", "span": 50000, "spread": 64,
            "salt": 1}


def random_case(rng: random.Random, index: int) -> dict[str, Any]:
    """1-10 tables (widths 8-128, 2-3 optimizers, 1-2 combiners, limits 1-4096 each), 1-3
    features per table, a power-of-two slice of 1-64 chips with 2 or 4 SparseCores, one or
    several hosts, skewed or spread ids."""
    nsc = rng.choice([2, 4])
    g = rng.choice([1, 2, 4, 8, 16, 32, 64])
    local = rng.choice([d for d in (1, 2, 4, 8) if d <= g and g % d == 0])
    n = g * nsc
    optimizers = {"a": {"keras": "Adagrad", "kwargs": {"learning_rate": 0.01}},
                  "b": {"keras": "SGD", "kwargs": {"learning_rate": 0.1}},
                  "c": {"keras": "Adam", "kwargs": {"learning_rate": 0.001}}}
    used = rng.sample(sorted(optimizers), rng.randint(1, 3))
    combiners = rng.sample(["sum", "mean", "sqrtn"], rng.randint(1, 2))
    per_sc = rng.choice([1, 2, 4, 8, 16])
    batch = per_sc * n  # global rows: every SparseCore gets per_sc of each feature
    tables, features = {}, {}
    for t in range(rng.randint(1, 10)):
        ids = rng.choice([1, 2, 8, 32, 128, 1024, 4096])
        unique = rng.choice([u for u in (1, 2, 8, 32, 128, 1024, 4096) if u <= ids] or [ids])
        tables[f"t{t}"] = {
            "name": f"table_{t}", "vocabulary_size": rng.choice([10, 100, 1000, 50000, 10**6]),
            "embedding_dim": rng.choice([8, 16, 32, 64, 128]), "optimizer": rng.choice(used),
            "combiner": rng.choice(combiners), "max_ids_per_partition": ids,
            "max_unique_ids_per_partition": unique}
        for f in range(rng.randint(1, 3)):
            k = rng.choice([1, 1, 2, 5, 20])
            path = f"f{t}_{f}"
            features[path] = {"name": f"feat_{t}_{f}", "table": f"t{t}",
                              "input_shape": [batch, k],
                              "output_shape": [batch, tables[f"t{t}"]["embedding_dim"]],
                              "ids_per_row": k}
    return {"name": f"random_{index}", "tables": tables, "features": features,
            "optimizers": {k: v for k, v in optimizers.items() if k in used},
            "global_devices": g, "sparse_cores_per_device": nsc, "local_devices": local,
            "table_stacking": "auto" if rng.random() < 0.85 else None,
            "span": rng.choice([7, 100, 5000, 10**6]), "spread": rng.choice([1, 3, n]),
            "salt": rng.randint(0, 1000)}


def main() -> None:
    rng = random.Random(20261207)
    cases = [mlperf()] + [random_case(rng, i) for i in range(40)]
    for case in cases:
        case["expect"] = run(case)
        print(case["name"], list(case["expect"]["stacks"]),
              {k: v["id_drop_counters"] for k, v in case["expect"]["batch"].items()},
              flush=True)
    document = {"generated_by": "tests/data/keras_rs/generate_jax.py",
                "python": sys.version.split()[0], "jax": jax.__version__,
                "keras": keras.__version__, "keras_rs": keras_rs.__version__,
                "jax_tpu_embedding": _version("jax-tpu-embedding"), "cases": cases}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=_plain) + "\n"
    with open(HERE / "jax_cases.json.gz", "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as out:
        out.write(text.encode("utf-8"))
    print(f"wrote {len(cases)} cases")


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
