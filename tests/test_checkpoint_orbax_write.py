"""formats.orbax_write.OrbaxStepWriter on the stored jax-tpu-embedding checkpoint
(tests/data/checkpoints/orbax/jte_adagrad/7): a new step with the ``user_item`` stack replaced,
read back with OrbaxReader (copied arrays bit for bit, replaced ones as given, the metadata's
shapes), restored by Orbax itself (tests/data/checkpoints/orbax/written_restore.json, written by
tools/jax_reference/orbax_restore.py from the step ``write_case`` below writes), and refusals and
clean-up on every error.

And with the stack split in two (arrays dropped and added: written_restore_restacked.json), and
jax-tpu-embedding's own 2 x 4 checkpoint (jte_tables/7) resharded to 4 x 4 by tpuemb's engine
into a step that jax-tpu-embedding restores to every known table and slot
(written_jte_restore_check_4x4.json, written_restore_resharded_4x4.json).
The same for the other storage Orbax writes (zarr v3, no OCDBT: tests/data/checkpoints/orbax/
zarr3_files/3, restored in written_restore_zarr3_files.json). Regenerate the stored restores
(jax-tpu-embedding's venv for the second and third steps)::

    PYTHONPATH=. python tests/test_checkpoint_orbax_write.py /tmp/case
    python tools/jax_reference/orbax_restore.py /tmp/case/jte_adagrad 7 \\
        > tests/data/checkpoints/orbax/written_restore.json
    python tools/jax_reference/orbax_restore.py /tmp/case/zarr3_files 3 \\
        > tests/data/checkpoints/orbax/written_restore_zarr3_files.json
    python tools/jax_reference/orbax_restore.py /tmp/case/restacked 7 \\
        > tests/data/checkpoints/orbax/written_restore_restacked.json
    python tools/jax_reference/orbax_restore.py /tmp/case/resharded_4x4 7 \\
        > tests/data/checkpoints/orbax/written_restore_resharded_4x4.json
    python tools/jax_reference/restore_check.py /tmp/case/resharded_4x4/7 \\
        tests/data/checkpoints/orbax/jte_tables_values.npz \\
        > tests/data/checkpoints/orbax/written_jte_restore_check_4x4.json
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorstore")

from tpuemb_cfg.base.errors import InputError, OutputError  # noqa: E402
from tpuemb_cfg.checkpoints.embedding import find_jax_embedding  # noqa: E402
from tpuemb_cfg.checkpoints.reshard import (  # noqa: E402
    ArraySink,
    KeyedSink,
    KeyedSource,
    execute_reshard,
    plan_reshard,
)
from tpuemb_cfg.formats.orbax import OrbaxReader  # noqa: E402
from tpuemb_cfg.formats.orbax_write import OrbaxStepWriter, step_target  # noqa: E402
from tpuemb_cfg.model.checkpoint import LayoutRecord  # noqa: E402
from tpuemb_cfg.model.jax_checkpoint import jax_key  # noqa: E402

CHECKPOINTS = Path(__file__).parent / "data" / "checkpoints" / "orbax"
STEP = CHECKPOINTS / "jte_adagrad" / "7"
ZARR3_STEP = CHECKPOINTS / "zarr3_files" / "3"
RESTORED = CHECKPOINTS / "written_restore.json"
ZARR3_RESTORED = CHECKPOINTS / "written_restore_zarr3_files.json"
ZARR3_ROWS = 128
TABLES_STEP = CHECKPOINTS / "jte_tables" / "7"
TABLES_4X4 = CHECKPOINTS / "jte_tables_4x4" / "7"
RESHARDED_RESTORED = CHECKPOINTS / "written_restore_resharded_4x4.json"
RESHARDED_JTE_CHECK = CHECKPOINTS / "written_jte_restore_check_4x4.json"
#: jte_tables' tables and optimizers (tests/data/checkpoints/orbax/README.md).
TABLE_ALGORITHMS = {"alpha": "adagrad", "mid": "adagrad", "zeta": "adagrad", "item": "adam",
                    "user": "adam", "country": "ftrl"}
RESTACKED_RESTORED = CHECKPOINTS / "written_restore_restacked.json"
#: The restacked case: user_item split into its tables' own stacks (rows: 2 devices x 4
#: SparseCores x a multiple of 8 above each vocabulary).
SPLIT = {"user": 256, "item": 128}
STACKS = "model/embedding_layer/embedding_table/value"
TABLE, SLOT = f"{STACKS}/user_item/table", f"{STACKS}/user_item/slot/accumulator"
NEW_ROWS = 768
#: Small chunks and transactions, so that the case is written in many of both.
CHUNK_BYTES, BUFFER_BYTES = 1024, 4096


def known_values(key: str, shape: tuple[int, ...]) -> np.ndarray:
    """The recipe of tests/data/checkpoints/orbax/README.md (the case's new arrays use it too)."""
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    return rng.standard_normal(shape).astype(np.float32)


def blocks(array: np.ndarray, size: int) -> Iterator[np.ndarray]:
    for start in range(0, len(array), size):
        yield array[start:start + size]


def new_spec() -> bytes:
    """The source's embedding_spec/proto.pbtxt with the user_item stack twice as tall: user's
    padding grown from 256 to 640 rows (80 of each SparseCore's 96), item after it."""
    text = (STEP / "embedding_spec" / "proto.pbtxt").read_text()
    edits = (('stack_name: "user_item"\n  stack_vocab_size: 384\n',
              f'stack_name: "user_item"\n  stack_vocab_size: {NEW_ROWS}\n'),
             ("padded_vocab_size: 256\n", "padded_vocab_size: 640\n"),
             ("row_offset_in_shard: 32\n", "row_offset_in_shard: 80\n"))
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text.encode()


def write_case(out: str | os.PathLike[str]) -> Path:
    """jte_adagrad/7 with user_item's table and slot replaced by 768 x 8 known values, streamed
    in blocks of 100 rows, and the spec replaced: the case Orbax restored."""
    target = step_target(STEP, out)
    with OrbaxStepWriter(STEP, target, make_dirs=True, chunk_bytes=CHUNK_BYTES,
                         buffer_bytes=BUFFER_BYTES) as writer:
        for key in (TABLE, SLOT):
            writer.add_rows(key, (NEW_ROWS, 8), np.float32,
                            blocks(known_values(key, (NEW_ROWS, 8)), 100))
        writer.replace_file("embedding_spec/proto.pbtxt", new_spec())
    return target


def write_zarr3_case(out: str | os.PathLike[str]) -> Path:
    """zarr3_files/3 (zarr v3, one folder per array) with user_item's table replaced by 128 x 8
    known values in blocks of 10 rows, chunks of 16 rows: the case Orbax restored."""
    target = step_target(ZARR3_STEP, out)
    with OrbaxStepWriter(ZARR3_STEP, target, make_dirs=True, chunk_bytes=512,
                         buffer_bytes=1024) as writer:
        writer.add_rows(TABLE, (ZARR3_ROWS, 8), np.float32,
                        blocks(known_values(TABLE, (ZARR3_ROWS, 8)), 10))
    return target


def write_restacked_case(out: str | os.PathLike[str]) -> Path:
    """jte_adagrad/7 with the user_item stack dropped and new stacks ``user`` (256 x 8) and
    ``item`` (128 x 8), table and slot, of known values: the case Orbax restored."""
    target = step_target(STEP, out)
    with OrbaxStepWriter(STEP, target, make_dirs=True) as writer:
        writer.drop(TABLE)
        writer.drop(SLOT)
        for stack, rows in SPLIT.items():
            for key in (f"{STACKS}/{stack}/table", f"{STACKS}/{stack}/slot/accumulator"):
                writer.add_rows(key, (rows, 8), np.float32,
                                blocks(known_values(key, (rows, 8)), 50))
    return target


def write_resharded_case(out: str | os.PathLike[str]) -> Path:
    """jte_tables/7 (2 x 4 SparseCores, jax-tpu-embedding's own save) resharded by tpuemb to
    the stacking jax-tpu-embedding's converter gives 4 x 4 (jte_tables_4x4: other stack names,
    so every stack is dropped and a new one added), with that spec: the case jax-tpu-embedding
    restored (restore_check.py) and Orbax restored (orbax_restore.py)."""
    from tpuemb_cfg.algorithms import slot_names

    target = step_target(TABLES_STEP, out)
    with OrbaxReader(TABLES_STEP) as old_reader, OrbaxReader(TABLES_4X4) as new_reader:
        old, new = find_jax_embedding(old_reader), find_jax_embedding(new_reader)
        slots = {name: slot_names(algorithm) for name, algorithm in TABLE_ALGORITHMS.items()}
        plan = plan_reshard(old.layouts, new.layouts, slots=slots)
        with OrbaxStepWriter(TABLES_STEP, target, make_dirs=True, chunk_bytes=CHUNK_BYTES,
                             buffer_bytes=BUFFER_BYTES) as writer:
            for key in {v.key for v in old.variables} - {v.key for v in new.variables}:
                writer.drop(key)  # the stacks 4 x 4 does not have
            execute_reshard(plan, KeyedSource(old_reader, key_of=lambda n: old.variable(n).key),
                            KeyedSink(writer, key_of=lambda n: new.variable(n).key),
                            memory_cap=64 << 10)
            spec = new_reader.read_file("embedding_spec/proto.pbtxt")
            assert spec is not None
            writer.replace_file("embedding_spec/proto.pbtxt", spec)
    return target


def crc(array: np.ndarray) -> int:
    little = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False)
    return zlib.crc32(little.tobytes())


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_case(tmp_path_factory.mktemp("written") / "manager")


