"""Regenerate ``tests/data/diff/breaking/cases.json``. RUN ONLY IN A TENSORFLOW VENV.

    /path/to/tf-venv/bin/python tools/tf_reference/checkpoint_pairs.py   (tensorflow-cpu 2.21)

Not a test and never imported by the suite; tpuemb does not depend on TensorFlow. For each pair
of SparseCore spec texts (OLD, NEW; written with ``tpuemb_cfg.embedding`` names, which mirror
``tf.tpu.experimental.embedding``) it asks TensorFlow 2.21 itself what a checkpoint written under
OLD does when it is restored under NEW:

1. each spec text runs with ``tpuemb_cfg.embedding`` bound to TensorFlow's classes
   (``TableConfig``, ``FeatureConfig``, ``SGD``, ``Adagrad``, ``Adam``, ``FTRL``,
   ``SparseCoreEmbeddingConfig``); every table's initializer is then set to a constant -1 so
   that a value nobody restored is recognisable;
2. the real ``tpu_embedding_v3.TPUEmbeddingV2`` is constructed under a stand-in
   ``TPUStrategyV2`` that reports the topology's chips (``num_replicas_in_sync``, the
   partitions), SparseCores per chip (``tpu_hardware_feature.num_embedding_devices_per_chip``)
   and one CPU device per chip: its own stacking (``_pywrap_sparse_core_layout
   .SparseCoreLayoutStacker``), its own ``build()`` (``TPUEmbeddingShardedVariable`` per stacked
   table and slot, the layouts trackable ``_sparse_core_table_layouts``);
3. OLD's variables get known values: per table and variable (parameters, each slot) a seeded
   random float32 matrix of the table's shape, placed into the stacked variable by TensorFlow's
   own ``tpu_embedding_v3_checkpoint_adapter._shard_from_cpu_to_sc`` (row ``r`` of a table on
   SparseCore ``(r mod N + rotation) mod N`` at ``row_offset + r div N``);
   ``tf.train.Checkpoint(embedding=OLD).write`` saves it (the attribute is the pair's ``root``);
   an OLD marked ``"saved_by": "TPUEmbeddingForServing"`` is saved on the CPU by
   ``tpu_embedding_for_serving.TPUEmbeddingForServing`` instead (one unsharded variable per table
   and slot, no layouts: the mid-level API's names, ``tpu_embedding_base._create_variables``),
   and a NEW marked ``"restored_by": "TPUEmbeddingForServing"`` is restored into one (the
   legacy pairs: no adapter, TensorFlow's plain restore);
4. NEW is constructed the same way and ``tf.train.Checkpoint(embedding=NEW).restore(path)`` runs
   **before** ``NEW.build()`` (restore-on-create: the only path where
   ``TPUEmbeddingV2._checkpoint_adapter`` reshards; ``restore.py``
   ``_queue_children_for_restoration`` gives a callback only to checkpoint children with no
   variable yet); every NEW variable is read back, unsharded per NEW's layouts with TensorFlow's
   ``_unshard_from_sc_to_cpu`` and compared with OLD's values of the same table and variable.
   The same restore is also run after ``build()`` (``after_build``: TensorFlow then restores
   the variables as they are, with no adapter).

Outcome (``outcome``): ``restores`` (the adapter is not applicable: ``is_applicable`` False; every
value OLD had arrives unchanged), ``reshards`` (the adapter is applied and every value OLD had
arrives, per table, padding aside), ``fails`` (an exception: ``error`` holds its type and first
line), ``wrong`` (no exception, but some value OLD had is not in NEW: not restored, or moved).
Per NEW variable and table, ``values`` says ``equal`` (OLD's), ``initial`` (NEW's initializer:
nothing restored it), ``new`` (OLD had no such variable; NEW's initializer) or ``differs``.

Kept per pair: ``id``, ``title``, ``covers``, ``root``, ``old``/``new`` (``spec``: the text,
``saved_by`` / ``restored_by``, ``layouts_hex``: the bytes TPUEmbeddingV2 saves under
``_sparse_core_table_layouts`` (its ``embedding_layouts`` in table-name order,
``SerializeToString()``), ``variables``: name -> shape of its variables, ``keys``: the
checkpoint's keys (OLD only)), ``adapter`` (``not_applicable``, ``applied`` or ``error``: what
``is_applicable`` says of NEW), ``outcome``, ``error``, ``values``, ``after_build`` (the same
restore after ``build()``: its ``outcome`` (never ``reshards``), ``error`` and ``values``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import google.protobuf  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import logging as absl_logging  # noqa: E402
from tensorflow.core.tpu.kernels import sparse_core_layout_pb2  # noqa: E402
from tensorflow.python.distribute import tpu_strategy  # noqa: E402
from tensorflow.python.tpu import tpu_embedding_for_serving as serving  # noqa: E402
from tensorflow.python.tpu import tpu_embedding_v3 as v3  # noqa: E402
from tensorflow.python.tpu import tpu_embedding_v3_checkpoint_adapter as adapter_lib  # noqa: E402

absl_logging.set_verbosity(absl_logging.FATAL)
tf.get_logger().setLevel("FATAL")

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "diff" / "breaking" / "cases.json"
EMB = tf.tpu.experimental.embedding
#: TensorFlow's own ``get_strategy`` (the stand-in replaces it while a TPUEmbeddingV2 is built).
DEFAULT_STRATEGY = v3.distribute_lib.get_strategy

#: The topologies the pairs use: (chips = TensorFlow's partitions, SparseCores per chip), as
#: Cloud TPU documents them (v5p: 4 SparseCores per chip, v6e: 2); written ``KIND:CHIPS``.
TOPOLOGIES = {"v5p:1": (1, 4), "v5p:2": (2, 4), "v5p:4": (4, 4), "v6e:2": (2, 2),
              "v6e:4": (4, 2)}

# -- the spec texts ----------------------------------------------------------------------------


def spec(*, topology: str = "v5p:2", optimizer: str = "Adagrad(learning_rate=0.1)",
         tables: list[tuple[Any, ...]], features: list[tuple[str, str, int]] | None = None,
         container: str = "dict", stacking: bool = True, title: str = "") -> str:
    """A TensorFlow SparseCore spec: ``tables`` are (name, vocabulary, dim[, optimizer
    expression]); ``features`` (key, table, batch), default one feature per table named as it
    with a batch of 16."""
    if features is None:
        features = [(t[0], t[0], 16) for t in tables]
    names = sorted({expr.split("(")[0] for expr in [optimizer] + [t[3] for t in tables
                                                                 if len(t) > 3]}
                   | {"FeatureConfig", "SparseCoreEmbeddingConfig", "TableConfig"})
    lines = [f'"""{title}"""', "", f"from tpuemb_cfg.embedding import {', '.join(names)}", "",
             f'topology = "{topology}"', f"optimizer = {optimizer}", ""]
    for t in tables:
        own = f", optimizer={t[3]}" if len(t) > 3 else ""
        lines.append(f"{_var(t[0])} = TableConfig(vocabulary_size={t[1]}, dim={t[2]}, "
                     f'name="{t[0]}", combiner="sum"{own})')
    lines.append("")
    if container == "dict":
        lines.append("feature_config = {")
        lines += [f'    "{k}": FeatureConfig({_var(t)}, output_shape=[{b}]),'
                  for k, t, b in features]
        lines.append("}")
    else:
        lines.append("feature_config = [")
        lines += [f"    FeatureConfig({_var(t)}, output_shape=[{b}], name=\"{k}\"),"
                  for k, t, b in features]
        lines.append("]")
    lines.append(f"sparse_core_config = SparseCoreEmbeddingConfig("
                 f"disable_table_stacking={not stacking})")
    return "\n".join(lines) + "\n"


def _var(table: str) -> str:
    return f"t_{table}"


BASE = [("user", 64, 8), ("item", 128, 8), ("cat", 32, 16)]


def _with(tables: list[tuple[Any, ...]], table: str, **change: Any) -> list[tuple[Any, ...]]:
    out = []
    for t in tables:
        if t[0] == table:
            row = list(t)
            if "vocab" in change:
                row[1] = change["vocab"]
            if "dim" in change:
                row[2] = change["dim"]
            if "optimizer" in change:
                row = row[:3] + [change["optimizer"]]
            if "name" in change:
                row[0] = change["name"]
            t = tuple(row)
        out.append(t)
    return out


def pairs() -> list[dict[str, Any]]:
    """The OLD/NEW pairs and what each covers."""
    sgd = "SGD(learning_rate=0.1)"
    p: list[dict[str, Any]] = []

    def add(pid: str, title: str, covers: str, old: str, new: str,
            saved_by: str = "TPUEmbeddingV2", root: str = "embedding",
            restored_by: str = "TPUEmbeddingV2") -> None:
        p.append({"id": pid, "title": title, "covers": covers, "root": root,
                  "old": {"spec": old, "saved_by": saved_by},
                  "new": {"spec": new, "restored_by": restored_by}})

    base = spec(tables=BASE, title="base: two stacks on a v5p with 2 chips")
    base_sgd = spec(tables=BASE, optimizer=sgd, title="base, SGD (no slots)")
    add("identical", "the same configuration", "identical", base, base)
    add("identical_sgd", "the same configuration, SGD", "identical", base_sgd, base_sgd)
    feats32 = [("cat", "cat", 32), ("item", "item", 16), ("user", "user", 16)]
    add("batch_first_feature", "the batch of the first feature (cat) 16 -> 32",
        "batch size change only", base_sgd,
        spec(tables=BASE, optimizer=sgd, features=feats32))
    add("batch_first_feature_adagrad", "the batch of the first feature 16 -> 32, Adagrad",
        "batch size change only (slots)", base,
        spec(tables=BASE, features=feats32))
    add("batch_other_feature", "the batch of a feature other than the first (user) 16 -> 32",
        "batch size change only",
        base, spec(tables=BASE, features=[("cat", "cat", 16), ("item", "item", 16),
                                          ("user", "user", 32)]))
    add("table_added_to_stack", "a table 'query' (64 x 8) joins the stack of user and item",
        "table added to a stack", base, spec(tables=BASE + [("query", 64, 8)]))
    add("table_removed", "table 'item' removed", "table removed", base,
        spec(tables=[t for t in BASE if t[0] != "item"]))
    add("table_renamed", "table 'user' renamed 'users'", "table renamed", base,
        spec(tables=_with(BASE, "user", name="users"),
             features=[("cat", "cat", 16), ("item", "item", 16), ("user", "users", 16)]))
    add("vocab_grown_in_stack", "item 128 -> 256 rows, inside the stack with user",
        "vocabulary grown inside a stack", base_sgd,
        spec(tables=_with(BASE, "item", vocab=256), optimizer=sgd))
    add("vocab_shrunk_in_stack", "item 128 -> 64 rows, inside the stack with user",
        "vocabulary shrunk inside a stack", base_sgd,
        spec(tables=_with(BASE, "item", vocab=64), optimizer=sgd))
    add("vocab_changes_cancel", "user 64 -> 56 and item 128 -> 136 rows in one stack: the "
        "resharded sizes add up to NEW's", "vocabulary grown and shrunk inside a stack",
        base_sgd, spec(tables=_with(_with(BASE, "user", vocab=56), "item", vocab=136),
                       optimizer=sgd))
    add("vocab_grown_alone", "cat 32 -> 64 rows, alone in its stack", "vocabulary grown alone",
        base_sgd, spec(tables=_with(BASE, "cat", vocab=64), optimizer=sgd))
    add("vocab_shrunk_alone", "cat 32 -> 16 rows, alone in its stack", "vocabulary shrunk alone",
        base_sgd, spec(tables=_with(BASE, "cat", vocab=16), optimizer=sgd))
    add("vocab_within_padding", "user 64 -> 60 rows (its padded rows stay 64)",
        "vocabulary changed inside the padding", base_sgd,
        spec(tables=_with(BASE, "user", vocab=60), optimizer=sgd))
    add("dim_changed_alone", "cat's width 16 -> 24, alone in its stack", "dim change", base_sgd,
        spec(tables=_with(BASE, "cat", dim=24), optimizer=sgd))
    add("dim_changed_moves_stack", "cat's width 16 -> 8: it joins the stack of user and item",
        "dim change; a table moving between stacks", base_sgd,
        spec(tables=_with(BASE, "cat", dim=8), optimizer=sgd))
    add("stacking_off", "disable_table_stacking=True", "stacking on -> off", base_sgd,
        spec(tables=BASE, optimizer=sgd, stacking=False))
    add("stacking_on", "disable_table_stacking=True -> False", "stacking off -> on",
        spec(tables=BASE, optimizer=sgd, stacking=False), base_sgd)
    add("topology_more_chips", "v5p:2 -> v5p:4 (8 -> 16 SparseCores)",
        "another topology (num_partitions)", base_sgd,
        spec(tables=BASE, optimizer=sgd, topology="v5p:4"))
    add("topology_v5p_to_v6e", "v5p:2 (2 x 4 SparseCores) -> v6e:4 (4 x 2)",
        "another topology (SparseCores per partition)", base_sgd,
        spec(tables=BASE, optimizer=sgd, topology="v6e:4"))
    add("topology_v5p_to_v6e_adagrad", "v5p:2 -> v6e:4, Adagrad",
        "another topology (slots)", base, spec(tables=BASE, topology="v6e:4"))
    add("topology_fewer_cores", "v5p:2 (8 SparseCores) -> v6e:2 (4)",
        "another topology (fewer SparseCores)", base_sgd,
        spec(tables=BASE, optimizer=sgd, topology="v6e:2"))
    add("table_order_dict", "the tables and features written in another order (dict keys)",
        "table order change", base,
        spec(tables=list(reversed(BASE)),
             features=[("user", "user", 16), ("item", "item", 16), ("cat", "cat", 16)]))
    add("table_order_list", "a list of features: cat first -> user first",
        "table order change; num_features changed",
        spec(tables=BASE, optimizer=sgd, container="list",
             features=[("cat", "cat", 16), ("item", "item", 16), ("user", "user", 16)]),
        spec(tables=BASE, optimizer=sgd, container="list",
             features=[("user", "user", 16), ("item", "item", 16), ("cat", "cat", 16)]))
    add("num_features_second_feature", "a second feature on the first feature's table",
        "num_features changed (TF 2.21 counts the first feature only)", base_sgd,
        spec(tables=BASE, optimizer=sgd,
             features=[("cat", "cat", 16), ("cat2", "cat", 16), ("item", "item", 16),
                       ("user", "user", 16)]))
    add("num_features_first_table", "feature keys renamed: the first feature is item's",
        "num_features changed", base_sgd,
        spec(tables=BASE, optimizer=sgd,
             features=[("z_cat", "cat", 16), ("item", "item", 16), ("user", "user", 16)]))
    add("table_moves_optimizer", "item gets its own optimizer (learning rate 0.2): it leaves "
        "the stack", "a table moving between stacks", base_sgd,
        spec(tables=_with(BASE, "item", optimizer="SGD(learning_rate=0.2)"), optimizer=sgd))
    add("optimizer_sgd_to_adagrad", "SGD -> Adagrad (slot 'accumulators' added)",
        "optimizer changed: slot added", base_sgd, base)
    add("optimizer_adagrad_to_sgd", "Adagrad -> SGD (slot 'accumulators' dropped)",
        "optimizer changed: slot removed", base, base_sgd)
    add("optimizer_adagrad_to_adam", "Adagrad -> Adam (accumulators dropped; momenta and "
        "velocities added)", "optimizer changed: slots replaced", base,
        spec(tables=BASE, optimizer="Adam(learning_rate=0.1)"))
    sub = [("a", 64, 8), ("ab", 64, 8), ("b", 32, 16)]
    add("substring_names_topology", "tables 'a', 'ab', 'b' (names inside other names), "
        "v5p:2 -> v6e:4", "a table named `a` and other substring names",
        spec(tables=sub, optimizer=sgd), spec(tables=sub, optimizer=sgd, topology="v6e:4"))
    add("substring_names_identical", "tables 'a', 'ab', 'b', Adagrad, the same configuration",
        "a table named `a`", spec(tables=sub), spec(tables=sub))
    add("unsharded_to_sparsecore", "a CPU checkpoint (TPUEmbeddingForServing, SGD) restored on "
        "SparseCores", "an unsharded (CPU, no layouts) checkpoint into SparseCore", base_sgd,
        base_sgd, saved_by="TPUEmbeddingForServing")
    add("unsharded_to_sparsecore_adagrad", "a CPU checkpoint with Adagrad slots restored on "
        "SparseCores", "an unsharded checkpoint into SparseCore (slots)", base, base,
        saved_by="TPUEmbeddingForServing")
    add("unsharded_table_named_a", "a CPU checkpoint of tables 'a', 'ab', 'b' (SGD) on "
        "SparseCores", "an unsharded checkpoint; a table named `a`",
        spec(tables=sub, optimizer=sgd), spec(tables=sub, optimizer=sgd),
        saved_by="TPUEmbeddingForServing")
    add("unsharded_table_named_a_in_layer", "the same under the object path 'embedding_layer' "
        "(tf.train.Checkpoint(embedding_layer=...)): 'a' occurs in it",
        "an unsharded checkpoint; a table named `a` inside another key",
        spec(tables=sub, optimizer=sgd), spec(tables=sub, optimizer=sgd),
        saved_by="TPUEmbeddingForServing", root="embedding_layer")
    add("sharded_table_named_a_in_layer", "tables 'a', 'ab', 'b' under 'embedding_layer', "
        "v5p:2 -> v6e:4 (a reshard between SparseCore layouts)",
        "a table named `a`: the sharded path's replace is a no-op",
        spec(tables=sub, optimizer=sgd), spec(tables=sub, optimizer=sgd, topology="v6e:4"),
        root="embedding_layer")
    name_in_root = [("e", 64, 8), ("x", 64, 8)]
    add("unsharded_name_in_root_key", "a CPU checkpoint of tables 'e' and 'x': 'e' occurs in "
        "the key prefix 'embedding/'", "an unsharded checkpoint; a name inside another key",
        spec(tables=name_in_root, optimizer=sgd), spec(tables=name_in_root, optimizer=sgd),
        saved_by="TPUEmbeddingForServing")
    cpu = {"saved_by": "TPUEmbeddingForServing", "restored_by": "TPUEmbeddingForServing"}
    add("legacy_identical", "mid-level API on the CPU: the same configuration", "legacy",
        base, base, **cpu)
    add("legacy_vocab_grown", "mid-level API: cat 32 -> 64 rows", "legacy: shape change", base,
        spec(tables=_with(BASE, "cat", vocab=64)), **cpu)
    add("legacy_dim_changed", "mid-level API: cat's width 16 -> 24", "legacy: shape change",
        base, spec(tables=_with(BASE, "cat", dim=24)), **cpu)
    add("legacy_renamed", "mid-level API: table 'user' renamed 'users'", "legacy: rename", base,
        spec(tables=_with(BASE, "user", name="users"),
             features=[("cat", "cat", 16), ("item", "item", 16), ("user", "users", 16)]), **cpu)
    add("legacy_slot_removed", "mid-level API: Adagrad -> SGD", "legacy: slot removed", base,
        base_sgd, **cpu)
    add("legacy_slots_replaced", "mid-level API: Adagrad -> Adam", "legacy: slots replaced",
        base, spec(tables=BASE, optimizer="Adam(learning_rate=0.1)"), **cpu)
    return p


# -- TensorFlow's side ---------------------------------------------------------------------------


class _StandInStrategy(tpu_strategy.TPUStrategyV2):
    """What TPUEmbeddingV2 reads from a TPU strategy: replicas, SparseCores per chip, devices."""

    def __init__(self, chips: int, sparse_cores: int) -> None:  # noqa: D107
        self._extended = types.SimpleNamespace(
            tpu_hardware_feature=types.SimpleNamespace(
                num_embedding_devices_per_chip=sparse_cores),
            _tpu_devices=np.array([["/cpu:0"]] * chips, dtype=object))
        self._chips = chips

    @property
    def num_replicas_in_sync(self) -> int:
        return self._chips

    @property
    def extended(self) -> Any:
        return self._extended


def _embedding_module() -> types.ModuleType:
    module = types.ModuleType("tpuemb_cfg.embedding")
    for name in ("TableConfig", "FeatureConfig", "SGD", "Adagrad", "Adam", "FTRL"):
        setattr(module, name, getattr(EMB, name))
    module.SparseCoreEmbeddingConfig = v3.SparseCoreEmbeddingConfig
    package = types.ModuleType("tpuemb_cfg")
    package.embedding = module
    sys.modules["tpuemb_cfg"] = package
    sys.modules["tpuemb_cfg.embedding"] = module
    return module


def run_spec(text: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(text, "<spec>", "exec"), namespace)  # noqa: S102
    for feature in tf.nest.flatten(namespace["feature_config"]):
        feature.table.initializer = tf.constant_initializer(-1.0)
    return namespace


def construct(text: str, saved_by: str = "TPUEmbeddingV2") -> Any:
    ns = run_spec(text)
    if saved_by == "TPUEmbeddingForServing":
        v3.distribute_lib.get_strategy = DEFAULT_STRATEGY
        return serving.TPUEmbeddingForServing(ns["feature_config"], ns.get("optimizer"))
    strategy = _StandInStrategy(*TOPOLOGIES[ns["topology"]])
    v3.distribute_lib.get_strategy = lambda: strategy
    return v3.TPUEmbeddingV2(ns["feature_config"], ns.get("optimizer"),
                             sparse_core_embedding_config=ns.get("sparse_core_config"))


def known(table: str, variable: str, shape: tuple[int, ...]) -> np.ndarray:
    seed = sum(ord(c) * 131 ** i for i, c in enumerate(f"{table}/{variable}")) % 2 ** 32
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def saved_layouts(emb: Any) -> bytes:
    layouts = sparse_core_layout_pb2.SparseCoreTableLayouts()
    layouts.tables.extend(emb.embedding_layouts.values())
    return layouts.SerializeToString()


def stacks(emb: Any) -> dict[str, list[Any]]:
    return dict(adapter_lib._reorg_layouts(list(emb.embedding_layouts.values())))


def fill(emb: Any, saved_by: str) -> dict[str, list[int]]:
    """Build ``emb`` and give every variable its known values; name -> shape."""
    emb.build()
    shapes = {}
    if saved_by == "TPUEmbeddingForServing":
        for table, variables in emb._variables.items():
            for slot, var in variables.items():
                var.assign(known(table, slot, tuple(var.shape)))
                shapes[var_name(table, slot)] = list(var.shape)
        return shapes
    for stack, layouts in stacks(emb).items():
        for slot, var in emb._variables[stack].items():
            per_table = [known(t.table_name, slot, tuple(t.unsharded_shape)) for t in layouts]
            rows, dim = var.shape
            full = adapter_lib._shard_from_cpu_to_sc(
                per_table, f"{rows} {dim} 0,{rows}:0,{dim}", layouts).numpy()
            part = rows // len(var.values)
            for i, shard in enumerate(var.values):
                shard.assign(full[i * part:(i + 1) * part])
            shapes[var_name(stack, slot)] = [rows, dim]
    return shapes


def var_name(owner: str, slot: str) -> str:
    return owner if slot == "parameters" else f"{owner}/{slot}"


def read(emb: Any) -> dict[tuple[str, str], np.ndarray]:
    """(table, variable) -> the table's rows in NEW's variable, padding removed."""
    out = {}
    if isinstance(emb, serving.TPUEmbeddingForServing):
        return {(table, slot): var.numpy() for table, variables in emb._variables.items()
                for slot, var in variables.items()}
    for stack, layouts in stacks(emb).items():
        for slot, var in emb._variables[stack].items():
            full = tf.concat([v.read_value() for v in var.values], 0)
            tables = adapter_lib._unshard_from_sc_to_cpu(full, layouts)
            for value, layout in zip(tables, layouts, strict=True):
                out[(layout.table_name, slot)] = value.numpy()
    return out


def first_line(exc: BaseException) -> str:
    """The first line of the message, without the ``{{function_node ...}}`` prefix of an op's."""
    text = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", str(exc).strip()).splitlines()
    return text[0][:400] if text else ""


