"""Record TensorFlow 2.20's and 2.21's SparseCore stacking, for ``tests/data/diff/tf_versions/``.

Not a test and never imported by the suite or the package. Run it with any Python; it runs itself
once in each TensorFlow venv (throwaway environments, never dependencies of tpuemb)::

    python3 -m venv /tmp/tf220 && /tmp/tf220/bin/pip install 'tensorflow-cpu==2.20.*'
    python3 -m venv /tmp/tf221 && /tmp/tf221/bin/pip install 'tensorflow-cpu==2.21.*'
    python3 tools/tf_reference/gen_tf_versions.py --tf220 /tmp/tf220/bin/python \\
        --tf221 /tmp/tf221/bin/python

Each worker runs with ``PYTHONHASHSEED=0`` and writes what its TensorFlow did; the driver merges
the two into the files below. TensorFlow's group strings hash the optimizer's attribute dict,
whose ``None`` values hash by address on Python 3.11, so the strings differ from run to run even
then: they are stored renamed ``g0``, ``g1``, ... by first appearance in each case (which tables
share a group is what counts; no recorded set has two groups at one padded width, where the
strings would order the stacks).

- ``feeds.json``: table sets fed to each version's stacker **exactly as its TPUEmbeddingV2 feeds
  it**: the feature structure goes through ``TPUEmbeddingBase.__init__`` (table order, the global
  optimizer) and ``tpu_embedding_v3._stack_tables_with_same_table_dim_and_optimizer`` (the
  function ``TPUEmbeddingV2.__init__`` calls, with ``nest.flatten_with_joined_string_paths`` of
  the cloned feature structure), with ``_pywrap_sparse_core_layout.SparseCoreLayoutStacker``
  wrapped to record the constructor, every ``AddTable`` call and the bytes of ``GetLayouts()``
  (``SerializeToString(deterministic=True)``). The table sets: the TensorFlow SparseCore specs of
  the repository (``SPECS``, read with ``tpuemb_cfg.embedding`` replaced by
  ``tf.tpu.experimental.embedding``), hand-made sets where the versions differ (``HAND``) and
  seeded random ones (``random_feeds``).
- ``stacker.json.gz``: the stacker called directly. ``replayed``: 2.20's bytes for the 300 table
  sets of ``tests/data/sparsecore/tf_stacker_cases.json.gz`` (2.21's are stored there; 2.20's
  ``AddTable`` takes no ``num_features``, so it is left out); ``boundaries``: both versions' bytes
  for totals at and just below each default limit.
- ``meta``: the versions, each binding's ``AddTable`` signature and each version's fields of
  ``SparseCoreTableLayout`` (number and name).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "diff" / "tf_versions"
RECORDED = ROOT / "tests" / "data" / "sparsecore" / "tf_stacker_cases.json.gz"

#: The repository's TensorFlow SparseCore specs, with the slice each names (TensorFlow: one
#: partition per chip, the chip's SparseCores per partition).
SPECS = [
    {"id": "example_v6e_dcnv2", "spec": "examples/sparsecore/v6e_dcnv2.py",
     "num_partitions": 64, "num_sc_per_partition": 2},           # topology = "v6e-64"
    {"id": "api_tf_spec", "spec": "tests/data/sparsecore/api_tf_spec.py",
     "num_partitions": 4, "num_sc_per_partition": 2},            # topology = "v6e-4"
]


def _table(name: str, vocabulary: int, dim: int, optimizer: str = "shared",
           combiner: str = "sum") -> dict[str, Any]:
    return {"name": name, "vocabulary_size": vocabulary, "dim": dim, "optimizer": optimizer,
            "combiner": combiner}


def _feature(name: str, table: str, shape: list[int]) -> dict[str, Any]:
    return {"name": name, "table": table, "output_shape": shape}


#: Hand-made sets: where the first feature (in flattened order: keys sorted) lands decides which
#: table 2.21 tells ``num_features=1`` and a batch size; a table of several features; stacking
#: off; an activation limit that keeps the first feature's table apart; v5p and TPU7x counts.
HAND = [
    {"id": "first_feature_table_sorts_last", "num_partitions": 4, "num_sc_per_partition": 2,
     "tables": [_table("a_small", 1000, 16), _table("b_mid", 50_000, 16),
                _table("z_big", 2_000_000, 16)],
     "features": [_feature("0_query", "z_big", [256]), _feature("1_doc", "a_small", [256]),
                  _feature("2_ctx", "b_mid", [256])]},
    {"id": "one_table_three_features", "num_partitions": 8, "num_sc_per_partition": 4,
     "tables": [_table("terms", 300_000, 32), _table("user", 1_000_000, 32)],
     "features": [_feature("a_title", "terms", [128, 8]), _feature("b_body", "terms", [128, 32]),
                  _feature("c_query", "terms", [128, 4]), _feature("d_user", "user", [128])]},
    {"id": "stacking_disabled", "num_partitions": 2, "num_sc_per_partition": 2,
     "disable_table_stacking": True,
     "tables": [_table("item", 10_000, 8), _table("user", 20_000, 8)],
     "features": [_feature("item", "item", [64]), _feature("user", "user", [64])]},
    {"id": "first_table_over_activation_limit", "num_partitions": 1, "num_sc_per_partition": 1,
     "tables": [_table("a", 100, 128), _table("b", 100, 128), _table("c", 100, 128)],
     "features": [_feature("a", "a", [4096]), _feature("b", "b", [4096]),
                  _feature("c", "c", [4096])]},
    {"id": "two_widths_two_optimizers", "num_partitions": 16, "num_sc_per_partition": 4,
     "tables": [_table("user", 5_000_000, 64), _table("item", 2_000_000, 64),
                _table("cat", 2_000, 16, "adam"), _table("dev", 64, 16, "adam")],
     "features": [_feature("cat", "cat", [512]), _feature("dev", "dev", [512]),
                  _feature("item", "item", [512]), _feature("user", "user", [512])]},
    {"id": "tpu7x_tensorflow_counts", "num_partitions": 8, "num_sc_per_partition": 4,
     "tables": [_table("q", 123_457, 24), _table("r", 77, 24), _table("s", 9_999, 40)],
     "features": [_feature("q", "q", [96, 3]), _feature("r", "r", [96]),
                  _feature("s", "s", [96])]},
    {"id": "batch_smaller_than_sparse_cores", "num_partitions": 2, "num_sc_per_partition": 4,
     "tables": [_table("a", 640, 8), _table("b", 640, 8)],
     "features": [_feature("a", "a", [3]), _feature("b", "b", [8])]},
]

_WIDTHS = [4, 8, 16, 24, 32, 64, 100, 128]
_VOCABULARIES = [1, 7, 100, 1000, 12_345, 250_000, 3_000_000]


def random_feeds(seed: int = 2037, count: int = 24) -> list[dict[str, Any]]:
    """Seeded table sets of one shared optimizer (one group per width, so the output order
    does not depend on the group strings)."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        partitions = rng.choice([1, 2, 4, 8, 16, 64])
        per = rng.choice([2, 4])
        batch = per * rng.choice([1, 4, 16, 64, 256])
        tables = [_table(f"t{j}_{rng.choice('abcxyz')}", rng.choice(_VOCABULARIES),
                         rng.choice(_WIDTHS)) for j in range(rng.randint(1, 7))]
        features = []
        for k in range(rng.randint(1, 9)):
            table = rng.choice(tables)["name"]
            shape = [batch] if rng.random() < 0.6 else [batch, rng.choice([2, 5, 20])]
            features.append(_feature(f"f{k:02d}_{rng.choice('mnpq')}", table, shape))
        used = {f["table"] for f in features}
        cases.append({"id": f"random_{i:02d}", "num_partitions": partitions,
                      "num_sc_per_partition": per,
                      "disable_table_stacking": rng.random() < 0.1,
                      "tables": [t for t in tables if t["name"] in used],
                      "features": features})
    return cases


