"""The jax-tpu-embedding ground truth in tests/data/checkpoints/orbax (written by
tools/jax_reference/jte_layouts.py with jax-tpu-embedding 0.2.0) is self-consistent: every table's
rows sit in the stored stacks where the layout in the stored embedding_spec/proto.pbtxt puts
them (the arithmetic of jax-tpu-embedding's compute_physical_row_ids, written out here by hand),
equal to the known per-table values (jte_tables_values.npz), and every other stored value is
padding (0; NaN in the tables jax-tpu-embedding's converter wrote)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

CHECKPOINTS = Path(__file__).parent / "data" / "checkpoints" / "orbax"
VALUES = CHECKPOINTS / "jte_tables_values.npz"
STEP = "7"
STACKS = "model/embedding_layer/embedding_table/value"
#: The stored checkpoints with stacked tables: folder, SparseCores in all, table padding value.
STACKED = [("jte_tables", 8, 0.0), ("jte_tables_4x4", 16, np.nan), ("jte_tables_1x4", 4, np.nan)]
#: The generator's stacks (stack_tables order = row-offset order in jte_tables).
SOURCE_STACKS = {"adagrad3": ["zeta", "alpha", "mid"], "adam2": ["user", "item"],
                 "country": ["country"]}

_TOKEN = re.compile(r'\s*(?:(\w+)\s*:\s*("(?:[^"\\]|\\.)*"|[^\s{}]+)|(\w+)\s*\{|(\}))')


def parse_text_proto(text: str) -> dict[str, list[Any]]:
    """A protobuf text-format message as {field: [values]} (nested messages as dicts); enough
    for the EmbeddingSpecProto jax-tpu-embedding writes (no comments, no lists)."""
    stack: list[dict[str, list[Any]]] = [{}]
    pos = 0
    while pos < len(text.rstrip()):
        match = _TOKEN.match(text, pos)
        assert match, f"cannot parse at {text[pos:pos + 40]!r}"
        pos = match.end()
        field, value, message, close = match.groups()
        if field:
            parsed: Any = (value[1:-1] if value.startswith('"')
                           else int(value) if re.fullmatch(r"-?\d+", value) else value)
            stack[-1].setdefault(field, []).append(parsed)
        elif message:
            child: dict[str, list[Any]] = {}
            stack[-1].setdefault(message, []).append(child)
            stack.append(child)
        else:
            assert close
            stack.pop()
    assert len(stack) == 1
    return stack[0]


def field(message: dict[str, list[Any]], name: str) -> int:
    """A scalar int field (0 when absent, as protobuf omits defaults)."""
    return int(message.get(name, [0])[0])


def load_spec(folder: str) -> list[dict[str, list[Any]]]:
    text = (CHECKPOINTS / folder / STEP / "embedding_spec" / "proto.pbtxt").read_text()
    specs: list[dict[str, list[Any]]] = parse_text_proto(text)["stacked_table_specs"]
    return specs


@pytest.fixture(scope="module")
def values() -> dict[str, np.ndarray]:
    with np.load(VALUES) as npz:
        return {k: npz[k] for k in npz.files}


def reader(folder: str) -> Any:
    pytest.importorskip("tensorstore", reason="the orbax extra (tensorstore) is not installed")
    from tpuemb_cfg.formats.orbax import OrbaxReader

    return OrbaxReader(CHECKPOINTS / folder)


def physical_rows(stack: dict[str, list[Any]], table: dict[str, list[Any]],
                  rows: np.ndarray) -> np.ndarray:
    """Row j of the padded table: shard (j mod N + rotation) mod N, row offset + j div N."""
    shards = field(stack, "num_sparsecores")
    per_shard = field(stack, "stack_vocab_size") // shards
    shard = (rows % shards + field(table, "shard_rotation")) % shards
    physical: np.ndarray = shard * per_shard + field(table, "row_offset_in_shard") + rows // shards
    return physical


def test_the_values_are_the_generators_tables_and_jte_slot_names(
        values: dict[str, np.ndarray]) -> None:
    shapes = {"zeta": (70, 10), "alpha": (30, 12), "mid": (60, 16), "user": (120, 8),
              "item": (45, 4), "country": (50, 20)}
    slots = {"adagrad3": ["accumulator"], "adam2": ["momentum", "velocity"],
             "country": ["accumulator", "linear"]}
    expected = {f"table/{t}" for t in shapes} | {
        f"slot/{t}/{s}" for stack, tables in SOURCE_STACKS.items() for t in tables
        for s in slots[stack]}
    assert set(values) == expected
    for key, array in values.items():
        assert array.dtype == np.float32
        assert array.shape == shapes[key.split("/")[1]]


def test_jte_tables_layout_is_the_one_asked_for() -> None:
    specs = {s["stack_name"][0]: s for s in load_spec("jte_tables")}
    assert set(specs) == set(SOURCE_STACKS)
    for name, order in SOURCE_STACKS.items():
        tables = {t["table_name"][0]: t for t in specs[name]["table_specs"]}
        proto_order = [t["table_name"][0] for t in specs[name]["table_specs"]]
        assert field(specs[name], "num_sparsecores") == 8
        # row offsets follow the stacking order, padded vocabularies (multiples of 8 x 8)
        offset = 0
        for table in order:
            assert field(tables[table], "row_offset_in_shard") == offset
            offset += field(tables[table], "padded_vocab_size") // 8
        assert offset * 8 == field(specs[name], "stack_vocab_size")
        if len(order) > 1:  # the proto lists the tables by name, not by offset
            assert proto_order == sorted(order) != order
    # rotations 0, 4, 0 (rotation = SparseCores per device, mod 8) and padded dims
    adagrad = {t["table_name"][0]: t for t in specs["adagrad3"]["table_specs"]}
    assert [field(adagrad[t], "shard_rotation") for t in SOURCE_STACKS["adagrad3"]] == [0, 4, 0]
    assert {t: field(adagrad[t], "padded_embedding_dim") for t in adagrad} == {
        "zeta": 16, "alpha": 16, "mid": 16}


@pytest.mark.parametrize(("folder", "shards", "pad"), STACKED)
def test_stacked_rows_are_the_known_values_and_the_rest_is_padding(
        values: dict[str, np.ndarray], folder: str, shards: int, pad: float) -> None:
    specs = load_spec(folder)
    seen_tables = set()
    with reader(folder) as ckpt:
        stored_keys = set(ckpt.keys())
        for stack in specs:
            name = stack["stack_name"][0]
            assert field(stack, "num_sparsecores") == shards
            shape = (field(stack, "stack_vocab_size"), field(stack, "stack_embedding_dim"))
            variables = sorted(k[len(f"{STACKS}/{name}/"):] for k in stored_keys
                               if k.startswith(f"{STACKS}/{name}/"))
            assert "table" in variables and len(variables) > 1
            for variable in variables:
                stored = ckpt.read(f"{STACKS}/{name}/{variable}")
                assert stored.shape == shape and stored.dtype == np.float32
                used = np.zeros(shape, bool)
                for table in stack["table_specs"]:
                    tname = table["table_name"][0]
                    seen_tables.add(tname)
                    vocab, dim = field(table, "vocab_size"), field(table, "embedding_dim")
                    assert field(table, "padded_vocab_size") % shards == 0
                    rows = physical_rows(stack, table, np.arange(vocab))
                    key = (f"table/{tname}" if variable == "table"
                           else f"slot/{tname}/{variable.removeprefix('slot/')}")
                    np.testing.assert_array_equal(stored[rows, :dim], values[key])
                    assert not used[rows].any()  # no two tables share a row
                    used[rows, :dim] = True
                padding = stored[~used]
                assert padding.size > 0
                expected_pad = pad if variable == "table" else 0.0
                if np.isnan(expected_pad):
                    assert np.isnan(padding).all()
                else:
                    assert (padding == expected_pad).all()
    assert seen_tables == {k.split("/")[1] for k in values if k.startswith("table/")}


def test_converted_stacks_follow_the_proto_order() -> None:
    """jte's converter restacks in the proto's table order (names joined), offsets in that
    order, rotation = SparseCores per device; the source stacks' offsets are not kept."""
    for folder, devices, sc in (("jte_tables_4x4", 4, 4), ("jte_tables_1x4", 1, 4)):
        specs = {s["stack_name"][0]: s for s in load_spec(folder)}
        assert set(specs) == {"alpha_mid_zeta", "item_user", "country"}
        for stack in specs.values():
            offset = rotation = 0
            for table in stack["table_specs"]:
                assert field(table, "row_offset_in_shard") == offset
                assert field(table, "shard_rotation") == rotation
                assert field(table, "padded_vocab_size") == (
                    -(-field(table, "vocab_size") // (8 * devices * sc)) * 8 * devices * sc)
                offset += field(table, "padded_vocab_size") // (devices * sc)
                rotation = (rotation + sc) % (devices * sc)


def test_unstacked_conversion_holds_each_table(values: dict[str, np.ndarray]) -> None:
    with reader("jte_tables_unstacked") as ckpt:
        stored = {k[len(STACKS) + 1:]: k for k in ckpt.keys() if k.startswith(STACKS + "/")}
        assert len(stored) == len(values)
        for key, value in values.items():
            kind, name, *slot = key.split("/")
            path = f"{name}/table" if kind == "table" else f"{name}/slot/{slot[0]}"
            np.testing.assert_array_equal(ckpt.read(stored[path]), value)
    # its embedding_spec is the source's (2 devices x 4 SparseCores), unchanged
    assert load_spec("jte_tables_unstacked") == load_spec("jte_tables")
