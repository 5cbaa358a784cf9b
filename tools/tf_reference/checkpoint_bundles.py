"""Regenerate ``tests/data/checkpoints/``. RUN ONLY IN A TENSORFLOW VENV, from the repository root:

    PYTHONPATH=$PWD /path/to/tf-venv/bin/python tools/tf_reference/checkpoint_bundles.py
    (tensorflow-cpu 2.21)

Not a test and never imported by the suite; tpuemb does not depend on TensorFlow. It stores
checkpoints in TensorFlow's format and what TensorFlow reads from them, so that
``tests/test_checkpoint_bundle.py`` proves both directions without TensorFlow:

1. **written by TensorFlow** (``tf/``): ``tf.train.Checkpoint(embedding=...).write`` of
   - ``mid_level``: a ``TPUEmbeddingForServing`` (the mid-level API's variables: per table
     ``table`` and ``table/slot``), Adam, two tables;
   - ``sparsecore``: a ``TPUEmbeddingV2`` built on a CPU under ``checkpoint_pairs``' stand-in
     strategy (v5p, 2 chips; stacked variables, their Adagrad slots and the
     ``_sparse_core_table_layouts`` string), every variable given known values;
   - ``wide_index``: 100 scalars under 3000-character names (an index of two data blocks);
   - ``dtypes``: a ``tf.Module`` of variables of several dtypes and shapes (float64, int32,
     int64, float16, bool, uint8, uint16, a 0 x 4 and a 3 x 5 x 7 tensor, a scalar, a string
     vector with an empty element);
   with ``NAME.npz``: every tensor as ``tf.train.load_checkpoint`` reads it (strings as a JSON
   list of hex in ``tf.json``, key ``strings``).
2. **written by tpuemb** (``tpuemb/``): ``tpuemb_cfg.formats.bundle.write_object_checkpoint`` of
   the same values (``mid_level``, ``sparsecore``, ``dtypes``), then read by TensorFlow:
   ``tf.train.load_checkpoint`` (every tensor's SHA-256 of its C-order bytes, or of its strings
   joined with their lengths) and ``tf.train.Checkpoint(embedding=obj).read(prefix)
   .assert_consumed()`` (``read``: the counterpart of ``write``; ``restore``'s
   ``assert_consumed`` would also expect the ``save_counter`` that ``save`` writes) and
   ``.restore(prefix)``, each into a freshly built object of the same kind: the
   SHA-256 of every restored variable stored in ``tpuemb.json``. The suite re-writes each with
   today's tpuemb and compares the bytes with the stored files, which TensorFlow read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import checkpoint_pairs as pairs  # noqa: E402

# checkpoint_pairs replaces sys.modules["tpuemb_cfg"] by a stand-in for its spec texts when main()
# calls _embedding_module(): every tpuemb module used here is imported before that.
import google.protobuf.message  # noqa: E402, F401
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tpuemb_cfg.formats.bundle as bundle  # noqa: E402
import tpuemb_cfg.formats.sstable  # noqa: E402, F401
import tpuemb_cfg.proto.tensor_bundle_pb2  # noqa: E402, F401
import tpuemb_cfg.proto.trackable_object_graph_pb2  # noqa: E402, F401

OUT = ROOT / "tests" / "data" / "checkpoints"
SGD = "SGD(learning_rate=0.1)"


def digest(value: Any) -> str:
    if isinstance(value, np.ndarray) and value.dtype.kind in "OS":
        items = [bytes(v) for v in value.reshape(-1)]
        return hashlib.sha256(b"".join(len(i).to_bytes(8, "little") + i for i in items)
                              ).hexdigest()
    value = np.ascontiguousarray(value)
    return hashlib.sha256(value.tobytes()).hexdigest()


def shrink(name: str, case: dict[str, Any]) -> dict[str, Any]:
    """``wide_index``'s maps of 3000-character keys, each as the SHA-256 of its sorted
    ``key=value`` lines (``summary`` in tests/test_checkpoint_bundle.py)."""
    if name != "wide_index":
        return case
    return {k: summary(v) if isinstance(v, dict) and len(v) > 50 else v
            for k, v in case.items()}


def summary(mapping: dict[str, Any]) -> str:
    lines = "".join(f"{k}={json.dumps(v)}\n" for k, v in sorted(mapping.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def values_of(prefix: str) -> dict[str, Any]:
    reader = tf.train.load_checkpoint(prefix)
    out = {}
    for key in sorted(reader.get_variable_to_shape_map()):
        value = reader.get_tensor(key)
        out[key] = np.array(value, dtype=object) if isinstance(value, bytes) else value
    return out


# -- the objects ---------------------------------------------------------------------------------

MID_LEVEL = pairs.spec(tables=[("user", 16, 4), ("item", 24, 8)], optimizer="Adam()",
                       title="mid-level API: two tables, Adam")
SPARSECORE = pairs.spec(tables=[("user", 64, 8), ("item", 128, 8), ("cat", 32, 16)],
                        title="TPUEmbeddingV2: two stacks on a v5p with 2 chips, Adagrad")


def mid_level() -> Any:
    emb = pairs.construct(MID_LEVEL, "TPUEmbeddingForServing")
    pairs.fill(emb, "TPUEmbeddingForServing")
    return emb


def sparsecore() -> Any:
    emb = pairs.construct(SPARSECORE)
    pairs.fill(emb, "TPUEmbeddingV2")
    return emb


DTYPE_VALUES = {
    "f64": np.linspace(-1, 1, 6).reshape(2, 3),
    "i32": np.arange(-5, 5, dtype=np.int32),
    "i64": np.array([[2**40, -(2**40)], [1, -1]], dtype=np.int64),
    "f16": np.array([0.5, -2.0, 65504.0], dtype=np.float16),
    "flag": np.array([True, False, True]),
    "u8": np.arange(250, 256, dtype=np.uint8),
    "u16": np.array([1, 65535], dtype=np.uint16),
    "empty": np.zeros((0, 4), dtype=np.float32),
    "odd": np.arange(105, dtype=np.float32).reshape(3, 5, 7) / 7,
    "scalar": np.array(3.25, dtype=np.float32),
    "words": np.array([b"alpha", b"", b"\x00\xff" * 3], dtype=object),
}


def dtypes_module() -> Any:
    module = tf.Module()
    for name, value in DTYPE_VALUES.items():
        module._track_trackable(tf.Variable(value, name=name), name=name)
    return module


#: 100 scalars under 3000-character names: an index of about 300 KB, so more than one data block
#: of 262144 bytes (the index block's separators, FindShortestSeparator / FindShortSuccessor).
WIDE_NAMES = [f"v{i:03d}_" + "x" * 3000 for i in range(100)]


def wide_module() -> Any:
    module = tf.Module()
    for i, name in enumerate(WIDE_NAMES):
        module._track_trackable(tf.Variable(np.float32(i) / 3, name=name), name=name)
    return module


OBJECTS = {"mid_level": mid_level, "sparsecore": sparsecore, "dtypes": dtypes_module,
           "wide_index": wide_module}


def fresh(name: str) -> tuple[Any, dict[str, Any]]:
    """A fresh object of case ``name`` (values unlike the checkpoint's) and its variables by
    local name (a SparseCore variable: the list of its shards)."""
    if name in ("wide_index", "dtypes"):
        obj = tf.Module()
        values = ({key: np.float32(-1) for key in WIDE_NAMES} if name == "wide_index"
                  else DTYPE_VALUES)
        for key, value in values.items():
            value = np.asarray(value)
            if name == "wide_index":
                blank = value  # -1: no stored value (i / 3) is negative
            elif value.dtype == object:
                blank = np.array([b"?"] * value.size, dtype=object).reshape(value.shape)
            else:
                blank = np.zeros_like(value)
            obj._track_trackable(tf.Variable(blank, name=key), name=key)
        return obj, {key: obj._lookup_dependency(key) for key in values}
    saved_by = "TPUEmbeddingForServing" if name == "mid_level" else "TPUEmbeddingV2"
    obj = pairs.construct(MID_LEVEL if name == "mid_level" else SPARSECORE, saved_by)
    obj.build()
    return obj, {pairs.var_name(owner, slot): var for owner, variables in obj._variables.items()
                 for slot, var in variables.items()}


def restore_digests(name: str, prefix: str) -> dict[str, str]:
    """``prefix`` restored into fresh objects of case ``name`` twice: ``read(prefix)
    .assert_consumed()`` (every checkpoint value used, every variable matched) and
    ``restore(prefix)``; the digest of every variable, the same both ways (else this raises)."""
    results = []
    for how in ("read", "restore"):
        obj, variables = fresh(name)
        status = getattr(tf.train.Checkpoint(embedding=obj), how)(prefix)
        if how == "read":
            status.assert_consumed()
        else:
            status.assert_nontrivial_match()
        results.append({key: digest(tf.concat([v.read_value() for v in var.values], 0).numpy()
                                    if hasattr(var, "values") else var.numpy())
                        for key, var in variables.items()})
    if results[0] != results[1]:
        raise AssertionError(f"{name}: read() and restore() restored different values")
    return results[0]


def tpuemb_write(name: str, tf_prefix: str, prefix: str) -> None:
    """The tpuemb checkpoint of case ``name``: the values TensorFlow saved, by local name."""
    with bundle.BundleReader(tf_prefix) as reader:
        paths = reader.variables()
        variables, strings = {}, {}
        for path, key in paths.items():
            local = path.split("/", 1)[1]
            value = reader.read(key)
            if isinstance(value, list):
                if reader.entry(key).shape == ():
                    strings[local] = value[0]
                else:
                    variables[local] = np.array(value, dtype=object).reshape(
                        reader.entry(key).shape)
            else:
                variables[local] = value
    bundle.write_object_checkpoint(prefix, variables, strings=strings)


def main() -> None:
    pairs._embedding_module()
    for folder in ("tf", "tpuemb"):  # the README stays
        shutil.rmtree(OUT / folder, ignore_errors=True)
    (OUT / "tf").mkdir(parents=True)
    (OUT / "tpuemb").mkdir(parents=True)
    tf_meta: dict[str, Any] = {"tensorflow": tf.__version__,
                               "generator": "tools/tf_reference/checkpoint_bundles.py",
                               "specs": {"mid_level": MID_LEVEL, "sparsecore": SPARSECORE},
                               "cases": {}}
    ours: dict[str, Any] = {"tensorflow": tf.__version__,
                            "generator": "tools/tf_reference/checkpoint_bundles.py",
                            "cases": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for name, make in OBJECTS.items():
            obj = make()
            prefix = tf.train.Checkpoint(embedding=obj).write(str(OUT / "tf" / name))
            values = values_of(prefix)
            arrays = {k: v for k, v in values.items() if v.dtype != object}
            strings = {k: [bytes(s).hex() for s in np.asarray(v).reshape(-1)]
                       for k, v in values.items() if v.dtype == object}
            if name != "wide_index":  # its values are i / 3 (float32); its keys are long
                np.savez(OUT / "tf" / f"{name}.npz", **arrays)
            graph = strings.pop(bundle.OBJECT_GRAPH_KEY)
            tf_meta["cases"][name] = shrink(name, {
                "shapes": {k: list(np.shape(v)) for k, v in values.items()},
                "dtypes": {k: np.asarray(v).dtype.name for k, v in values.items()},
                "strings": strings,
                "object_graph_sha256": hashlib.sha256(bytes.fromhex(graph[0])).hexdigest()})
            # wide_index: tpuemb's bytes are TensorFlow's (checked below), not stored twice
            ours_prefix = str((Path(scratch) if name == "wide_index" else OUT / "tpuemb") / name)
            tpuemb_write(name, prefix, ours_prefix)
            read = values_of(ours_prefix)
            ours["cases"][name] = shrink(name, {
                "load_checkpoint": {k: digest(np.asarray(v)) for k, v in read.items()
                                    if k != "_CHECKPOINTABLE_OBJECT_GRAPH"},
                "restore": restore_digests(name, ours_prefix),
                "same_bytes_as_tensorflow": {
                    suffix: (Path(prefix + suffix).read_bytes()
                             == Path(ours_prefix + suffix).read_bytes())
                    for suffix in (".index", ".data-00000-of-00001")}})
            print(name, ours["cases"][name]["same_bytes_as_tensorflow"], flush=True)
    (OUT / "tf.json").write_text(json.dumps(tf_meta, indent=1) + "\n")
    (OUT / "tpuemb.json").write_text(json.dumps(ours, indent=1) + "\n")


if __name__ == "__main__":
    main()
