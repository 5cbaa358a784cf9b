"""jax-tpu-embedding (Orbax) checkpoints: the stacking spec stored beside the arrays
(``model.jax_checkpoint``), the variables named as TensorFlow names them, the state unstacked
(``simulate --init``), verify and the restore verdict, reshard to per-table variables.

Expected values are computed here by hand from the stored spec's numbers (padded table row j on
shard (j mod N + rotation) mod N, row offset + j div N) and the generator's recipe for the
arrays (tests/data/checkpoints/orbax/README.md), never by tpuemb's sharding module."""

from __future__ import annotations

import shutil
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.checkpoints.embedding import JAX_KIND, find_jax_embedding
from tpuemb_cfg.checkpoints.state import (
    checkpoint_files,
    checkpoint_state_bytes,
    is_checkpoint,
    read_checkpoint_state,
)
from tpuemb_cfg.checkpoints.verify import initial_values, verify
from tpuemb_cfg.cli import main
from tpuemb_cfg.formats.bundle import BundleReader
from tpuemb_cfg.formats.orbax import OrbaxReader
from tpuemb_cfg.model.jax_checkpoint import (
    jax_key,
    jax_restore,
    jax_slot_name,
    layouts_from_embedding_spec,
    parse_embedding_spec,
    tensorflow_slot_name,
)
from tpuemb_cfg.review.checkpoints import view_of
from tpuemb_cfg.review.sides import SideOptions, load_side

DATA = Path(__file__).parent / "data" / "checkpoints"
MANAGER = DATA / "orbax" / "jte_adagrad"
STEP = MANAGER / "7"
SPEC_TEXT = STEP / "embedding_spec" / "proto.pbtxt"
#: jax-tpu-embedding's own serialization of the stored spec (its embedding_spec_pb2).
SPEC_BYTES = DATA / "jax" / "jte_adagrad_spec.binpb"
#: The same model as tpuemb reads jax-tpu-embedding's specs (auto-stacked: item_user).
CONFIG = DATA / "jax" / "jte_adagrad_spec.py"
STACKS = "model/embedding_layer/embedding_table/value"
#: (table, stack, vocabulary, dim, row offset, rotation, rows per shard) of the stored spec.
PLACES = (("user", "user_item", 200, 8, 0, 0, 48), ("item", "user_item", 100, 8, 32, 4, 48),
          ("country", "country", 50, 16, 0, 0, 8))
N = 8


def known(key: str, shape: tuple[int, int]) -> np.ndarray:
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    return rng.standard_normal(shape).astype(np.float32)


