"""Regenerate ``tests/data/checkpoints/reshard/``. RUN ONLY IN A TENSORFLOW VENV.

    /path/to/tf-venv/bin/python tools/tf_reference/reshard_pairs.py   (tensorflow-cpu 2.21)

Not a test and never imported by the suite; tpuemb does not depend on TensorFlow. For each pair
of SparseCore spec texts (written as ``checkpoint_pairs.spec`` writes them, run with the real
``TPUEmbeddingV2`` under ``checkpoint_pairs``' stand-in strategy: TensorFlow's own stacker gives
each side's layouts) it stores OLD's arrays and what TensorFlow 2.21's checkpoint adapter
functions make of them under NEW, called directly on tensors:

- ``reshard`` (both sides stacked): ``TpuEmbeddingV3CheckpointAdapter(OLD's layouts)``; when
  ``is_layouts_same`` holds (``adapter: false``) NEW is OLD as it is (the plain restore);
  otherwise ``initialize_reshard_callbacks(NEW's embedding_layouts)`` and, per NEW stack, its
  ``EmbeddingReshardCallback.reshard`` on the OLD stacks it names, called per partition with the
  slice spec a sharded variable's restore passes (``"rows dim offset,part:0,dim"``), the parts
  concatenated. Pairs TensorFlow's restore cannot carry out for lack of a variable name
  (stacking on/off, a table leaving a stack: CKPT003) still get the callback's arrays: this is
  the layout arithmetic, not the restore;
- ``unshard`` (NEW per-table): ``_unshard_from_sc_to_cpu`` of each OLD stack;
- ``shard`` (OLD per-table, NEW stacked): ``TpuEmbeddingV3CheckpointAdapter(None)``'s
  ``EmbeddingUnshardToShardCallback.reshard`` per NEW stack (tables in row-offset order), per
  partition.

OLD's stacked arrays hold a distinct value in every element, padding included (``-(row x width
+ column) - 1 - 1e5 x stack``, exact in float32), so NEW's arrays say which OLD element went
where; the ``random`` pairs use seeded normal floats instead. OLD's layouts are TensorFlow's
bytes (``layouts_hex``; the ``tf_2_20`` pair clears fields 10 and 11 as TensorFlow 2.20's stacker
leaves them). Written: ``pairs.json`` (the index) and ``arrays.npz`` (``ID:old:NAME``,
``ID:new:NAME``, float32, compressed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checkpoint_pairs as cp  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.core.tpu.kernels import sparse_core_layout_pb2  # noqa: E402
from tensorflow.python.tpu import tpu_embedding_v3_checkpoint_adapter as adapter_lib  # noqa: E402

OUT = cp.ROOT / "tests" / "data" / "checkpoints" / "reshard"
SGD = "SGD(learning_rate=0.1)"
BASE = [("user", 300, 8), ("item", 200, 8), ("cat", 100, 16)]
PADDED = [("user", 130, 8), ("item", 72, 8), ("geo", 130, 12), ("tag", 20, 4)]
MANY = [(f"t{i}", 40 + 24 * i, 8) for i in range(6)]
SUB = [("a", 96, 8), ("ab", 64, 8), ("b", 40, 16)]


def s(tables: list[tuple[Any, ...]], **kw: Any) -> str:
    return cp.spec(tables=tables, optimizer=kw.pop("optimizer", SGD), **kw)


def pairs() -> list[dict[str, Any]]:
    p: list[dict[str, Any]] = []

    def add(pid: str, title: str, kind: str, old: str, new: str, **extra: Any) -> None:
        p.append({"id": pid, "title": title, "kind": kind, "old": {"spec": old},
                  "new": {"spec": new}, **extra})

    base = s(BASE)
    add("identical", "the same configuration (no adapter: copied)", "reshard", base, base)
    for pid, old_t, new_t in [("v5p2_to_v5p4", "v5p:2", "v5p:4"),
                              ("v5p2_to_v6e4", "v5p:2", "v6e:4"),
                              ("v5p2_to_v6e2", "v5p:2", "v6e:2"),
                              ("v5p4_to_v5p2", "v5p:4", "v5p:2"),
                              ("v6e4_to_v5p2", "v6e:4", "v5p:2"),
                              ("v5p1_to_v5p4", "v5p:1", "v5p:4"),
                              ("v6e2_to_v5p4", "v6e:2", "v5p:4")]:
        add(f"topology_{pid}", f"topology {old_t} -> {new_t}", "reshard",
            s(BASE, topology=old_t), s(BASE, topology=new_t))
    add("stacking_off", "disable_table_stacking False -> True", "reshard", base,
        s(BASE, stacking=False))
    add("stacking_on", "disable_table_stacking True -> False", "reshard",
        s(BASE, stacking=False), base)
    add("stacking_off_topology", "stacking off and v5p:2 -> v6e:4", "reshard", base,
        s(BASE, stacking=False, topology="v6e:4"))
    add("table_leaves_stack", "item gets its own optimizer: it leaves the stack", "reshard", base,
        s(cp._with(BASE, "item", optimizer="SGD(learning_rate=0.2)")))
    feats = [("user", "user", 16), ("item", "item", 16), ("cat", "cat", 16)]
    add("table_order_list", "a list of features, user's first (num_features moves)", "reshard",
        s(BASE, container="list", features=list(reversed(feats))),
        s(BASE, container="list", features=feats))
    add("batch_first_feature", "the first feature's batch 16 -> 32 (layout fields only)",
        "reshard", base, s(BASE, features=[("cat", "cat", 32), ("item", "item", 16),
                                           ("user", "user", 16)]))
    add("tf_2_20_to_2_21", "a TensorFlow 2.20 checkpoint's layouts (fields 10, 11 unset) under "
        "2.21", "reshard", base, base, clear_old_fields=True)
    add("rotations_v5p2_to_v5p4", "six tables in one stack (rotations), v5p:2 -> v5p:4",
        "reshard", s(MANY), s(MANY, topology="v5p:4"))
    add("rotations_v5p2_to_v6e4", "six tables in one stack, v5p:2 -> v6e:4", "reshard",
        s(MANY), s(MANY, topology="v6e:4"))
    add("rotations_stacking_off", "six tables, stacking off, v5p:4 -> v6e:2", "reshard",
        s(MANY, topology="v5p:4"), s(MANY, topology="v6e:2", stacking=False))
    add("padding_v5p2_to_v6e2", "vocabularies and widths with padding, v5p:2 -> v6e:2",
        "reshard", s(PADDED), s(PADDED, topology="v6e:2"))
    add("padding_v6e2_to_v5p4", "padded tables, v6e:2 -> v5p:4", "reshard",
        s(PADDED, topology="v6e:2"), s(PADDED, topology="v5p:4"))
    add("substring_names", "tables a, ab, b, v5p:2 -> v6e:4", "reshard", s(SUB),
        s(SUB, topology="v6e:4"))
    add("random_values", "seeded normal floats, v5p:2 -> v5p:4", "reshard", base,
        s(BASE, topology="v5p:4"), random=True)
    add("unshard_base", "the stacks unsharded to per-table arrays (v5p:2)", "unshard", base, base)
    add("unshard_v6e4", "unsharded from v6e:4", "unshard", s(BASE, topology="v6e:4"),
        s(BASE, topology="v6e:4"))
    add("unshard_rotations", "six tables unsharded from v5p:4", "unshard",
        s(MANY, topology="v5p:4"), s(MANY, topology="v5p:4"))
    add("unshard_padding", "padded tables unsharded from v5p:4", "unshard",
        s(PADDED, topology="v5p:4"), s(PADDED, topology="v5p:4"))
    add("shard_base", "per-table arrays sharded into v5p:2's stacks", "shard", base, base)
    add("shard_v6e4", "per-table arrays into v6e:4", "shard", s(BASE, topology="v6e:4"),
        s(BASE, topology="v6e:4"))
    add("shard_rotations", "six tables into one v5p:4 stack", "shard", s(MANY, topology="v5p:4"),
        s(MANY, topology="v5p:4"))
    add("shard_padding", "padded tables into v6e:2", "shard", s(PADDED, topology="v6e:2"),
        s(PADDED, topology="v6e:2"))
    add("shard_stacking_off", "per-table arrays into v5p:2 with stacking off", "shard",
        s(BASE, stacking=False), s(BASE, stacking=False))
    return p


def layouts_message(emb: Any, clear: bool = False) -> Any:
    message = sparse_core_layout_pb2.SparseCoreTableLayouts()
    message.tables.extend(emb.embedding_layouts.values())
    if clear:
        for layout in message.tables:
            layout.ClearField("per_sparse_core_batch_size")
            layout.ClearField("num_features")
    return message


def per_partition(callback: Any, values: Any, layouts: list[Any]) -> np.ndarray:
    first = layouts[0]
    rows = first.total_rows_per_sparse_core_shard * first.num_sparse_cores
    dim = first.unsharded_padded_shape[1]
    part = rows // first.num_partitions
    out = [callback.reshard(values, f"{rows} {dim} {p * part},{part}:0,{dim}").numpy()
           for p in range(first.num_partitions)]
    return np.concatenate(out, axis=0)


def old_stacked(pair: dict[str, Any], stacks: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    out = {}
    for k, (name, layouts) in enumerate(sorted(stacks.items())):
        first = layouts[0]
        shape = (first.total_rows_per_sparse_core_shard * first.num_sparse_cores,
                 first.unsharded_padded_shape[1])
        if pair.get("random"):
            out[name] = np.random.default_rng(k).standard_normal(shape).astype(np.float32)
        else:
            out[name] = (-np.arange(shape[0] * shape[1]).reshape(shape) - 1
                         - 100_000 * k).astype(np.float32)
    return out


def run_pair(pair: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    old = cp.construct(pair["old"]["spec"])
    new = cp.construct(pair["new"]["spec"])
    old_stacks, new_stacks = cp.stacks(old), cp.stacks(new)
    new_values: dict[str, np.ndarray] = {}
    kind = pair["kind"]
    if kind == "shard":
        old_values = {t.table_name: (-np.arange(t.unsharded_shape[0] * t.unsharded_shape[1])
                                     .reshape(tuple(t.unsharded_shape)) - 1
                                     - 100_000 * i).astype(np.float32)
                      for i, t in enumerate(sorted(old.embedding_layouts.values(),
                                                   key=lambda t: t.table_name))}
        pair["old"]["layouts_hex"] = None
        pair["old"]["tables"] = {n: list(v.shape) for n, v in old_values.items()}
        adapter = adapter_lib.TpuEmbeddingV3CheckpointAdapter(None)
        adapter.initialize_reshard_callbacks(new.embedding_layouts)
        for stack, layouts in new_stacks.items():
            callback = adapter.get_reshard_callback(layouts[0].table_name)
            values = [tf.constant(old_values[t.table_name]) for t in layouts]
            new_values[stack] = per_partition(callback, values, layouts)
        pair["adapter"] = True
        pair["tf_call"] = "EmbeddingUnshardToShardCallback.reshard"
    else:
        message = layouts_message(old, pair.pop("clear_old_fields", False))
        pair["old"]["layouts_hex"] = message.SerializeToString().hex()
        old_values = old_stacked(pair, old_stacks)
        if kind == "unshard":
            for stack, layouts in old_stacks.items():
                tables = adapter_lib._unshard_from_sc_to_cpu(tf.constant(old_values[stack]),
                                                             layouts)
                for value, layout in zip(tables, layouts, strict=True):
                    new_values[layout.table_name] = value.numpy()
            pair["adapter"] = True
            pair["tf_call"] = "_unshard_from_sc_to_cpu"
        else:
            adapter = adapter_lib.TpuEmbeddingV3CheckpointAdapter(message)
            if adapter.is_layouts_same(new.embedding_layouts):
                pair["adapter"] = False
                pair["tf_call"] = "none (is_layouts_same: the plain restore)"
                new_values = dict(old_values)
            else:
                pair["adapter"] = True
                pair["tf_call"] = "EmbeddingReshardCallback.reshard"
                adapter.initialize_reshard_callbacks(new.embedding_layouts)
                for stack, layouts in new_stacks.items():
                    callback = adapter.get_reshard_callback(stack)
                    values = [tf.constant(old_values[name])
                              for name in callback._from_shard_layouts]
                    new_values[stack] = per_partition(callback, values, layouts)
    if kind == "unshard":
        pair["new"]["layouts_hex"] = None
        pair["new"]["tables"] = {n: list(v.shape) for n, v in sorted(new_values.items())}
    else:
        pair["new"]["layouts_hex"] = layouts_message(new).SerializeToString().hex()
    for name, value in old_values.items():
        arrays[f"{pair['id']}:old:{name}"] = value
    for name, value in new_values.items():
        arrays[f"{pair['id']}:new:{name}"] = value
    pair["old"]["arrays"] = sorted(old_values)
    pair["new"]["arrays"] = sorted(new_values)
    return pair


def main() -> None:
    cp._embedding_module()
    arrays: dict[str, np.ndarray] = {}
    done = []
    for pair in pairs():
        done.append(run_pair(pair, arrays))
        print(f"{pair['id']:28s} {pair['kind']:8s} adapter={pair['adapter']!s:5s} "
              f"{' '.join(pair['new']['arrays'])}", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / "arrays.npz", **arrays)
    document = {"tensorflow": tf.__version__, "generator": "tools/tf_reference/reshard_pairs.py",
                "pairs": done}
    (OUT / "pairs.json").write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