def test_round_trip_copied_bit_for_bit_replaced_as_given(case: Path) -> None:
    assert case.name == "7"
    with OrbaxReader(case) as written, OrbaxReader(STEP) as source:
        assert written.keys() == source.keys()
        for key in source.keys():
            if key in (TABLE, SLOT):
                assert written.entry(key).shape == (NEW_ROWS, 8)
                np.testing.assert_array_equal(written.read(key),
                                              known_values(key, (NEW_ROWS, 8)))
            else:
                assert written.entry(key).shape == source.entry(key).shape
                assert written.read(key).tobytes() == source.read(key).tobytes()
        np.testing.assert_array_equal(written.read_rows(TABLE, 380, 390),
                                      known_values(TABLE, (NEW_ROWS, 8))[380:390])


def test_metadata_follows_the_new_shapes(case: Path) -> None:
    meta = json.loads((case / "model" / "_METADATA").read_text())
    shapes = {".".join(k["key"] for k in leaf["key_metadata"]):
              leaf["value_metadata"].get("write_shape")
              for leaf in meta["tree_metadata"].values()}
    # 768 rows over the 2 devices of the stack's sharding: 384 each; the rest unchanged.
    assert shapes == {"dense.kernel.value": None,
                      "embedding_layer.embedding_table.value.country.slot.accumulator": [32, 16],
                      "embedding_layer.embedding_table.value.country.table": [32, 16],
                      "embedding_layer.embedding_table.value.user_item.slot.accumulator": [384, 8],
                      "embedding_layer.embedding_table.value.user_item.table": [384, 8]}
    assert meta["use_ocdbt"] is True and meta["use_zarr3"] is False
    stored = json.loads((case / "model" / "array_metadatas" / "process_0").read_text())
    found = {m["array_metadata"]["param_name"].split(".", 3)[3]:
             (m["array_metadata"]["write_shape"], m["array_metadata"]["chunk_shape"])
             for m in stored["array_metadatas"]}
    # chunks of at most 1024 bytes: 32 rows of 8 float32 (32 divides 384).
    assert found == {"country.slot.accumulator": ([32, 16], [32, 16]),
                     "country.table": ([32, 16], [32, 16]),
                     "user_item.slot.accumulator": ([384, 8], [32, 8]),
                     "user_item.table": ([384, 8], [32, 8])}
    for name in ("_CHECKPOINT_METADATA", "commit_success.txt", "model/_sharding",
                 "model/commit_success.txt", "embedding_spec/commit_success.txt"):
        assert (case / name).read_bytes() == (STEP / name).read_bytes(), name
    assert (case / "embedding_spec" / "proto.pbtxt").read_bytes() == new_spec()
    assert not list(case.parent.glob(".*")), "a temporary folder was left"


