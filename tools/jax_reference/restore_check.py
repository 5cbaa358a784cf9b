"""Check an Orbax checkpoint the way jax-tpu-embedding reads it back (not a tpuemb dependency).

Run in the jax-tpu-embedding venv (jax-tpu-embedding 0.2.0, orbax-checkpoint, flax)::

    python tools/jax_reference/restore_check.py CHECKPOINT EXPECTED.npz

CHECKPOINT is an Orbax ``CheckpointManager`` folder (its latest step) or one numbered step
folder; EXPECTED.npz holds the per-table values it should hold, keyed ``table/<name>`` and
``slot/<name>/<jax-tpu-embedding slot name>`` (as tests/data/checkpoints/orbax/
jte_tables_values.npz). The checkpoint is restored as ``checkpoint_utils.restore_checkpoint`` /
``convert_cross_topology_checkpoint`` restore it: a ``CheckpointManager`` with jte's handler
registry (``create_checkpoint_manager``), items ``model`` and ``optimizer`` by
``StandardRestore`` (onto one CPU device) and ``embedding_spec`` by ``ProtoRestore`` of an
``EmbeddingSpecProto``; the stacks under ``.../embedding_table[/value]`` are unstacked with
``table_stacking.unstack_and_unshard_stacked_tables`` (tables, and each slot variable) and
compared bit for bit with the expected values. A checkpoint already unstacked (what
``convert_cross_topology_checkpoint`` writes without a target topology: one entry per table) is
compared as it is.

Prints one JSON line and exits 0 only if everything is equal::

    {"restored": bool, "tables_equal": {"table/user": true, ...}, "error": null | "...",
     "items": [...], "layout": "stacked" | "unstacked", "missing": [...], "unexpected": [...]}

``restored`` is whether jte's restore would accept the checkpoint: the three items it checks
for (``model``, ``optimizer``, ``embedding_spec``; ``_verify_checkpoint_keys``) are there and
restore. Without ``optimizer`` the tables are still compared, and ``error`` says so.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: The items jte's restore_checkpoint / convert_cross_topology_checkpoint insist on.
JTE_ITEMS = ("model", "optimizer", "embedding_spec")


def restore(manager_dir: Path, step: int | None = None, items: tuple[str, ...] = JTE_ITEMS
            ) -> dict[str, Any]:
    """The items of a checkpoint restored as jte's checkpoint_utils restores them, without a
    model to restore into (StandardRestore onto one CPU device, ProtoRestore)."""
    import jax
    import orbax.checkpoint as ocp
    from jax_tpu_embedding.sparsecore.lib.flax.nnx import checkpoint_utils as cu
    from jax_tpu_embedding.sparsecore.lib.proto import embedding_spec_pb2

    manager = cu.create_checkpoint_manager(
        cp_path=manager_dir, cp_options=ocp.CheckpointManagerOptions(read_only=True))
    try:
        step = cu._get_checkpoint_step(manager, step)
        cpu = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
        args = {item: (ocp.args.ProtoRestore(embedding_spec_pb2.EmbeddingSpecProto)
                       if item == "embedding_spec"
                       else ocp.args.StandardRestore(fallback_sharding=cpu))
                for item in items}
        return dict(manager.restore(step, args=ocp.args.Composite(**args)).items())
    finally:
        manager.close()


def stored_items(manager_dir: Path, step: int | None) -> list[str]:
    import orbax.checkpoint as ocp
    from jax_tpu_embedding.sparsecore.lib.flax.nnx import checkpoint_utils as cu

    manager = cu.create_checkpoint_manager(
        cp_path=manager_dir, cp_options=ocp.CheckpointManagerOptions(read_only=True))
    try:
        step = cu._get_checkpoint_step(manager, step)
        return sorted(manager.item_metadata(step).keys())
    finally:
        manager.close()


def embedding_variables(model_state: Any) -> dict[str, Any]:
    """``{stack: {"table": array, "slot": {name: array}}}`` found as jte's converter finds it."""
    from jax_tpu_embedding.sparsecore.lib.flax.nnx import checkpoint_utils as cu

    found = cu._find_embedding_table_in_dict(model_state)
    if found is None:
        raise ValueError("no 'embedding_table' in the restored model state")
    return found["value"] if "value" in found else found


