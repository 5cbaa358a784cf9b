"""formats.orbax.OrbaxReader on the stored jax-tpu-embedding checkpoint (tests/data/checkpoints/
orbax, written by tools/jax_reference/orbax_checkpoints.py with jax-tpu-embedding 0.2.0 and
Orbax): every array bit for bit against its recipe, and bad input as an InputError."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.formats import orbax

CHECKPOINTS = Path(__file__).parent / "data" / "checkpoints" / "orbax"
MANAGER = CHECKPOINTS / "jte_adagrad"
STEP = MANAGER / "7"
STACKS = "model/embedding_layer/embedding_table/value"
#: The arrays and shapes the generator stored (the stacks' rows are jax-tpu-embedding's
#: stacking for 2 devices x 4 SparseCores: user 200 + item 100 -> 2 x 192 rows, country 50 -> 64).
SHAPES = {
    "model/dense/kernel/value": (16, 4),
    f"{STACKS}/country/slot/accumulator": (64, 16),
    f"{STACKS}/country/table": (64, 16),
    f"{STACKS}/user_item/slot/accumulator": (384, 8),
    f"{STACKS}/user_item/table": (384, 8),
}


def known_values(key: str, shape: tuple[int, ...]) -> np.ndarray:
    """The generator's recipe (tests/data/checkpoints/orbax/README.md)."""
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    return rng.standard_normal(shape).astype(np.float32)


def test_without_tensorstore_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import without_tensorstore

    without_tensorstore(monkeypatch)
    with pytest.raises(InputError, match=r"pip install 'tpuemb\[orbax\]'"):
        orbax.OrbaxReader(STEP)


def test_bad_input_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(InputError, match="not found") as info:
        orbax.OrbaxReader(missing)
    assert info.value.path == str(missing)
    with pytest.raises(InputError, match="not an Orbax checkpoint") as info:
        orbax.OrbaxReader(tmp_path)
    assert info.value.path == str(tmp_path)
    assert not orbax.is_orbax_checkpoint(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        orbax.OrbaxReader(tmp_path / "file")


def test_bad_metadata_names_the_file(ts_available: None, tmp_path: Path) -> None:
    item = tmp_path / "item"
    item.mkdir()
    (item / "_METADATA").write_text("{not json")
    with pytest.raises(InputError, match="not an Orbax item's metadata") as info:
        orbax.OrbaxReader(item)
    assert info.value.path == str(item / "_METADATA")


@pytest.fixture(scope="module")
def ts_available() -> None:
    pytest.importorskip("tensorstore", reason="the orbax extra (tensorstore) is not installed")


def test_keys_dtypes_shapes(ts_available: None) -> None:
    assert orbax.is_orbax_checkpoint(MANAGER) and orbax.is_orbax_checkpoint(STEP)
    with orbax.OrbaxReader(STEP) as reader:
        assert reader.keys() == sorted(SHAPES)
        for key, shape in SHAPES.items():
            assert reader.entry(key).shape == shape
            assert reader.entry(key).dtype == np.float32
    # the manager's folder opens at its last step; an item folder without the item prefix
    assert orbax.OrbaxReader(MANAGER).keys() == sorted(SHAPES)
    assert orbax.OrbaxReader(STEP / "model").keys() == sorted(k.removeprefix("model/")
                                                              for k in SHAPES)


def test_values_bit_for_bit(ts_available: None) -> None:
    reader = orbax.OrbaxReader(STEP)
    for key, shape in SHAPES.items():
        expected = known_values(key, shape)
        got = reader.read(key)
        assert got.dtype == np.float32 and got.tobytes() == expected.tobytes(), key


def test_read_rows_slices(ts_available: None) -> None:
    reader = orbax.OrbaxReader(STEP)
    key = f"{STACKS}/user_item/table"
    expected = known_values(key, SHAPES[key])
    # within the first device's chunk (192 rows), across both, the end, empty, past the end
    for start, stop in [(0, 5), (190, 194), (100, 384), (383, 384), (7, 7), (380, 500)]:
        assert reader.read_rows(key, start, stop).tobytes() == expected[start:stop].tobytes()
    with pytest.raises(InputError, match="no array"):
        reader.read("model/nothing")


def test_damaged_array_is_an_input_error(ts_available: None, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "7"
    shutil.copytree(STEP, copy)
    for blob in (copy / "model").rglob("d/*"):
        blob.write_bytes(b"\0" * 16)
    with pytest.raises(InputError) as info:
        reader = orbax.OrbaxReader(copy)
        for key in reader.keys():
            reader.read(key)
    assert str(copy) in str(info.value.path)


def test_find_jax_embedding_stacks_and_slots(ts_available: None) -> None:
    from tpuemb_cfg.checkpoints.embedding import JAX_KIND, find_jax_embedding

    # a source without the step's files (no read_file): no spec, so no layouts, and the slots
    # keep jax-tpu-embedding's names (with the spec: tests/test_checkpoint_jax.py)
    found = find_jax_embedding(_Only(orbax.OrbaxReader(MANAGER).keys()), label="ckpt")
    assert (found.kind, found.object_path, found.layouts) == (JAX_KIND, STACKS, ())
    assert [(v.name, v.owner, v.slot, v.shape) for v in found.variables] == [
        ("country", "country", "parameters", (64, 16)),
        ("country/accumulator", "country", "accumulator", (64, 16)),
        ("user_item", "user_item", "parameters", (384, 8)),
        ("user_item/accumulator", "user_item", "accumulator", (384, 8))]
    assert found.other_keys == ("model/dense/kernel/value",)
    with pytest.raises(InputError, match="no jax-tpu-embedding embedding variables"):
        find_jax_embedding(_Only(["model/dense/kernel/value"]), label="x")


class _Only:
    """The stored checkpoint with only some keys."""

    def __init__(self, keys: list[str]) -> None:
        self.reader = orbax.OrbaxReader(STEP)
        self._keys = keys

    def keys(self) -> list[str]:
        return self._keys

    def entry(self, key: str) -> orbax.OrbaxEntry:
        return self.reader.entry(key)

    def read(self, key: str) -> np.ndarray:
        return self.reader.read(key)

    def read_rows(self, key: str, start: int, stop: int) -> np.ndarray:
        return self.reader.read_rows(key, start, stop)


def test_cli_inspect_reads_an_orbax_folder(ts_available: None) -> None:
    import json

    from conftest import run_cli

    result = run_cli("checkpoint", "inspect", str(MANAGER), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["kind"] == "jax-tpu-embedding" and document["object_path"] == STACKS
    assert [(v["name"], v["key"].rpartition("/value/")[2]) for v in document["variables"]] == [
        ("country", "country/table"), ("country/accumulators", "country/slot/accumulator"),
        ("user_item", "user_item/table"),
        ("user_item/accumulators", "user_item/slot/accumulator")]
    assert [(t["table_name"], t["sparse_core_shard_row_offset"],
             t["sparse_core_shard_rotation"]) for t in document["layouts"]] == [
        ("country", 0, 0), ("item", 32, 4), ("user", 0, 0)]