def _store(folder: Path) -> dict[bytes, bytes]:
    import tensorstore as ts

    base = {"driver": "file", "path": str(folder.resolve()) + "/"}
    kv = ts.KvStore.open({"driver": "ocdbt", "base": base}).result()
    return {key: kv.read(key).result().value for key in kv.list().result()}


def test_copied_arrays_keep_their_stored_chunks_and_new_ones_are_chunked(case: Path) -> None:
    written, source = _store(case / "model"), _store(STEP / "model")
    replaced = (b"embedding_layer.embedding_table.value.user_item.table/",
                b"embedding_layer.embedding_table.value.user_item.slot.accumulator/")
    kept = {k: v for k, v in source.items() if not k.startswith(replaced)}
    assert {k: written[k] for k in kept} == kept  # compressed chunks, bit for bit
    for prefix in replaced:
        chunks = sorted(k[len(prefix):] for k in written if k.startswith(prefix))
        assert chunks == sorted([b".zarray"] + [f"{i}.0".encode() for i in range(24)])
        zarray = json.loads(written[prefix + b".zarray"])
        source_zarray = json.loads(source[prefix + b".zarray"])
        assert zarray == {**source_zarray, "shape": [NEW_ROWS, 8], "chunks": [32, 8]}


def test_orbax_restores_what_tpuemb_wrote(case: Path) -> None:
    """The stored restore (Orbax 0.12.8's CheckpointManager.restore of write_case's step) holds
    the arrays tpuemb wrote, CRC for CRC, and the replaced spec."""
    restored = json.loads(RESTORED.read_text())
    with OrbaxReader(case) as written:
        assert sorted(restored["arrays"]) == written.keys()
        for key, found in restored["arrays"].items():
            array = written.read(key)
            assert found["shape"] == list(array.shape), key
            assert found["dtype"] == str(array.dtype), key
            assert found["crc32"] == crc(array), key
    assert restored["arrays"][TABLE]["crc32"] == crc(known_values(TABLE, (NEW_ROWS, 8)))
    assert restored["arrays"][TABLE]["type"] == "ArrayImpl"  # a jax.Array, 2 devices
    stacks = {s["name"]: (s["vocab"], s["dim"], s["sparsecores"])
              for s in restored["embedding_spec"]}
    assert stacks == {"country": (64, 16, 8), "user_item": (NEW_ROWS, 8, 8)}
    assert restored["restored_into_a_target_equal"] is True


