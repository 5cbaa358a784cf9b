"""``tpuemb checkpoint`` and ``checkpoints.state`` on checkpoints TensorFlow 2.21 wrote
(tests/data/checkpoints, tools/tf_reference/checkpoint_bundles.py): the generator filled every
table and slot with known values (``known``: a seeded NumPy draw per table and variable) and
let TensorFlow's own ``_shard_from_cpu_to_sc`` stack them, so the tables read back must be
exactly those values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, run_cli

from tpuemb_cfg.checkpoints.embedding import find_embedding
from tpuemb_cfg.checkpoints.state import state_from_checkpoint
from tpuemb_cfg.formats.bundle import BundleReader

DATA = ROOT / "tests" / "data" / "checkpoints"
SPECS = json.loads((DATA / "tf.json").read_text())["specs"]
SC_TABLES = [("user", 64, 8), ("item", 128, 8), ("cat", 32, 16)]


def known(table: str, variable: str, shape: tuple[int, ...]) -> np.ndarray:
    """The generator's values (tools/tf_reference/checkpoint_pairs.py ``known``)."""
    seed = sum(ord(c) * 131 ** i for i, c in enumerate(f"{table}/{variable}")) % 2 ** 32
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture()
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "sc.py"
    path.write_text(SPECS["sparsecore"])
    return path


def test_tensorflows_stacked_checkpoint_unstacks_into_the_known_tables() -> None:
    with BundleReader(DATA / "tf" / "sparsecore") as reader:
        found = find_embedding(reader)
        state = state_from_checkpoint(reader, found, [
            (name, rows, dim, ("accumulators",)) for name, rows, dim in SC_TABLES])
    assert sorted(state) == sorted(
        [f"table/{n}" for n, _, _ in SC_TABLES]
        + [f"slot/{n}/accumulators" for n, _, _ in SC_TABLES])
    for name, rows, dim in SC_TABLES:
        assert state[f"table/{name}"].tobytes() == known(
            name, "parameters", (rows, dim)).tobytes()
        assert state[f"slot/{name}/accumulators"].tobytes() == known(
            name, "accumulators", (rows, dim)).tobytes()


def test_export_writes_tensorflows_stacked_variables(tmp_path: Path, spec: Path) -> None:
    """The known tables exported for the spec: every stacked variable and the layouts equal
    what TensorFlow's TPUEmbeddingV2 saved, bit for bit."""
    state = {f"table/{n}": known(n, "parameters", (r, d)) for n, r, d in SC_TABLES}
    state |= {f"slot/{n}/accumulators": known(n, "accumulators", (r, d))
              for n, r, d in SC_TABLES}
    np.savez(tmp_path / "state.npz", **state)
    (tmp_path / "out").mkdir()
    result = run_cli("checkpoint", "export", str(tmp_path / "state.npz"), str(spec),
                     "-o", str(tmp_path / "out" / "ckpt"))
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"wrote {tmp_path / 'out' / 'ckpt'}: 4 variable(s)")
    with BundleReader(DATA / "tf" / "sparsecore") as theirs, \
            BundleReader(tmp_path / "out" / "ckpt") as ours:
        embedding = [k for k in theirs.keys() if k.startswith("embedding/")]
        assert sorted(ours.keys()) == sorted([*embedding, "_CHECKPOINTABLE_OBJECT_GRAPH"])
        for key in embedding:
            mine, tf = ours.read(key), theirs.read(key)
            if isinstance(tf, list):
                assert mine == tf, key
            else:
                assert mine.tobytes() == tf.tobytes(), key
    # verify agrees: everything there, nothing at its initial value, restores as it is
    result = run_cli("checkpoint", "verify", str(tmp_path / "out" / "ckpt"), str(spec))
    assert result.exit_code == 0, result.output
    assert "restore under" in result.output and result.output.rstrip().endswith("restores")