#: Default limits (TensorFlow's flags): 2 MiB of activations, 2 GiB of shard, 2^31 - 1 rows.
#: Two tables of one SparseCore; the second joins exactly when the totals stay below.
BOUNDARIES = [
    ("activation_just_below", 8, 8, 32768, 32767),   # 4 x 8 x (32768 + 32767) = 2097120
    ("activation_at_limit", 8, 8, 32768, 32768),     # 2097152: refused
    ("shard_just_below", 33_554_176, 8, 0, 0),       # 2 x 4 x 8 x 33554176 = 2147467264
    ("shard_at_limit", 33_554_432, 8, 0, 0),         # 2147483648: refused
]


# -- the worker (inside a TensorFlow venv) --------------------------------------------------------

def _worker() -> dict[str, Any]:  # noqa: C901  (one recording harness)
    import tensorflow as tf
    from tensorflow.core.tpu.kernels import sparse_core_layout_pb2 as pb
    from tensorflow.python.tpu import _pywrap_sparse_core_layout as binding
    from tensorflow.python.tpu import tpu_embedding_base, tpu_embedding_v3
    from tensorflow.python.util import nest

    emb = tf.tpu.experimental.embedding
    version = tf.__version__
    takes_features = "num_features" in (binding.SparseCoreLayoutStacker.AddTable.__doc__ or "")
    real = binding.SparseCoreLayoutStacker
    log: list[Any] = []

    class Recorder:
        def __init__(self, **kwargs: Any) -> None:
            log.append(["__init__", kwargs])
            self._s = real(**kwargs)

        def AddTable(self, **kwargs: Any) -> None:  # noqa: N802
            log.append(["AddTable", kwargs])
            self._s.AddTable(**kwargs)

        def GetLayouts(self) -> Any:  # noqa: N802
            layouts = self._s.GetLayouts()
            log.append(["GetLayouts", layouts.SerializeToString(deterministic=True).hex()])
            return layouts

    def feed(feature_config: Any, optimizer: Any, sc_config: Any, partitions: int,
             per: int) -> dict[str, Any]:
        log.clear()
        base = tpu_embedding_base.TPUEmbeddingBase(
            tpu_embedding_v3._clone_feature_config(feature_config), optimizer)
        flat = nest.flatten_with_joined_string_paths(base._feature_config)
        binding.SparseCoreLayoutStacker = Recorder
        try:
            tpu_embedding_v3._stack_tables_with_same_table_dim_and_optimizer(
                base._table_config, flat, partitions, per, sc_config)
        finally:
            binding.SparseCoreLayoutStacker = real
        layouts = [entry[1] for entry in log if entry[0] == "GetLayouts"]
        calls = [entry for entry in log if entry[0] != "GetLayouts"]
        names: dict[str, str] = {}  # group strings renamed g0, g1, ... by first appearance
        for kind, arguments in calls:
            if kind == "AddTable":
                arguments["group"] = names.setdefault(arguments["group"], f"g{len(names)}")
        return {"calls": calls, "layouts_hex": layouts[-1]}

    def optimizer_of(kind: str, shared: Any) -> Any:
        return shared if kind == "shared" else {"adam": lambda: emb.Adam(learning_rate=0.01)}[
            kind]()

    feeds = {}
    stub = types.ModuleType("tpuemb_cfg.embedding")
    for name in ("Adagrad", "Adam", "FTRL", "SGD", "FeatureConfig", "TableConfig",
                 "QuantizationConfig"):
        setattr(stub, name, getattr(emb, name))
    stub.SparseCoreEmbeddingConfig = tpu_embedding_v3.SparseCoreEmbeddingConfig
    sys.modules["tpuemb_cfg"] = types.ModuleType("tpuemb_cfg")
    sys.modules["tpuemb_cfg.embedding"] = stub
    for case in SPECS:
        namespace: dict[str, Any] = {"__name__": "spec"}
        source = (ROOT / case["spec"]).read_text()
        exec(compile(source, case["spec"], "exec"), namespace)  # noqa: S102  (our own spec files)
        feeds[case["id"]] = feed(namespace["feature_config"], namespace.get("optimizer"),
                                 namespace.get("sparse_core_config"), case["num_partitions"],
                                 case["num_sc_per_partition"])
    for case in HAND + random_feeds():
        shared = emb.Adagrad(learning_rate=0.1)
        tables = {t["name"]: emb.TableConfig(
            vocabulary_size=t["vocabulary_size"], dim=t["dim"], name=t["name"],
            optimizer=optimizer_of(t["optimizer"], shared), combiner=t["combiner"])
            for t in case["tables"]}
        structure = {f["name"]: emb.FeatureConfig(tables[f["table"]], name=f["name"],
                                                  output_shape=f["output_shape"])
                     for f in case["features"]}
        sc_config = tpu_embedding_v3.SparseCoreEmbeddingConfig(
            disable_table_stacking=case.get("disable_table_stacking", False))
        feeds[case["id"]] = feed(structure, shared, sc_config, case["num_partitions"],
                                 case["num_sc_per_partition"])

    def run(constructor: dict[str, Any], setters: list[Any], tables: list[dict[str, Any]]) -> str:
        s = real(**constructor)
        for method, value in setters:
            getattr(s, method)(value)
        for table in tables:
            s.AddTable(**{k: v for k, v in table.items()
                          if k != "num_features" or takes_features})
        return base64.b64encode(s.GetLayouts().SerializeToString(deterministic=True)).decode()

    replayed = []
    if not takes_features:
        recorded = json.loads(gzip.decompress(RECORDED.read_bytes()))["cases"]
        replayed = [{"id": c["id"], "layouts_b64": run(c["constructor"], c["setters"],
                                                       c["tables"])} for c in recorded]
    boundaries = {}
    for name, height, width, samples_a, samples_b in BOUNDARIES:
        tables = [{"table_name": t, "table_height": height, "table_width": width, "group": "g",
                   "output_samples": s, "num_features": 1}
                  for t, s in (("a", samples_a), ("b", samples_b))]
        boundaries[name] = run({"num_partitions": 1, "disable_table_stacking": False,
                                "sparse_cores_per_partition": 1}, [], tables)
    return {
        "tensorflow": version, "protobuf": __import__("google.protobuf").protobuf.__version__,
        "python": sys.version.split()[0],
        "add_table_signature": binding.SparseCoreLayoutStacker.AddTable.__doc__.splitlines()[0],
        "layout_fields": [[f.number, f.name] for f in pb.SparseCoreTableLayout.DESCRIPTOR.fields],
        "feeds": feeds, "replayed": replayed, "boundaries": boundaries,
    }