def test_zarr3_without_ocdbt_written_as_orbax_does_and_restored(tmp_path: Path) -> None:
    case = write_zarr3_case(tmp_path / "manager")
    meta = json.loads((case / "model" / "_METADATA").read_text())
    assert meta["use_ocdbt"] is False and meta["use_zarr3"] is True
    folder = case / "model" / "embedding_layer.embedding_table.value.user_item.table"
    source = ZARR3_STEP / "model" / folder.name
    zarr = json.loads((folder / "zarr.json").read_text())
    stored = json.loads((source / "zarr.json").read_text())
    sharded = stored["codecs"][0]["configuration"]
    assert zarr == {**stored, "shape": [ZARR3_ROWS, 8],
                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16, 8]}},
                    "codecs": [{**stored["codecs"][0],
                                "configuration": {**sharded, "chunk_shape": [16, 8]}}]}
    assert sorted(p.parent.name for p in (folder / "c").glob("*/0")) == [str(i) for i in range(8)]
    slot = "embedding_layer.embedding_table.value.user_item.slot.accumulator"
    for path in (ZARR3_STEP / "model" / slot).rglob("*"):  # copied file for file
        if path.is_file():
            relative = path.relative_to(ZARR3_STEP)
            assert (case / relative).read_bytes() == path.read_bytes()
    restored = json.loads(ZARR3_RESTORED.read_text())
    assert restored["restored_into_a_target_equal"] is True
    with OrbaxReader(case) as written, OrbaxReader(ZARR3_STEP) as original:
        np.testing.assert_array_equal(written.read(TABLE), known_values(TABLE, (ZARR3_ROWS, 8)))
        assert sorted(restored["arrays"]) == written.keys()
        for key, found in restored["arrays"].items():
            array = written.read(key)
            assert (found["shape"], found["crc32"]) == (list(array.shape), crc(array)), key
            if key != TABLE:
                assert array.tobytes() == original.read(key).tobytes()