def unstack_all(stacks: dict[str, Any], proto: Any) -> dict[str, np.ndarray]:
    """jte's unstack_and_unshard_stacked_tables on the tables and on each slot variable (per
    group of stacks that have that slot, so stacks with different optimizers are fine)."""
    from jax_tpu_embedding.sparsecore.lib.nn import table_stacking

    out = {f"table/{name}": np.asarray(a)
           for name, a in table_stacking.unstack_and_unshard_stacked_tables(
               {stack: ev["table"] for stack, ev in stacks.items()}, proto).items()}
    for slot in sorted({s for ev in stacks.values() for s in (ev.get("slot") or {})}):
        having = {stack: ev["slot"][slot] for stack, ev in stacks.items()
                  if slot in (ev.get("slot") or {})}
        sub = type(proto)()
        sub.stacked_table_specs.extend(
            s for s in proto.stacked_table_specs if s.stack_name in having)
        for name, a in table_stacking.unstack_and_unshard_stacked_tables(having, sub).items():
            out[f"slot/{name}/{slot}"] = np.asarray(a)
    return out


def per_table(stacks: dict[str, Any], proto: Any) -> tuple[str, dict[str, np.ndarray]]:
    """The per-table values of the checkpoint, and whether it was stacked or unstacked."""
    stack_names = {s.stack_name for s in proto.stacked_table_specs}
    table_names = {t.table_name for s in proto.stacked_table_specs for t in s.table_specs}
    if stack_names <= set(stacks):
        return "stacked", unstack_all(
            {k: v for k, v in stacks.items() if k in stack_names}, proto)
    if table_names <= set(stacks):
        out = {}
        for name in table_names:
            out[f"table/{name}"] = np.asarray(stacks[name]["table"])
            for slot, a in (stacks[name].get("slot") or {}).items():
                out[f"slot/{name}/{slot}"] = np.asarray(a)
        return "unstacked", out
    raise ValueError(f"the embedding_table holds {sorted(stacks)}: neither the proto's stacks "
                     f"{sorted(stack_names)} nor its tables {sorted(table_names)}")


def manager_and_step(path: Path) -> tuple[Path, int | None]:
    if (path / "_CHECKPOINT_METADATA").is_file():
        if not path.name.isdigit():
            raise ValueError(f"a step folder is named by its step number, not {path.name!r}")
        return path.parent, int(path.name)
    return path, None


def check(path: str, expected_npz: str) -> dict[str, Any]:
    result: dict[str, Any] = {"restored": False, "tables_equal": {}, "error": None}
    try:
        with np.load(expected_npz) as npz:
            expected = {k: npz[k] for k in npz.files}
        manager_dir, step = manager_and_step(Path(path).resolve())
        items = stored_items(manager_dir, step)
        result["items"] = items
        missing_items = [item for item in JTE_ITEMS if item not in items]
        restored = restore(manager_dir, step,
                           tuple(item for item in JTE_ITEMS if item in items))
        if "model" not in restored or "embedding_spec" not in restored:
            raise ValueError(f"no {' or '.join(missing_items)} item: nothing to compare")
        result["restored"] = not missing_items
        if missing_items:
            result["error"] = (f"jax-tpu-embedding's restore_checkpoint refuses this checkpoint: "
                               f"no {', '.join(missing_items)} item (_verify_checkpoint_keys)")
        layout, got = per_table(embedding_variables(restored["model"]),
                                restored["embedding_spec"])
        result["layout"] = layout
        result["tables_equal"] = {
            key: bool(key in got and got[key].shape == value.shape
                      and got[key].dtype == value.dtype and np.array_equal(got[key], value))
            for key, value in sorted(expected.items())}
        result["missing"] = sorted(expected.keys() - got.keys())
        result["unexpected"] = sorted(got.keys() - expected.keys())
    except Exception as exc:  # one JSON line whatever happens
        result["restored"] = False
        result["error"] = f"{type(exc).__name__}: " + " ".join(str(exc).split())[:2000]
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    result = check(argv[0], argv[1])
    print(json.dumps(result))
    ok = (result["restored"] and result["tables_equal"]
          and all(result["tables_equal"].values()) and not result.get("unexpected"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