def test_inspect_lists_the_stacks(spec: Path) -> None:
    result = run_cli("checkpoint", "inspect", str(DATA / "tf" / "sparsecore.index"), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["kind"] == "sparsecore" and document["object_path"] == "embedding"
    assert [v["name"] for v in document["variables"]] == [
        "cat", "cat/accumulators", "item_user", "item_user/accumulators"]
    user = next(t for t in document["layouts"] if t["table_name"] == "user")
    # v5p:2 = 8 SparseCores; user second in 'item_user' after item's 128 rows: offset 128/8
    assert (user["sparse_core_shard_row_offset"], user["sparse_core_shard_rotation"]) == (16, 4)


def test_verify_finds_a_nan_and_a_wrong_configuration(tmp_path: Path, spec: Path) -> None:
    state = {f"table/{n}": known(n, "parameters", (r, d)) for n, r, d in SC_TABLES}
    state |= {f"slot/{n}/accumulators": np.full((r, d), 0.1, np.float32)
              for n, r, d in SC_TABLES}
    state["table/user"][5, 2] = np.inf
    np.savez(tmp_path / "state.npz", **state)
    assert run_cli("checkpoint", "export", str(tmp_path / "state.npz"), str(spec),
                   "-o", str(tmp_path / "ckpt")).exit_code == 0
    result = run_cli("checkpoint", "verify", str(tmp_path / "ckpt"), str(spec))
    assert result.exit_code == 1
    assert "user parameters: 1 row(s) with NaN or infinity" in result.output
    assert "user accumulators: 64 of 64 rows still at their initial value 0.1" in result.output
    other = tmp_path / "other.py"
    other.write_text(SPECS["sparsecore"].replace("vocabulary_size=64", "vocabulary_size=72"))
    result = run_cli("checkpoint", "verify", str(tmp_path / "ckpt"), str(other))
    assert result.exit_code == 1
    assert "shape: item_user: shape [192, 8], expected [256, 8]" in result.output


def test_bad_inputs_exit_2(tmp_path: Path, spec: Path) -> None:
    for args in (["inspect", str(tmp_path / "missing")],
                 ["inspect", str(tmp_path)],
                 ["verify", str(DATA / "tf" / "sparsecore"), str(tmp_path / "missing.py")],
                 ["export", str(tmp_path / "none.npz"), str(spec), "-o", str(tmp_path / "o")],
                 ["export", str(tmp_path / "none.npz"), str(spec), "-o",
                  str(DATA / "tf" / "sparsecore")],
                 ["inspect", str(DATA / "tf" / "sparsecore"), "--object-path", "a//b"],
                 ["inspect", str(DATA / "tf" / "sparsecore"), "--object-path", "nowhere"],
                 ["verify", str(DATA / "tf" / "sparsecore"), str(spec), "--topology",
                  "v5p:99999999999"],
                 ["reshard", str(DATA / "tf" / "sparsecore"), str(spec), "-o",
                  str(tmp_path / "r"), "--max-memory", "nan"]):
        result = run_cli("checkpoint", *args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output and result.output.strip(), args


def test_simulate_starts_from_a_real_checkpoint(tmp_path: Path) -> None:
    """`tpuemb simulate --init CKPT` (a mid-level API checkpoint TensorFlow wrote) replays
    exactly as from an .npz holding the generator's known tables and slots."""
    spec = tmp_path / "mid.py"
    spec.write_text(SPECS["mid_level"])
    config = tmp_path / "mid.pbtxt"
    assert run_cli("compile", str(spec), "-o", str(config)).exit_code == 0
    batches = tmp_path / "B.npz"
    result = run_cli("simulate", str(config), "--steps", "3", "--save-batches", str(batches),
                     "-q", "--out-dir", str(tmp_path / "syn"))
    assert result.exit_code == 0, result.output
    tables = [("user", 16, 4), ("item", 24, 8)]
    state = {f"table/{n}": known(n, "parameters", (r, d)) for n, r, d in tables}
    state |= {f"slot/{n}/{s}": known(n, s, (r, d)) for n, r, d in tables
              for s in ("momenta", "velocities")}
    np.savez(tmp_path / "state.npz", **state)
    outs = []
    for init in (str(DATA / "tf" / "mid_level"), str(DATA / "tf" / "mid_level.index"),
                 str(tmp_path / "state.npz")):
        out = tmp_path / f"O{len(outs)}.npz"
        result = run_cli("simulate", str(config), "--batches", str(batches), "--init", init,
                         "--out", str(out), "--combiner", "sum")
        assert result.exit_code == 0, result.output
        outs.append(np.load(out))
    for key in outs[2].files:
        assert outs[0][key].tobytes() == outs[2][key].tobytes(), key
        assert outs[1][key].tobytes() == outs[2][key].tobytes(), key
    result = run_cli("simulate", str(config), "--batches", str(batches), "--init",
                     str(DATA / "tf" / "sparsecore"), "--out", str(tmp_path / "x.npz"))
    assert result.exit_code == 2
    assert "table 'item': the checkpoint's layout holds (128, 8), the configuration (24, 8)" in (
        result.output)


def test_a_synthetic_sparsecore_run_starts_from_a_checkpoint(tmp_path: Path, spec: Path) -> None:
    """A SparseCore spec's synthetic run from a checkpoint tpuemb exported equals the run from
    the .npz it was exported from, and differs from the run from the spec's initializers."""
    state = {f"table/{n}": known(n, "parameters", (r, d)) for n, r, d in SC_TABLES}
    state |= {f"slot/{n}/accumulators": np.abs(known(n, "accumulators", (r, d))) + 0.1
              for n, r, d in SC_TABLES}
    np.savez(tmp_path / "state.npz", **state)
    assert run_cli("checkpoint", "export", str(tmp_path / "state.npz"), str(spec),
                   "-o", str(tmp_path / "ckpt")).exit_code == 0
    tables = []
    for name, init in (("ckpt", [str(tmp_path / "ckpt")]), ("npz", [str(tmp_path / "state.npz")]),
                       ("fresh", [])):
        args = ["simulate", str(spec), "--steps", "2", "-q", "--out-dir", str(tmp_path / name)]
        result = run_cli(*args, *(["--init", *init] if init else []))
        assert result.exit_code == 0, result.output
        tables.append(np.load(tmp_path / name / "tables.npz"))
    for key in tables[1].files:
        assert tables[0][key].tobytes() == tables[1][key].tobytes(), key
    assert any(tables[0][k].tobytes() != tables[2][k].tobytes() for k in tables[2].files)
    # an output over the --init files is refused before anything runs
    result = run_cli("simulate", str(spec), "--steps", "1", "--init",
                     str(tmp_path / "npz" / "tables.npz"), "--out-dir", str(tmp_path / "npz"))
    assert result.exit_code == 2 and "--init" in result.output
    result = run_cli("simulate", str(spec), "--init", str(tmp_path / "ckpt"), "--resume")
    assert result.exit_code == 2


def test_reshard_to_another_slice_restores_every_table_and_slot(tmp_path: Path,
                                                                 spec: Path) -> None:
    """TensorFlow's v5p:2 checkpoint resharded for v6e:4 (8 -> 8 SparseCores, 2 a chip: other
    rotations): verify then says it restores as it is, and it unstacks into the very tables
    and slots TensorFlow stacked - the slots too, which TensorFlow's adapter would reset."""
    target = tmp_path / "v6e.py"
    target.write_text(SPECS["sparsecore"].replace('topology = "v5p:2"', 'topology = "v6e:4"'))
    before = run_cli("checkpoint", "verify", str(DATA / "tf" / "sparsecore"), str(target))
    assert before.exit_code == 1 and "restore under" in before.output
    assert "(TensorFlow 2.21): wrong" in before.output  # the adapter drops the slots
    result = run_cli("checkpoint", "reshard", str(DATA / "tf" / "sparsecore"), str(target),
                     "-o", str(tmp_path / "v6e"), "-q", "--max-memory", "64K")
    assert result.exit_code == 0, result.output
    assert "4 variable(s) stacked for" in result.output and "resharded" in result.output
    after = run_cli("checkpoint", "verify", str(tmp_path / "v6e"), str(target))
    assert after.exit_code == 0, after.output
    assert after.output.rstrip().endswith("(TensorFlow 2.21): restores")
    with BundleReader(tmp_path / "v6e") as reader:
        found = find_embedding(reader)
        assert {t.table_name: t.sparse_core_shard_rotation for t in found.layouts} == {
            "cat": 0, "item": 0, "user": 2}  # 8 SparseCores on 4 chips: 2 a chip
        state = state_from_checkpoint(reader, found, [
            (name, rows, dim, ("accumulators",)) for name, rows, dim in SC_TABLES])
    for name, rows, dim in SC_TABLES:
        for slot in ("parameters", "accumulators"):
            key = f"table/{name}" if slot == "parameters" else f"slot/{name}/{slot}"
            assert state[key].tobytes() == known(name, slot, (rows, dim)).tobytes(), key
    # unstacked: the mid-level API's per-table variables
    result = run_cli("checkpoint", "reshard", str(tmp_path / "v6e"), str(target), "--unstack",
                     "-o", str(tmp_path / "flat"), "-q")
    assert result.exit_code == 0, result.output
    with BundleReader(tmp_path / "flat") as reader:
        found = find_embedding(reader, tables=["user", "item", "cat"])
        assert found.kind == "unsharded"
        assert reader.read(found.variable("user/accumulators").key).tobytes() == known(
            "user", "accumulators", (64, 8)).tobytes()


def test_ctrl_c_during_a_reshard_leaves_nothing(tmp_path: Path, spec: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import interrupt_reshard

    interrupt_reshard(monkeypatch)
    target = tmp_path / "v6e.py"
    target.write_text(SPECS["sparsecore"].replace('topology = "v5p:2"', 'topology = "v6e:4"'))
    result = run_cli("checkpoint", "reshard", str(DATA / "tf" / "sparsecore"), str(target),
                     "-o", str(tmp_path / "out"), "-q", "--max-memory", "64K")
    assert result.exit_code == 130, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sc.py", "v6e.py"]  # no output


def test_reshard_refuses_what_it_cannot_do(tmp_path: Path, spec: Path) -> None:
    grown = tmp_path / "grown.py"
    grown.write_text(SPECS["sparsecore"].replace("vocabulary_size=64", "vocabulary_size=72"))
    result = run_cli("checkpoint", "reshard", str(DATA / "tf" / "sparsecore"), str(grown),
                     "-o", str(tmp_path / "o"))
    assert result.exit_code == 2 and "table 'user'" in result.output
    assert "resize" in result.output
    result = run_cli("checkpoint", "reshard", str(DATA / "tf" / "sparsecore"), str(grown),
                     "-o", str(tmp_path / "o"), "--resize", "-q")
    assert result.exit_code == 0, result.output
    for bad in (["--max-memory", "12"], ["--max-memory", "lots"],
                ["-o", str(DATA / "tf" / "sparsecore")]):
        args = ["-o", str(tmp_path / "p"), *bad] if bad[0] != "-o" else bad
        result = run_cli("checkpoint", "reshard", str(DATA / "tf" / "sparsecore"), str(spec),
                         *args)
        assert result.exit_code == 2, (bad, result.output)
        assert "Traceback" not in result.output


def test_a_corrupt_checkpoint_is_refused_before_a_reshard_writes_anything(tmp_path: Path,
                                                                         spec: Path) -> None:
    import shutil

    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(DATA / "tf" / f"sparsecore{suffix}", tmp_path / f"bad{suffix}")
    data = bytearray((tmp_path / "bad.data-00000-of-00001").read_bytes())
    data[100] ^= 0xFF
    (tmp_path / "bad.data-00000-of-00001").write_bytes(bytes(data))
    for command in (["reshard", str(tmp_path / "bad"), str(spec), "-o", str(tmp_path / "out")],
                    ["verify", str(tmp_path / "bad"), str(spec)]):
        result = run_cli("checkpoint", *command)
        assert result.exit_code == 2, result.output
        assert "does not match its CRC-32C" in result.output
    assert not list(tmp_path.glob("out*"))