def test_new_stacks_follow_their_siblings_and_dropped_ones_vanish(tmp_path: Path) -> None:
    import base64

    case = write_restacked_case(tmp_path / "manager")
    expected = {f"{STACKS}/{stack}/{what}": (rows, 8) for stack, rows in SPLIT.items()
                for what in ("table", "slot/accumulator")}
    expected.update({f"{STACKS}/country/table": (64, 16),
                     f"{STACKS}/country/slot/accumulator": (64, 16),
                     "model/dense/kernel/value": (16, 4)})
    restored = json.loads(RESTACKED_RESTORED.read_text())
    assert restored["restored_into_a_target_equal"] is True
    with OrbaxReader(case) as written, OrbaxReader(STEP) as source:
        assert {k: written.entry(k).shape for k in written.keys()} == expected
        assert sorted(restored["arrays"]) == sorted(expected)
        for key, found in restored["arrays"].items():
            array = written.read(key)
            assert (found["shape"], found["crc32"]) == (list(array.shape), crc(array)), key
            if key in source.keys():
                assert array.tobytes() == source.read(key).tobytes()
            else:
                np.testing.assert_array_equal(array, known_values(key, expected[key]))
        found_jax = find_jax_embedding(written)
        assert sorted(v.key for v in found_jax.variables) == sorted(
            k for k in expected if k.startswith(STACKS))
    meta = json.loads((case / "model" / "_METADATA").read_text())
    tree = meta["tree_metadata"]
    assert list(tree) == sorted(tree)
    leaf = tree["('embedding_layer', 'embedding_table', 'value', 'user', 'slot', 'accumulator')"]
    assert leaf == {"key_metadata": [{"key": k, "key_type": 2} for k in (
                        "embedding_layer", "embedding_table", "value", "user", "slot",
                        "accumulator")],
                    "value_metadata": {"value_type": "jax.Array", "skip_deserialize": False,
                                       "write_shape": [128, 8]}}
    assert not any("user_item" in k for k in tree)
    shardings = {base64.b64decode(k).decode(): v for k, v in
                 json.loads((case / "model" / "_sharding").read_text()).items()}
    stored = {base64.b64decode(k).decode(): v for k, v in
              json.loads((STEP / "model" / "_sharding").read_text()).items()}
    like = stored["embedding_layer.embedding_table.value.user_item.table"]
    assert shardings == {
        **{k: v for k, v in stored.items() if "user_item" not in k},
        **{f"embedding_layer.embedding_table.value.{stack}.{what}": like
           for stack in SPLIT for what in ("table", "slot.accumulator")}}
    entries = json.loads((case / "model" / "array_metadatas" / "process_0").read_text())
    assert [(e["array_metadata"]["param_name"].split(".", 3)[3],
             e["array_metadata"]["write_shape"]) for e in entries["array_metadatas"]] == [
        ("country.slot.accumulator", [32, 16]), ("country.table", [32, 16]),
        ("item.slot.accumulator", [64, 8]), ("item.table", [64, 8]),
        ("user.slot.accumulator", [128, 8]), ("user.table", [128, 8])]
    assert not any(b"user_item" in key for key in _store(case / "model"))


def test_a_new_array_needs_a_sibling(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="none whose path differs from it in one part only"), \
            OrbaxStepWriter(STEP, tmp_path / "7") as writer:
        writer.add_rows("model/elsewhere/new/table", (8, 8), np.float32, [])
    with pytest.raises(InputError, match="nor an item 'optimizer'"), \
            OrbaxStepWriter(STEP, tmp_path / "7") as writer:
        writer.add_rows("optimizer/x", (8, 8), np.float32, [])
    with OrbaxStepWriter(STEP, tmp_path / "7") as writer:
        writer.drop(TABLE)
        with pytest.raises(ValueError, match="added or dropped already"):
            writer.add_rows(TABLE, (8, 8), np.float32, [])
        writer.abort()
    assert os.listdir(tmp_path) == []


def adagrad_key(name: str) -> str:
    """The Orbax key of a variable as tpuemb names it (TensorFlow's slot names)."""
    return jax_key(STACKS, name, "adagrad")