def table_by_hand(stack: str, part: str, name: str) -> np.ndarray:
    """Table ``name``'s rows in stack ``stack``'s array ``part`` (``table`` or
    ``slot/accumulator``), picked by the spec's numbers."""
    _, _, vocab, dim, offset, rotation, per_shard = next(p for p in PLACES if p[0] == name)
    stacked = known(f"{STACKS}/{stack}/{part}", (N * per_shard, 16 if stack == "country" else 8))
    rows = [stacked[((j % N + rotation) % N) * per_shard + offset + j // N] for j in range(vocab)]
    return np.stack(rows)[:, :dim]


def test_the_spec_proto_is_jax_tpu_embeddings_on_the_wire_and_in_text() -> None:
    text = SPEC_TEXT.read_text()
    spec = parse_embedding_spec(text, path=str(SPEC_TEXT))
    assert spec.SerializeToString() == SPEC_BYTES.read_bytes()
    from google.protobuf import text_format

    assert text_format.MessageToString(spec) == text


def test_layouts_from_the_spec_by_hand() -> None:
    spec = parse_embedding_spec(SPEC_TEXT.read_bytes(), path="spec")
    layouts = {t.table_name: t for t in layouts_from_embedding_spec(spec)}
    assert list(layouts) == ["country", "item", "user"]  # TensorFlow's order: by name
    for name, stack, vocab, dim, offset, rotation, per_shard in PLACES:
        t = layouts[name]
        assert (t.stacked_table_name, t.num_sparse_cores, t.total_rows_per_sparse_core_shard) == \
            (stack, N, per_shard)
        assert t.unsharded_shape == (vocab, dim)
        assert t.unsharded_padded_shape == ({"user": 256, "item": 128, "country": 64}[name], dim)
        assert (t.sparse_core_shard_row_offset, t.sparse_core_shard_rotation) == (offset, rotation)
        assert (t.num_partitions, t.per_sparse_core_batch_size, t.num_features) == (0, 0, 0)


def test_slot_names_both_ways() -> None:
    assert tensorflow_slot_name("adagrad", "accumulator") == "accumulators"
    assert tensorflow_slot_name("adam", "velocity") == "velocities"
    assert tensorflow_slot_name("ftrl", "linear") == "linears"
    assert jax_slot_name("adagrad_momentum", "momenta") == "momentum"
    assert tensorflow_slot_name(None, "local_step") == "local_step"  # F2A: unknown, kept
    assert jax_key("a/b", "s", "adam") == "a/b/s/table"
    assert jax_key("a/b", "s/velocities", "adam") == "a/b/s/slot/velocity"


@pytest.mark.parametrize("folder", [MANAGER, STEP, STEP / "model"])
def test_found_with_tensorflows_names_and_the_specs_layouts(folder: Path) -> None:
    with OrbaxReader(folder) as reader:
        found = find_jax_embedding(reader)
    item = folder.name == "model"  # an item folder's keys do not start with the item's name
    path = STACKS.removeprefix("model/") if item else STACKS
    assert found.kind == JAX_KIND and found.object_path == path
    assert [(v.name, v.key[len(path) + 1:], v.slot) for v in found.variables] == [
        ("country", "country/table", "parameters"),
        ("country/accumulators", "country/slot/accumulator", "accumulators"),
        ("user_item", "user_item/table", "parameters"),
        ("user_item/accumulators", "user_item/slot/accumulator", "accumulators")]
    assert [t.table_name for t in found.layouts] == ["country", "item", "user"]
    assert found.layouts_bytes == SPEC_TEXT.read_bytes()
    assert found.other_keys == ("dense/kernel/value" if item else "model/dense/kernel/value",)


def test_state_unstacked_by_the_spec_equals_the_rows_picked_by_hand() -> None:
    tables = [("user", 200, 8, ("accumulators",)), ("item", 100, 8, ("accumulators",)),
              ("country", 50, 16, ("accumulators",))]
    assert is_checkpoint(MANAGER) and is_checkpoint(STEP)
    state = read_checkpoint_state(MANAGER, tables)
    assert sorted(state) == ["slot/country/accumulators", "slot/item/accumulators",
                             "slot/user/accumulators", "table/country", "table/item",
                             "table/user"]
    for name, stack, *_ in PLACES:
        np.testing.assert_array_equal(state[f"table/{name}"], table_by_hand(stack, "table", name))
        np.testing.assert_array_equal(state[f"slot/{name}/accumulators"],
                                      table_by_hand(stack, "slot/accumulator", name))
    # what simulate --init refuses to overwrite, and what reading it may take
    assert str(SPEC_TEXT) in checkpoint_files(MANAGER)
    assert checkpoint_state_bytes(MANAGER) == 4 * (2 * 384 * 8 + 2 * 64 * 16 + 16 * 4)


def test_a_missing_spec_and_a_bad_spec_are_named(tmp_path: Path) -> None:
    copy = tmp_path / "ckpt"
    shutil.copytree(MANAGER, copy)
    spec = copy / "7" / "embedding_spec" / "proto.pbtxt"
    spec.write_text('stacked_table_specs {\n  stack_name: "a"\n  bogus: 1\n}\n')
    with OrbaxReader(copy) as reader, pytest.raises(InputError) as info:
        find_jax_embedding(reader)
    assert info.value.path.endswith("embedding_spec/proto.pbtxt")
    assert (info.value.line, info.value.column) == (3, 3) and "bogus" in str(info.value)
    spec.write_text('stacked_table_specs { stack_name: "a" stack_vocab_size: 12 '
                    'num_sparsecores: 8 }\n')
    with OrbaxReader(copy) as reader, pytest.raises(InputError, match="multiple of"):
        find_jax_embedding(reader)
    spec.unlink()
    spec.symlink_to(SPEC_TEXT)
    with OrbaxReader(copy) as reader, pytest.raises(InputError, match="symbolic link"):
        find_jax_embedding(reader)
    spec.unlink()
    with pytest.raises(InputError, match="stacking of the jax-tpu-embedding checkpoint"):
        read_checkpoint_state(copy, [("user", 200, 8, ())])
    result = CliRunner().invoke(main, ["checkpoint", "verify", str(copy), str(CONFIG)])
    assert result.exit_code == 2 and "no embedding_spec/proto.pbtxt" in result.output
    with OrbaxReader(copy) as reader:  # inspect still lists the arrays
        assert len(find_jax_embedding(reader).variables) == 4


def test_verify_against_the_auto_stacked_model_fails_as_orbax_would() -> None:
    """tpuemb's reading of the same specs auto-stacks item before user ('item_user'): Orbax's
    restore raises on the other tree (seen with orbax-checkpoint 0.12.8)."""
    side = load_side(str(CONFIG), SideOptions())
    with OrbaxReader(MANAGER) as reader:
        found = find_jax_embedding(reader)
        expected = view_of(side, found.object_path, jax=True)
        assert expected is not None and expected.kind == "jax"
        report = verify(reader, found, expected, initial=initial_values(side.config.tables))
    status = {v.name: v.status for v in report.variables}
    assert status == {"country": "ok", "country/accumulators": "ok", "item_user": "missing",
                      "item_user/accumulators": "missing", "user_item": "extra",
                      "user_item/accumulators": "extra"}
    assert report.layouts_differ == ("item", "user")
    assert report.restore.outcome == "fails" and "tree structures" in report.restore.error
    # the country accumulators are draws, none at Adagrad's initial 0.1
    [acc] = [s for s in report.states if s.slot == "accumulators"]
    assert (acc.table, acc.rows, acc.initial, acc.initial_value) == ("country", 50, 0, 0.1)
    result = CliRunner().invoke(main, ["checkpoint", "verify", str(MANAGER), str(CONFIG)])
    assert result.exit_code == 1
    assert "(jax-tpu-embedding, Orbax): fails" in result.output


def test_equal_shapes_under_another_layout_restore_silently_wrong() -> None:
    with OrbaxReader(MANAGER) as reader:
        view = find_jax_embedding(reader).view()
    assert jax_restore(view, view).outcome == "restores"
    moved = tuple(replace(t, sparse_core_shard_rotation=2) if t.table_name == "item" else t
                  for t in view.layouts)
    report = jax_restore(view, replace(view, layouts=moved))
    assert report.outcome == "wrong" and report.breaking
    assert {v.variable for v in report.verdicts if v.outcome == "lost"} == {
        "user_item", "user_item/accumulators"}
    smaller = replace(view, variables=tuple(
        replace(v, shape=(192, 8)) if v.name == "user_item" else v for v in view.variables))
    assert jax_restore(view, smaller).outcome == "fails"


def test_reshard_unstacks_a_jax_checkpoint_into_tensorflows_per_table_variables(
        tmp_path: Path) -> None:
    out = tmp_path / "tables"
    result = CliRunner().invoke(main, ["checkpoint", "reshard", str(MANAGER), str(CONFIG),
                                       "--unstack", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    with BundleReader(str(out)) as reader:
        for name, stack, *_ in PLACES:
            key = f"embedding/{name}/.ATTRIBUTES/VARIABLE_VALUE"
            np.testing.assert_array_equal(reader.read(key), table_by_hand(stack, "table", name))
            slot = f"embedding/{name}.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE"
            np.testing.assert_array_equal(reader.read(slot),
                                          table_by_hand(stack, "slot/accumulator", name))
    inside = STEP / "out"
    result = CliRunner().invoke(main, ["checkpoint", "reshard", str(MANAGER), str(CONFIG),
                                       "--unstack", "-o", str(inside), "-q"])
    assert result.exit_code == 2 and "inside the checkpoint folder" in result.output
    assert not list(STEP.glob("out*"))


def test_simulate_starts_from_a_jax_checkpoint(tmp_path: Path) -> None:
    """One step from the checkpoint's state: every row the step did not touch (at most 64 ids
    per table) is still the checkpoint's row, picked by hand. The stored arrays are draws, so
    Adagrad's negative accumulators give NaN on touched rows: the run warns with the cause."""
    run = tmp_path / "run"
    result = CliRunner().invoke(main, ["simulate", str(CONFIG), "--init", str(MANAGER),
                                       "--steps", "1", "--out-dir", str(run), "-q",
                                       "--tables", "all"])
    assert result.exit_code == 0, result.output
    assert "the square root of the negative" in result.output
    with np.load(run / "tables.npz") as tables:
        for name, stack, vocab, *_ in PLACES:
            for key, part in ((f"table/{name}", "table"),
                              (f"slot/{name}/accumulators", "slot/accumulator")):
                same = (tables[key] == table_by_hand(stack, part, name)).all(axis=1)
                assert vocab - 64 <= same.sum() < vocab, key


# --- jte_tables: known per-table values, three optimizers, jax-tpu-embedding's conversions -------

TABLES = DATA / "orbax"
#: (table, vocabulary, dim, algorithm) of tests/data/checkpoints/orbax/jte_tables.
KNOWN = (("alpha", 30, 12, "adagrad"), ("mid", 60, 16, "adagrad"), ("zeta", 70, 10, "adagrad"),
         ("item", 45, 4, "adam"), ("user", 120, 8, "adam"), ("country", 50, 20, "ftrl"))
#: jax-tpu-embedding's slot names in TensorFlow's order (its *SlotVariables named tuples).
JTE_SLOTS = {"adagrad": ("accumulator",), "adam": ("momentum", "velocity"),
             "ftrl": ("accumulator", "linear")}


def _wanted() -> list[tuple[str, int, int, tuple[str, ...]]]:
    from tpuemb_cfg.algorithms import slot_names

    return [(name, vocab, dim, slot_names(algorithm)) for name, vocab, dim, algorithm in KNOWN]


@pytest.mark.parametrize("folder", ["jte_tables", "jte_tables_4x4", "jte_tables_1x4",
                                    "jte_tables_unstacked"])
def test_every_jte_layout_unstacks_to_the_known_values(folder: str) -> None:
    """jax-tpu-embedding's own checkpoint (2 x 4, stacks in an order other than their names'),
    its converter's 4 x 4, 1 x 4 and per-table outputs: the same tables and slots, bit for bit,
    TensorFlow's slot names given to jax-tpu-embedding's in order."""
    from tpuemb_cfg.algorithms import slot_names

    state = read_checkpoint_state(TABLES / folder, _wanted())
    with np.load(TABLES / "jte_tables_values.npz") as known_values:
        for name, _, _, algorithm in KNOWN:
            np.testing.assert_array_equal(state[f"table/{name}"], known_values[f"table/{name}"])
            for ours, theirs in zip(slot_names(algorithm), JTE_SLOTS[algorithm], strict=True):
                np.testing.assert_array_equal(state[f"slot/{name}/{ours}"],
                                              known_values[f"slot/{name}/{theirs}"])
    assert len(state) == 6 + 3 + 4 + 2


@pytest.mark.parametrize("target", ["jte_tables_4x4", "jte_tables_1x4"])
def test_reshard_equals_jax_tpu_embeddings_converter(target: str) -> None:
    """tpuemb's reshard of jte_tables (2 x 4) to the layouts of the converter's output: every
    real row and column bit for bit as jax-tpu-embedding wrote it; padding zero (the converter
    pads tables with NaN, slots with zero: never looked up)."""
    from tpuemb_cfg.algorithms import slot_names
    from tpuemb_cfg.checkpoints.reshard import ArraySink, KeyedSource, execute_reshard, plan_reshard
    from tpuemb_cfg.checkpoints.verify import table_rows

    with OrbaxReader(TABLES / "jte_tables") as old_reader, \
            OrbaxReader(TABLES / target) as new_reader:
        old = find_jax_embedding(old_reader)
        new = find_jax_embedding(new_reader)
        slots = {name: slot_names(algorithm) for name, _, _, algorithm in KNOWN}
        plan = plan_reshard(old.layouts, new.layouts, slots=slots)
        sink = ArraySink()
        execute_reshard(plan, KeyedSource(old_reader, key_of=lambda n: old.variable(n).key),
                        sink, memory_cap=1 << 20)
        assert sorted(sink.arrays) == sorted(v.name for v in new.variables)
        for variable in new.variables:
            theirs = new_reader.read(variable.key)
            ours = sink.arrays[variable.name]
            assert ours.shape == theirs.shape
            real = np.zeros(ours.shape, bool)
            for layout in new.layouts:
                if layout.stacked_table_name == variable.owner:
                    stacked, _ = table_rows(layout)
                    real[stacked, :layout.unsharded_shape[1]] = True
            np.testing.assert_array_equal(ours[real], theirs[real])
            assert not ours[~real].any()
            if variable.slot == "parameters":
                assert np.isnan(theirs[~real]).all()


def test_verify_the_converted_checkpoint_against_its_model_restores() -> None:
    config = str(DATA / "jax" / "jte_tables_4x4.py")
    result = CliRunner().invoke(main, ["checkpoint", "verify", str(TABLES / "jte_tables_4x4"),
                                       config])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith(": ok")
    assert "(jax-tpu-embedding, Orbax): restores" in result.output
    # the 2 x 4 original under the 4 x 4 model: other stacks (adagrad3, adam2), other shapes
    result = CliRunner().invoke(main, ["checkpoint", "verify", str(TABLES / "jte_tables"),
                                       config, "--json"])
    assert result.exit_code == 1
    import json

    document = json.loads(result.output)
    assert document["restore"]["outcome"] == "fails"
    assert {v["name"] for v in document["variables"] if v["status"] == "missing"} == {
        "alpha_mid_zeta", "alpha_mid_zeta/accumulators", "item_user", "item_user/momenta",
        "item_user/velocities"}
    assert {v["name"]: v["status"] for v in document["variables"]}["country/linears"] == "shape"


def test_across_tensorflow_and_jax_nothing_restores(tmp_path: Path) -> None:
    tf_config = str(Path(__file__).parents[1] / "examples" / "checkpoints" / "ranking_v6e.py")
    result = CliRunner().invoke(main, ["checkpoint", "verify", str(TABLES / "jte_tables"),
                                       tf_config])
    assert result.exit_code == 1
    assert "TensorFlow does not read it" in result.output
    # a TensorFlow checkpoint cannot seed a jax-tpu-embedding one: nothing to copy the rest from
    out = tmp_path / "tables"
    assert CliRunner().invoke(main, ["checkpoint", "reshard", str(TABLES / "jte_tables"),
                                     str(DATA / "jax" / "jte_tables_4x4.py"), "--unstack",
                                     "-o", str(out), "-q"]).exit_code == 0
    result = CliRunner().invoke(main, ["checkpoint", "reshard", str(out),
                                       str(DATA / "jax" / "jte_tables_4x4.py"), "-o",
                                       str(tmp_path / "jax")])
    assert result.exit_code == 2 and "tpuemb writes its Orbax checkpoints from one of its own" \
        in result.output
    assert not (tmp_path / "jax").exists()


@pytest.mark.parametrize("target", ["4x4", "1x4"])
def test_reshard_writes_the_step_jax_tpu_embedding_restores(tmp_path: Path, target: str) -> None:
    """``tpuemb checkpoint reshard`` of jte_tables (2 x 4) for the model on 4 x 4 / 1 x 4: the
    spec is jax-tpu-embedding's converter's, byte for byte; every real row as the converter
    wrote it; for 4 x 4 every array's bytes are those Orbax restored from the same step and
    jax-tpu-embedding's own restore gave back every known table and slot
    (written_restore_resharded_4x4.json, written_jte_restore_check_4x4.json:
    tools/jax_reference/restore_check.py on this command's output gives the same)."""
    import json

    out = tmp_path / "out"
    config = str(DATA / "jax" / "jte_tables_4x4.py")
    slice_ = ["--topology", "v5p:1"] if target == "1x4" else []  # 1 chip of 4 SparseCores
    result = CliRunner().invoke(main, ["checkpoint", "reshard", str(TABLES / "jte_tables"),
                                       config, "-o", str(out), "-q", *slice_])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"wrote {out / '7'}: 8 variable(s) stacked for ")
    theirs = TABLES / f"jte_tables_{target}" / "7"
    spec = "embedding_spec/proto.pbtxt"
    assert (out / "7" / spec).read_bytes() == (theirs / spec).read_bytes()
    state = read_checkpoint_state(out, _wanted())
    with np.load(TABLES / "jte_tables_values.npz") as known_values:
        np.testing.assert_array_equal(state["table/zeta"], known_values["table/zeta"])
        np.testing.assert_array_equal(state["slot/user/velocities"],
                                      known_values["slot/user/velocity"])
    verify_result = CliRunner().invoke(main, ["checkpoint", "verify", str(out), config,
                                              *slice_])
    assert verify_result.exit_code == 0 and "Orbax): restores" in verify_result.output
    if target == "4x4":
        restored = json.loads((TABLES / "written_restore_resharded_4x4.json").read_text())
        with OrbaxReader(out) as written:
            model = [key for key in written.keys() if key.startswith("model/")]
            assert sorted(restored["arrays"]) == model
            for key in model:
                array = written.read(key)
                assert restored["arrays"][key]["crc32"] == zlib.crc32(
                    np.ascontiguousarray(array).tobytes()), key
    # the same output again: refused, the step left as it is
    again = CliRunner().invoke(main, ["checkpoint", "reshard", str(TABLES / "jte_tables"),
                                      config, "-o", str(out), "-q"])
    assert again.exit_code == 2 and "exists" in again.output
    inside = CliRunner().invoke(main, ["checkpoint", "reshard", str(TABLES / "jte_tables"),
                                       config, "-o", str(TABLES / "jte_tables" / "x"), "-q"])
    assert inside.exit_code == 2 and "inside the input" in inside.output
    assert not (TABLES / "jte_tables" / "x").exists()


def test_ctrl_c_in_a_jax_reshard_leaves_nothing(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import interrupt_reshard, run_cli

    calls = interrupt_reshard(monkeypatch)
    out = tmp_path / "deep" / "out"
    result = run_cli("checkpoint", "reshard", str(TABLES / "jte_tables"),
                     str(DATA / "jax" / "jte_tables_4x4.py"), "-o", str(out), "-q",
                     "--max-memory", "64K")
    assert result.exit_code == 130, result.output
    assert calls[0] == 3 and list(tmp_path.iterdir()) == []  # not even the folders it made


def test_a_stack_of_one_unpadded_table_named_as_it_is_a_stack() -> None:
    """``big/table`` of 128 x 8 with a spec whose stack 'big' holds table 'big' of 128 x 8
    (nothing padded): the array is the stack, laid out on 8 SparseCores, not the table itself;
    the same array named after a table that is not a stack is a per-table array."""
    from tpuemb_cfg.checkpoints.embedding import MemorySource

    spec = ('stacked_table_specs { stack_name: "big" stack_vocab_size: 128 '
            'stack_embedding_dim: 8 num_sparsecores: 8 table_specs { table_name: "big" '
            'vocab_size: 128 embedding_dim: 8 padded_vocab_size: 128 padded_embedding_dim: 8 '
            'optimizer { type: SGD } } }')
    array = np.zeros((128, 8), np.float32)
    stacked = find_jax_embedding(MemorySource({"m/big/table": array}), spec=spec.encode())
    assert stacked.stacked and [t.table_name for t in stacked.layouts] == ["big"]
    spec_two = spec.replace('stack_name: "big"', 'stack_name: "big_stack"')
    alone = find_jax_embedding(MemorySource({"m/big/table": array}), spec=spec_two.encode())
    assert not alone.stacked and alone.layouts == ()


def test_a_grown_table_needs_resize_and_the_spec_says_its_new_shape(tmp_path: Path) -> None:
    grown = tmp_path / "grown.py"
    grown.write_text((DATA / "jax" / "jte_tables_4x4.py").read_text().replace(
        '("alpha", 30, 12, adagrad)', '("alpha", 40, 12, adagrad)'))
    out = tmp_path / "out"
    args = ["checkpoint", "reshard", str(TABLES / "jte_tables"), str(grown), "-o", str(out),
            "-q"]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 2 and "table 'alpha' is [30, 12]" in refused.output
    assert not out.exists()
    result = CliRunner().invoke(main, [*args, "--resize"])
    assert result.exit_code == 0, result.output
    spec = parse_embedding_spec((out / "7" / "embedding_spec" / "proto.pbtxt").read_bytes(),
                                path="spec")
    alpha = next(t for s in spec.stacked_table_specs for t in s.table_specs
                 if t.table_name == "alpha")
    assert (alpha.vocab_size, alpha.embedding_dim) == (40, 12)
    wanted = [("alpha", 40, 12, ("accumulators",)), *_wanted()[1:]]
    state = read_checkpoint_state(out, wanted)
    with np.load(TABLES / "jte_tables_values.npz") as known_values:
        np.testing.assert_array_equal(state["table/alpha"][:30], known_values["table/alpha"])
    assert not state["table/alpha"][30:].any()


@pytest.mark.parametrize("output", ["", " ", "{tmp}/", "{tmp}/.index"])
def test_an_output_that_names_no_checkpoint_is_refused(tmp_path: Path, output: str) -> None:
    """An empty -o once wrote '.index' and '.data-...' into the working folder."""
    before = sorted(Path.cwd().iterdir())
    result = CliRunner().invoke(main, ["checkpoint", "reshard", str(TABLES / "jte_tables"),
                                       str(DATA / "jax" / "jte_tables_4x4.py"), "--unstack",
                                       "-o", output.format(tmp=tmp_path), "-q"])
    assert result.exit_code == 2 and "expected a checkpoint prefix" in result.output
    assert sorted(Path.cwd().iterdir()) == before and list(tmp_path.iterdir()) == []


def test_a_jax_reshard_needs_a_step_and_an_output_folder(tmp_path: Path) -> None:
    config = str(DATA / "jax" / "jte_tables_4x4.py")
    result = CliRunner().invoke(main, ["checkpoint", "reshard", str(TABLES / "jte_tables"),
                                       config, "-o", "", "-q"])
    assert result.exit_code == 2 and "-o is empty" in result.output
    item = TABLES / "jte_tables" / "7" / "model"
    result = CliRunner().invoke(main, ["checkpoint", "reshard", str(item), config, "-o",
                                       str(tmp_path / "out"), "-q"])
    assert result.exit_code == 2 and "CKPT is an item folder" in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_spec_that_is_not_text_is_named_at_its_place(tmp_path: Path) -> None:
    copy = tmp_path / "ckpt"
    shutil.copytree(TABLES / "jte_tables", copy)
    (copy / "7" / "embedding_spec" / "proto.pbtxt").write_bytes(b"\xff\xfe garbage")
    result = CliRunner().invoke(main, ["checkpoint", "verify", str(copy),
                                       str(DATA / "jax" / "jte_tables_4x4.py")])
    assert result.exit_code == 2
    assert f"{copy / '7' / 'embedding_spec' / 'proto.pbtxt'}: error: not UTF-8" in result.output


def test_a_spec_that_disagrees_with_its_arrays_or_with_itself_is_refused() -> None:
    from tpuemb_cfg.checkpoints.embedding import MemorySource

    def spec(vocab: int, stack_rows: int, table_rows: int) -> bytes:
        return (f'stacked_table_specs {{ stack_name: "s" stack_vocab_size: {stack_rows} '
                f'stack_embedding_dim: 8 num_sparsecores: 8 table_specs {{ table_name: "t" '
                f'vocab_size: {vocab} embedding_dim: 8 padded_vocab_size: {table_rows} '
                f'padded_embedding_dim: 8 }} }}').encode()

    source = MemorySource({"m/s/table": np.zeros((64, 8), np.float32)})
    assert find_jax_embedding(source, spec=spec(50, 64, 64)).layouts[0].unsharded_shape == (50, 8)
    with pytest.raises(InputError, match="both positive"):
        find_jax_embedding(source, spec=spec(-1, 64, 64))
    with pytest.raises(InputError, match=r"by the spec, its array 'm/s/table' is \[64, 8\]"):
        find_jax_embedding(source, spec=spec(50, 8 * 10**15, 8 * 10**15))
    with pytest.raises(InputError, match="fill 8 rows"):
        find_jax_embedding(source, spec=spec(50, 128, 64))
    with pytest.raises(TypeError, match="bytes or str"):
        find_jax_embedding(source, spec=123)  # type: ignore[arg-type]


def test_the_step_writer_refuses_wrong_sizes(tmp_path: Path) -> None:
    from tpuemb_cfg.formats.orbax_write import OrbaxStepWriter

    for bad in ("x", 0, -1, True, 1.5):
        with pytest.raises(TypeError, match="chunk_bytes is a positive int"):
            OrbaxStepWriter(TABLES / "jte_tables" / "7", tmp_path / "7", chunk_bytes=bad)
    assert list(tmp_path.iterdir()) == []
