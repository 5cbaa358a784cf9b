"""Record every CSR slot jax-tpu-embedding 0.2.0 writes. RUN ONLY IN A jax-tpu-embedding VENV.

    /work/refenv-E/bin/python tests/data/sparsecore/generate_csr_written.py

Needs Python 3.12, jax 0.12.0.1 and jax-tpu-embedding 0.2.0 (a CPU is enough); not a test, never
imported by the suite, and tpuemb depends on neither.

The inputs are stored cases of ``jte_preprocess_c.json.gz`` and ``jte_minibatch_split.json.gz``
(ids, weights, options and the stacking jax-tpu-embedding used; see PROVENANCE-C.md and
PROVENANCE-MB.md). Each chosen case is preprocessed again by
``embedding.preprocess_sparse_dense_matmul_input``, in four child processes whose ``malloc``
fills fresh memory differently (glibc's ``MALLOC_PERTURB_`` unset, 0x55, 0xAA and 0x0F): a slot
the reference writes holds the same bytes in all four runs; a slot it leaves alone holds what
the allocator left there, which differs between the runs. Written = equal bytes in the four runs.
(A slot unwritten but equal in all four would be counted as written; the test then checks its
value against tpuemb, so such a slot could only make the test stricter, never looser.)

Stored in ``jte_csr_written.npz``: per case and stack (``c<id>/<stack>/``), ``row_pointers``,
``embedding_ids``, ``sample_ids`` and ``gains`` flattened (the run with ``MALLOC_PERTURB_``
unset), and ``<array>_written`` (``np.packbits`` of the written mask, flattened); ``cases`` is
the JSON list of ``[file, id]`` recorded.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ARRAYS = ("row_pointers", "embedding_ids", "sample_ids", "gains")
#: Cases chosen to cover: 1-4 local devices, 2 and 4 SparseCores, limits dropping ids, a
#: suggested buffer too small (silent buffer drops), leading dimension on and off, every
#: combiner, minibatching kept in one minibatch and split into several.
CHOSEN = {
    "jte_preprocess_c.json.gz": None,  # filled from the file: see _choose
    "jte_minibatch_split.json.gz": None,
}
PERTURB = (None, "85", "170", "15")


def _load(name: str) -> list[dict[str, Any]]:
    with gzip.open(HERE / name, "rt") as fh:
        cases: list[dict[str, Any]] = json.load(fh)["cases"]
    return cases


def _size(case: dict[str, Any]) -> int:
    return sum(int(np.prod(v)) for k, v in case["expected"]["shapes"].items()
               if k.startswith("embedding_ids"))


def _choose(name: str, cases: list[dict[str, Any]]) -> list[int]:
    """Small ok cases, a few of each kind (ids only; deterministic)."""
    limit = 16384 if name == "jte_preprocess_c.json.gz" else 40000
    ok = sorted((c for c in cases if c["expected"]["outcome"] == "ok"),
                key=lambda c: (_size(c), c["id"]))
    picked: list[int] = []

    def take(pred: Any, n: int) -> None:
        for c in ok:
            if len([p for p in picked if pred(by_id[p])]) >= n:
                return
            if c["id"] not in picked and pred(c) and _size(c) <= limit:
                picked.append(c["id"])

    by_id = {c["id"]: c for c in cases}
    def drops(c: dict[str, Any]) -> bool:
        return sum(np.sum(v) for v in c["expected"]["stats"]["id_drop_counters"].values()) > 0

    if name == "jte_preprocess_c.json.gz":
        take(lambda c: not c["enable_minibatching"] and c["local_device_count"] == 1, 3)
        take(lambda c: not c["enable_minibatching"] and c["local_device_count"] > 1, 3)
        take(lambda c: not c["enable_minibatching"] and c["num_sc_per_device"] == 4, 2)
        take(lambda c: not c["enable_minibatching"] and drops(c), 3)
        take(lambda c: not c["enable_minibatching"] and any(
            s["suggested_coo_buffer_size_per_device"] for s in c["stacks"].values()), 2)
        take(lambda c: not c["enable_minibatching"] and not c["has_leading_dimension"], 2)
        take(lambda c: not c["enable_minibatching"] and len(c["stacks"]) > 1, 2)
        take(lambda c: c["enable_minibatching"], 1)
    else:
        take(lambda c: int(np.asarray(c["expected"]["num_minibatches"]).reshape(-1)[0]) > 1, 2)
        take(lambda c: int(np.asarray(c["expected"]["num_minibatches"]).reshape(-1)[0]) == 1, 1)
    return picked


def _run_case(case: dict[str, Any]) -> dict[str, np.ndarray]:
    """Preprocess one case with jax-tpu-embedding (in this process): the CSR arrays by stack."""
    from jax_tpu_embedding.sparsecore.lib.nn import embedding, embedding_spec

    n = case["global_device_count"] * case["num_sc_per_device"]
    dims = {t["name"]: t for t in case["tables"]}
    optimizer = embedding_spec.SGDOptimizerSpec(learning_rate=0.1)
    table_specs: dict[str, Any] = {}
    feature_specs: dict[str, Any] = {}
    for stack_name, st in case["stacks"].items():
        members: dict[str, Any] = {}
        for f in st["features"].values():
            members.setdefault(f["table"], f)
        vocab = sum(f["padded_vocab_size"] for f in members.values())
        dim = max(-(-dims[t]["embedding_dim"] // 8) * 8 for t in members)
        stacked = embedding_spec.StackedTableSpec(
            stack_name=stack_name, stack_vocab_size=vocab, stack_embedding_dim=dim,
            optimizer=optimizer, combiner=st["combiner"],
            total_sample_count=st["total_sample_count"],
            max_ids_per_partition=st["max_ids_per_partition"],
            max_unique_ids_per_partition=st["max_unique_ids_per_partition"],
            suggested_coo_buffer_size_per_device=st["suggested_coo_buffer_size_per_device"])
        for tname, f in members.items():
            t = dims[tname]
            spec = embedding_spec.TableSpec(
                name=tname, vocabulary_size=t["vocabulary_size"],
                embedding_dim=t["embedding_dim"], initializer=lambda *a, **k: None,
                optimizer=optimizer, combiner=st["combiner"],
                max_ids_per_partition=st["max_ids_per_partition"],
                max_unique_ids_per_partition=st["max_unique_ids_per_partition"])
            spec.stacked_table_spec = stacked
            spec.setting_in_stack = embedding_spec.TableSettingInStack(
                stack_name=stack_name, padded_vocab_size=f["padded_vocab_size"],
                padded_embedding_dim=dim, row_offset_in_shard=f["row_offset_in_shard"],
                shard_rotation=f["shard_rotation"])
            table_specs[tname] = spec
        for fname, f in st["features"].items():
            feature_specs[fname] = (f, stack_name)
    features, weights, specs = [], [], []
    any_weights = False
    for feat in case["features"]:
        f, _ = feature_specs[feat["name"]]
        spec = embedding_spec.FeatureSpec(
            name=feat["name"], table_spec=table_specs[feat["table"]],
            input_shape=(case["batch_global"], 1),
            output_shape=(case["batch_global"], dims[feat["table"]]["embedding_dim"]))
        spec.id_transformation = embedding_spec.FeatureIdTransformation(
            row_offset=f["row_offset"], col_offset=f["col_offset"], col_shift=f["col_shift"])
        assert f["col_offset"] == f["row_offset_in_shard"] * n
        specs.append(spec)
        if feat["ragged"]:
            ids = np.empty(len(feat["ids"]), dtype=object)
            ids[:] = [np.asarray(r, np.int32) for r in feat["ids"]]
            w = None
            if feat["weights"] is not None:
                w = np.empty(len(feat["weights"]), dtype=object)
                w[:] = [np.asarray(r, np.float32) for r in feat["weights"]]
        else:
            ids = np.asarray(feat["ids"], np.int32)
            w = None if feat["weights"] is None else np.asarray(feat["weights"], np.float32)
        features.append(ids)
        any_weights |= w is not None
        weights.append(w)  # the stored cases give weights to every feature or to none
    preprocessed, _ = embedding.preprocess_sparse_dense_matmul_input(
        features, weights if any_weights else None, specs,
        local_device_count=case["local_device_count"],
        global_device_count=case["global_device_count"],
        num_sc_per_device=case["num_sc_per_device"], sharding_strategy="MOD",
        has_leading_dimension=case["has_leading_dimension"],
        allow_id_dropping=case["allow_id_dropping"],
        enable_minibatching=case["enable_minibatching"])
    csr = preprocessed.sparse_dense_matmul_input
    out = {}
    for stack_name in case["stacks"]:
        for array, got in zip(ARRAYS, (csr.lhs_row_pointers, csr.lhs_embedding_ids,
                                       csr.lhs_sample_ids, csr.lhs_gains), strict=True):
            out[f"{stack_name}/{array}"] = np.array(got[stack_name]).reshape(-1)
    return out


def _child() -> None:
    case = json.loads(sys.stdin.read())
    sys.stdout.buffer.write(pickle.dumps(_run_case(case)))


def _in_child(case: dict[str, Any], perturb: str | None) -> dict[str, np.ndarray]:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_PERTURB_"}
    env["JAX_PLATFORMS"] = "cpu"
    if perturb is not None:
        env["MALLOC_PERTURB_"] = perturb
    done = subprocess.run([sys.executable, __file__, "--child"], input=json.dumps(case).encode(),
                          capture_output=True, env=env, check=True)
    result: dict[str, np.ndarray] = pickle.loads(done.stdout)
    return result


def main() -> None:
    if sys.argv[1:] == ["--child"]:
        _child()
        return
    stored: dict[str, np.ndarray] = {}
    recorded: list[list[Any]] = []
    for name in CHOSEN:
        cases = _load(name)
        by_id = {c["id"]: c for c in cases}
        prefix = "c" if name.startswith("jte_preprocess_c") else "m"
        for cid in _choose(name, cases):
            runs = [_in_child(by_id[cid], p) for p in PERTURB]
            for key, first in runs[0].items():
                raw = [r[key].view(np.uint32) for r in runs]
                written = np.logical_and.reduce([raw[0] == r for r in raw[1:]])
                stack, array = key.rsplit("/", 1)
                base = f"{prefix}{cid}/{stack}/"
                stored[base + array] = first
                stored[base + array + "_written"] = np.packbits(written)
            recorded.append([name, cid])
            print(name, cid, flush=True)
    stored["cases"] = np.frombuffer(json.dumps(recorded).encode(), np.uint8)
    np.savez_compressed(HERE / "jte_csr_written.npz", **stored)
    print(f"wrote {len(recorded)} cases")


if __name__ == "__main__":
    main()