# -- the driver ----------------------------------------------------------------------------------

def _run_worker(python: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        env = dict(os.environ, PYTHONHASHSEED="0", TF_CPP_MIN_LOG_LEVEL="3")
        subprocess.run([python, __file__, "--worker", str(out)], check=True, env=env)
        result: dict[str, Any] = json.loads(out.read_text())
        return result


def _short(version: str) -> str:
    return ".".join(version.split(".")[:2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tf220", help="python of a venv with tensorflow-cpu 2.20")
    parser.add_argument("--tf221", help="python of a venv with tensorflow-cpu 2.21")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        Path(args.worker).write_text(json.dumps(_worker()))
        return
    runs = {}
    for python in (args.tf220, args.tf221):
        result = _run_worker(python)
        runs[_short(result["tensorflow"])] = result
    assert sorted(runs) == ["2.20", "2.21"], sorted(runs)
    meta = {v: {k: r[k] for k in ("tensorflow", "protobuf", "python", "add_table_signature",
                                  "layout_fields")} for v, r in runs.items()}
    meta["PYTHONHASHSEED"] = "0"
    meta["generator"] = "tools/tf_reference/gen_tf_versions.py"
    cases = []
    for case in SPECS + HAND + random_feeds():
        cases.append({**case, "expected": {v: r["feeds"][case["id"]] for v, r in runs.items()}})
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "feeds.json").write_text(json.dumps({"meta": meta, "cases": cases}, indent=1,
                                               sort_keys=True) + "\n")
    stacker = {"meta": meta, "replayed_2.20": runs["2.20"]["replayed"],
               "boundaries": [{"id": name, "height": h, "width": w, "samples": [a, b],
                               "expected": {v: r["boundaries"][name] for v, r in runs.items()}}
                              for name, h, w, a, b in BOUNDARIES]}
    data = json.dumps(stacker, sort_keys=True, separators=(",", ":")).encode()
    with open(OUT / "stacker.json.gz", "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(data)
    print(f"wrote {len(cases)} feeds and {len(stacker['replayed_2.20'])} replayed stacker cases "
          f"to {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