def restore(path: str, new_spec: str, old_has: set[tuple[str, str]], root: str,
            restored_by: str, *, after_build: bool) -> dict[str, Any]:
    new = construct(new_spec, restored_by)
    fresh = construct(new_spec, restored_by)
    fresh.build()
    initial = read(fresh)
    result: dict[str, Any] = {}
    try:
        adapter = adapter_lib.TpuEmbeddingV3CheckpointAdapter.create_from_checkpoint(path)
        result["adapter"] = "applied" if adapter.is_applicable(new) else "not_applicable"
    except Exception as exc:  # noqa: BLE001
        result["adapter"] = "error"
        del exc
    try:
        if after_build:
            new.build()
        status = tf.train.Checkpoint(**{root: new}).restore(path)
        new.build()
        status.expect_partial()
        got = read(new)
    except Exception as exc:  # noqa: BLE001
        result.update(outcome="fails", error={"type": type(exc).__name__,
                                              "message": first_line(exc)}, values={})
        return result
    values = {}
    for (table, slot), value in sorted(got.items()):
        if (table, slot) not in old_has:
            verdict = "new"
        else:
            expected = known(table, slot, value.shape)
            if np.array_equal(value, expected):
                verdict = "equal"
            elif np.array_equal(value, initial[(table, slot)]):
                verdict = "initial"
            else:
                verdict = "differs"
        values[f"{table}:{slot}"] = verdict
    bad = [v for v in values.values() if v in ("initial", "differs")]
    if bad:
        outcome = "wrong"
    else:
        # restored after build(): the variables exist, so no callback reshards them
        outcome = ("reshards" if result["adapter"] == "applied" and not after_build
                   else "restores")
    result.update(outcome=outcome, error=None, values=values)
    return result