def test_a_resharded_step_restores_in_jax_tpu_embedding(tmp_path: Path) -> None:
    """jte_tables (2 x 4) resharded by tpuemb into an Orbax step for 4 x 4: jax-tpu-embedding's
    own restore (restore_check.py: its handlers, StandardRestore of model and optimizer,
    ProtoRestore, unstack_and_unshard_stacked_tables) gave back every known table and slot, and
    Orbax restored exactly the bytes this test writes again."""
    case = write_resharded_case(tmp_path / "manager")
    verdict = json.loads(RESHARDED_JTE_CHECK.read_text())
    assert verdict["restored"] is True and verdict["error"] is None
    assert verdict["layout"] == "stacked" and not verdict["missing"]
    assert len(verdict["tables_equal"]) == 15 and all(verdict["tables_equal"].values())
    restored = json.loads(RESHARDED_RESTORED.read_text())
    assert restored["restored_into_a_target_equal"] is True
    with OrbaxReader(case) as written, OrbaxReader(TABLES_4X4) as converted:
        assert {k: written.entry(k).shape for k in written.keys()} == \
            {k: converted.entry(k).shape for k in converted.keys()}  # jte's converter's shapes
        model = [k for k in written.keys() if k.startswith("model/")]
        assert sorted(restored["arrays"]) == model
        for key in model:
            found, array = restored["arrays"][key], written.read(key)
            assert (found["shape"], found["crc32"]) == (list(array.shape), crc(array)), key
    assert (case / "embedding_spec" / "proto.pbtxt").read_bytes() == \
        (TABLES_4X4 / "embedding_spec" / "proto.pbtxt").read_bytes()
    for name in ("optimizer/_METADATA", "_CHECKPOINT_METADATA"):  # copied as it is
        assert (case / name).read_bytes() == (TABLES_STEP / name).read_bytes()


def test_reshard_sink_names_jax_tpu_embedding_keys(tmp_path: Path) -> None:
    assert adagrad_key("user_item") == TABLE
    assert adagrad_key("user_item/accumulators") == SLOT
    with OrbaxStepWriter(STEP, tmp_path / "7") as writer:
        sink = KeyedSink(writer, STACKS, key_of=adagrad_key)
        for name in ("user_item", "user_item/accumulators"):
            sink.add_rows(name, (NEW_ROWS, 8), np.dtype(np.float32),
                          blocks(np.full((NEW_ROWS, 8), len(name), np.float32), 64))
        writer.replace_file("embedding_spec/proto.pbtxt", new_spec())
    with OrbaxReader(tmp_path / "7") as written:
        found = find_jax_embedding(written)
        assert {v.name: (v.key, v.shape) for v in found.variables} == {
            "user_item": (TABLE, (NEW_ROWS, 8)), "user_item/accumulators": (SLOT, (NEW_ROWS, 8)),
            "country": (f"{STACKS}/country/table", (64, 16)),
            "country/accumulators": (f"{STACKS}/country/slot/accumulator", (64, 16))}
        assert np.all(written.read(SLOT) == len("user_item/accumulators"))


def _layouts(cores: int, item_offset: int) -> list[LayoutRecord]:
    """The stored case's stacking (embedding_spec/proto.pbtxt, mapped as docs/checkpoints.md
    says) on ``cores`` SparseCores: user_item = user (200 -> 256 rows) + item (100 -> 128)."""
    def record(table: str, stack: str, rows: int, dim: int, padded: int, stacked: int,
               offset: int, rotation: int) -> LayoutRecord:
        return LayoutRecord(table_name=table, stacked_table_name=stack, num_sparse_cores=cores,
                            num_partitions=1, total_rows_per_sparse_core_shard=stacked // cores,
                            unsharded_shape=(rows, dim), unsharded_padded_shape=(padded, dim),
                            sparse_core_shard_row_offset=offset,
                            sparse_core_shard_rotation=rotation)
    return [record("user", "user_item", 200, 8, 256, 384, 0, 0),
            record("item", "user_item", 100, 8, 128, 384, item_offset, 4),
            record("country", "country", 50, 16, 64, 64, 0, 0)]


def test_the_reshard_engine_writes_an_orbax_step(tmp_path: Path) -> None:
    """8 -> 16 SparseCores through the engine: a source and a sink by jax-tpu-embedding's names
    over the stored step and a new one; the step holds what the engine gives an ArraySink."""
    plan = plan_reshard(_layouts(8, 32), _layouts(16, 16), slots=("accumulators",))
    assert sorted(v.name for v in plan.variables) == [
        "country", "country/accumulators", "user_item", "user_item/accumulators"]
    with OrbaxReader(STEP) as reader:
        source = KeyedSource(reader, STACKS, key_of=adagrad_key)
        expected = ArraySink()
        execute_reshard(plan, source, expected, memory_cap=1 << 20)
        assert not np.array_equal(expected.arrays["user_item"], reader.read(TABLE))  # moved
        with OrbaxStepWriter(STEP, tmp_path / "7", chunk_bytes=CHUNK_BYTES,
                             buffer_bytes=BUFFER_BYTES) as writer:
            execute_reshard(plan, source, KeyedSink(writer, STACKS, key_of=adagrad_key),
                            memory_cap=16 << 10)  # blocks of a few dozen rows
    with OrbaxReader(tmp_path / "7") as written:
        for name, array in expected.arrays.items():
            assert written.read(adagrad_key(name)).tobytes() == array.tobytes(), name
        assert written.read("model/dense/kernel/value").tobytes() == \
            known_values("model/dense/kernel/value", (16, 4)).tobytes()