def run_pair(pair: dict[str, Any], folder: str) -> dict[str, Any]:
    saved_by = pair["old"]["saved_by"]
    old = construct(pair["old"]["spec"], saved_by)
    old_vars = fill(old, saved_by)
    if saved_by == "TPUEmbeddingForServing":
        old_has = {(t, s) for t, d in old._variables.items() for s in d}
        pair["old"]["layouts_hex"] = None
    else:
        old_has = {(t.table_name, s) for st, ls in stacks(old).items() for t in ls
                   for s in old._variables[st]}
        pair["old"]["layouts_hex"] = saved_layouts(old).hex()
    path = tf.train.Checkpoint(**{pair["root"]: old}).write(os.path.join(folder, pair["id"]))
    reader = tf.train.load_checkpoint(path)
    pair["old"]["variables"] = old_vars
    pair["old"]["keys"] = sorted(k for k in reader.get_variable_to_shape_map()
                                 if k != "_CHECKPOINTABLE_OBJECT_GRAPH")
    restored_by = pair["new"]["restored_by"]
    new = construct(pair["new"]["spec"], restored_by)
    pair["new"]["layouts_hex"] = (None if restored_by == "TPUEmbeddingForServing"
                                  else saved_layouts(new).hex())
    new.build()
    pair["new"]["variables"] = {var_name(st, s): list(v.shape)
                                for st, d in new._variables.items() for s, v in d.items()}
    args = (path, pair["new"]["spec"], old_has, pair["root"], restored_by)
    pair.update(restore(*args, after_build=False))
    after = restore(*args, after_build=True)
    pair["after_build"] = {"outcome": after["outcome"], "error": after["error"],
                           "values": after["values"]}
    return pair


def main() -> None:
    _embedding_module()
    cases = []
    with tempfile.TemporaryDirectory() as folder:
        for pair in pairs():
            cases.append(run_pair(pair, folder))
            print(f"{pair['id']:32s} {pair['adapter']:15s} {pair['outcome']:9s} "
                  f"{(pair['error'] or {}).get('message', '')[:90]}", flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    document = {"tensorflow": tf.__version__, "protobuf": google.protobuf.__version__,
                "generator": "tools/tf_reference/checkpoint_pairs.py", "cases": cases}
    OUT.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")


if __name__ == "__main__":
    main()