def test_blocks_of_any_size_and_the_default_chunks(tmp_path: Path) -> None:
    values = known_values(TABLE, (NEW_ROWS, 8))
    sizes = [0, 1, 250, 7, 0, 510]  # 768 rows in odd blocks, empty ones included
    parts, at = [], 0
    for size in sizes:
        parts.append(values[at:at + size])
        at += size
    with OrbaxStepWriter(STEP, tmp_path / "7") as writer:
        writer.add_rows(TABLE, (NEW_ROWS, 8), np.float32, iter(parts))
    with OrbaxReader(tmp_path / "7") as written:
        np.testing.assert_array_equal(written.read(TABLE), values)
    stored = json.loads((tmp_path / "7" / "model" / "array_metadatas" / "process_0").read_text())
    shapes = {m["array_metadata"]["param_name"]: m["array_metadata"]["chunk_shape"]
              for m in stored["array_metadatas"]}
    assert shapes["embedding_layer.embedding_table.value.user_item.table"] == [384, 8]


def test_an_unchanged_step_is_copied_file_for_file(tmp_path: Path) -> None:
    with OrbaxStepWriter(STEP, tmp_path / "7"):
        pass
    files = sorted(p.relative_to(STEP) for p in STEP.rglob("*") if p.is_file())
    assert sorted(p.relative_to(tmp_path / "7") for p in (tmp_path / "7").rglob("*")
                  if p.is_file()) == files
    for name in files:
        assert (tmp_path / "7" / name).read_bytes() == (STEP / name).read_bytes()


# -- refusals and clean-up ------------------------------------------------------------------------

@pytest.mark.parametrize("planted", ["folder", "file", "link", "dangling link"])
def test_an_existing_target_is_refused_and_left_alone(tmp_path: Path, planted: str) -> None:
    target = tmp_path / "7"
    if planted == "folder":
        target.mkdir()
    elif planted == "file":
        target.write_text("keep")
    elif planted == "link":
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere")
    else:
        target.symlink_to(tmp_path / "nowhere")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(OutputError, match="never over anything") as info:
        OrbaxStepWriter(STEP, target)
    assert info.value.path == str(target)
    assert sorted(os.listdir(tmp_path)) == before
    if planted == "link":
        assert os.listdir(tmp_path / "elsewhere") == []


def test_a_target_inside_the_source_or_without_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="inside the input"):
        OrbaxStepWriter(STEP, STEP / "model" / "8")
    with pytest.raises(OutputError, match="does not exist; create it first"):
        OrbaxStepWriter(STEP, tmp_path / "missing" / "7")
    assert not (tmp_path / "missing").exists()
    (tmp_path / "file").write_text("keep")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        OrbaxStepWriter(STEP, tmp_path / "file" / "out" / "7", make_dirs=True)
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_without_tensorstore_one_clear_error(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import without_tensorstore

    without_tensorstore(monkeypatch)
    with pytest.raises(InputError, match=r"pip install 'tpuemb\[orbax\]'"):
        OrbaxStepWriter(STEP, tmp_path / "7")
    assert os.listdir(tmp_path) == []


def test_bad_input_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not an Orbax step folder") as info:
        OrbaxStepWriter(STEP.parent, tmp_path / "7")
    assert info.value.path == str(STEP.parent)
    with OrbaxStepWriter(STEP, tmp_path / "7") as writer:
        with pytest.raises(InputError, match="no array 'model/nothing'"):
            writer.add_rows("model/nothing", (8, 8), np.float32, [])
    # 767 rows cannot split over the 2 devices of the stack's sharding: refused, nothing left.
    with pytest.raises(InputError, match=r"767\) does not split over the 2 devices"), \
            OrbaxStepWriter(STEP, tmp_path / "8") as writer:
        writer.add_rows(TABLE, (767, 8), np.float32, [np.zeros((767, 8), np.float32)])
    assert sorted(os.listdir(tmp_path)) == ["7"]


def test_a_wrong_block_abandons_the_write(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the chunks hold 700 rows"):  # noqa: PT012
        with OrbaxStepWriter(STEP, tmp_path / "7") as writer:
            writer.add_rows(TABLE, (NEW_ROWS, 8), np.float32, [np.zeros((700, 8), np.float32)])
    with pytest.raises(ValueError, match="does not fit rows"), \
            OrbaxStepWriter(STEP, tmp_path / "7") as writer:
        writer.add_rows(TABLE, (NEW_ROWS, 8), np.float32, [np.zeros((8, 4), np.float32)])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("where", ["add_rows", "after add_rows"])
def test_an_interrupt_leaves_nothing(tmp_path: Path, where: str) -> None:
    out = tmp_path / "manager"

    def interrupted() -> Iterator[np.ndarray]:
        yield np.zeros((256, 8), np.float32)
        yield np.zeros((256, 8), np.float32)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), \
            OrbaxStepWriter(STEP, out / "7", make_dirs=True, chunk_bytes=CHUNK_BYTES,
                            buffer_bytes=BUFFER_BYTES) as writer:
        if where == "add_rows":
            writer.add_rows(TABLE, (NEW_ROWS, 8), np.float32, interrupted())
        else:
            writer.add_rows(TABLE, (NEW_ROWS, 8), np.float32, [np.zeros((768, 8), np.float32)])
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []  # the step, its temporary folder and the made parent


def test_an_interrupt_while_finishing_leaves_nothing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    copied = []
    real_copy = shutil.copyfile

    def copy_then_interrupt(source: str, target: str) -> None:
        copied.append(source)
        if len(copied) == 3:
            raise KeyboardInterrupt
        real_copy(source, target)

    monkeypatch.setattr("tpuemb_cfg.formats.orbax_write.shutil.copyfile", copy_then_interrupt)
    with pytest.raises(KeyboardInterrupt), OrbaxStepWriter(STEP, tmp_path / "7") as writer:
        writer.add_rows(TABLE, (NEW_ROWS, 8), np.float32, [np.zeros((768, 8), np.float32)])
    assert len(copied) == 3
    assert os.listdir(tmp_path) == []


def test_a_target_appearing_meanwhile_is_never_written_over(tmp_path: Path) -> None:
    target = tmp_path / "7"
    with pytest.raises(OutputError, match="appeared while"):  # noqa: PT012
        with OrbaxStepWriter(STEP, target) as writer:
            writer.add_rows(TABLE, (NEW_ROWS, 8), np.float32, [np.zeros((768, 8), np.float32)])
            target.mkdir()
            (target / "theirs").write_text("keep")
    assert os.listdir(tmp_path) == ["7"]
    assert os.listdir(target) == ["theirs"]


def test_an_abrupt_exit_removes_the_temporary_folder(tmp_path: Path) -> None:
    from tpuemb_cfg.formats.atomic import remove_temporaries

    writer = OrbaxStepWriter(STEP, tmp_path / "7")
    writer.add_rows(TABLE, (NEW_ROWS, 8), np.float32, [np.zeros((768, 8), np.float32)])
    assert len(os.listdir(tmp_path)) == 1
    remove_temporaries()  # what the CLI does on a second Ctrl-C, before it exits
    assert os.listdir(tmp_path) == []
    with pytest.raises(OutputError, match="cannot write"):  # had it gone on: a named error
        writer.finish()
    assert os.listdir(tmp_path) == []


def test_files_replaced_are_checked(tmp_path: Path) -> None:
    with OrbaxStepWriter(STEP, tmp_path / "made" / "7", make_dirs=True) as writer:
        with pytest.raises(ValueError, match="a path inside the step"):
            writer.replace_file("../escape", b"")
        with pytest.raises(ValueError, match="written from the arrays"):
            writer.replace_file("model/_METADATA", b"")
        with pytest.raises(InputError, match="has no folder"):
            writer.replace_file("nothing/file", b"")
        writer.abort()  # given up: nothing written, and leaving the block is no error
    assert os.listdir(tmp_path) == []


if __name__ == "__main__":
    print(write_case(Path(sys.argv[1]) / "jte_adagrad"))
    print(write_zarr3_case(Path(sys.argv[1]) / "zarr3_files"))
    print(write_restacked_case(Path(sys.argv[1]) / "restacked"))
    print(write_resharded_case(Path(sys.argv[1]) / "resharded_4x4"))
