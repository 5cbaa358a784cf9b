"""``tpuemb diff``: what a change does on the TPU (``review.tpu``), with hand-derived numbers.

TensorFlow's stacker (docs/sparsecore/stacking-tensorflow.md): N SparseCores; a table's padded
rows are its rows rounded up to a multiple of 8N; the k-th table of a stack starts at row
(padded rows before it) / N of each SparseCore and is rotated by k x (SparseCores per chip).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

import tpuemb_cfg
from tpuemb_cfg import DiffOptions, SideOptions

EXAMPLE = ROOT / "examples" / "sparsecore" / "v6e_dcnv2.py"
NEXT = ROOT / "examples" / "diff" / "v6e_dcnv2_next.py"


def _pad(rows: int, n: int) -> int:
    return -(-rows // (8 * n)) * 8 * n


def _by(changes: tuple, subject: str) -> dict:
    return {c.name: c for c in changes if c.subject == subject}


def test_a_table_added_to_a_stack_names_every_table_that_moves() -> None:
    """v6e-64: 64 chips x 2 SparseCores, N = 128. NEW adds 'shop' (width 32) to the stack of
    'brand' and 'category', and grows 'item_terms' from 5 to 6 million rows."""
    result = tpuemb_cfg.diff(EXAMPLE, NEXT, DiffOptions(findings=False, checkpoint=False))
    stacks = _by(result.changes, "stack")
    n = 128
    # the stack of brand and category takes shop: its stacked name changes, both tables move
    assert stacks["brand_category_shop"].kind == "added"
    assert stacks["brand_category_shop"].new == ["brand", "category", "shop"]
    assert stacks["brand_category"].kind == "removed"
    for name in ("brand", "category"):
        assert stacks[name].old["stacked_table_name"] == "brand_category"
        assert stacks[name].new["stacked_table_name"] == "brand_category_shop"
        # the stack's rows per SparseCore: its tables' padded rows / N
        assert stacks[name].field == "stacked_table_name,total_rows_per_sparse_core_shard"
        assert stacks[name].old["total_rows_per_sparse_core_shard"] == (
            _pad(1_000_000, n) + _pad(200_000, n)) // n == 9_384
        assert stacks[name].new["total_rows_per_sparse_core_shard"] == (
            _pad(1_000_000, n) + _pad(200_000, n) + _pad(300_000, n)) // n == 11_728
    # item_terms grows: its padding, and the row offset of query_terms after it
    assert stacks["item_terms"].old["padded_rows"] == _pad(5_000_000, n) == 5_000_192
    assert stacks["item_terms"].new["padded_rows"] == _pad(6_000_000, n) == 6_000_640
    assert stacks["query_terms"].old["sparse_core_shard_row_offset"] == 5_000_192 // n
    assert stacks["query_terms"].new["sparse_core_shard_row_offset"] == 6_000_640 // n
    assert stacks["query_terms"].field == (
        "sparse_core_shard_row_offset,total_rows_per_sparse_core_shard")
    # nothing else moved: exactly these tables and stacks
    assert set(stacks) == {"brand_category_shop", "brand_category", "brand", "category",
                           "item_terms", "query_terms"}
    # the limits keyed 'brand_category' (512) no longer apply: TensorFlow's default, 256
    limits = _by(result.changes, "stack_limit")
    assert set(limits) == {"brand_category_shop"}
    assert limits["brand_category_shop"].old["max_ids_per_partition"] == 512
    assert limits["brand_category_shop"].new["max_ids_per_partition"] == 256
    # every finding is at NEW's lines; what only OLD has, at OLD's
    for found in result.findings:
        assert found.path == (str(EXAMPLE) if "is gone" in found.message else str(NEXT)), found
        assert found.line, found
    text = NEXT.read_text().splitlines()
    at = {d.message.split("'")[1]: d.line for d in result.findings if d.rule == "DIFF006"}
    assert text[at["query_terms"] - 1].startswith("query_terms = TableConfig(")
    assert text[at["brand_category_shop"] - 1].startswith("brand = TableConfig(")


def test_the_findings_the_change_brings_are_reported_at_new_lines() -> None:
    result = tpuemb_cfg.diff(EXAMPLE, NEXT, DiffOptions(checkpoint=False))
    found = [c for c in result.changes if c.subject == "finding"]
    assert {(c.kind, c.name) for c in found} == {("added", "SC001"), ("added", "SC002")}
    # SC001: the limit keys 'brand_category' name no stacked table any more (lines 49, 54)
    lines = sorted(c.new_location[1] for c in found if c.name == "SC001")
    text = NEXT.read_text().splitlines()
    assert [text[line - 1].strip().startswith('"brand_category"') for line in lines] == [
        True, True]
    assert {d.rule for d in result.findings} >= {"DIFF006", "DIFF007", "DIFF009"}


def test_v5p_64_to_v6e_32_relayouts_every_table_by_its_sparsecores() -> None:
    """v5p-64: 32 chips x 4 SparseCores (N = 128); v6e-32: 32 chips x 2 (N = 64)."""
    result = tpuemb_cfg.diff(EXAMPLE, EXAMPLE, DiffOptions(
        old=SideOptions(topology="v5p-64"), new=SideOptions(topology="v6e-32"),
        findings=False, checkpoint=False))
    stacks = _by(result.changes, "stack")
    category = stacks["category"]
    assert category.old["padded_rows"] == _pad(200_000, 128) == 200_704
    assert category.new["padded_rows"] == _pad(200_000, 64) == 200_192
    # second of its stack, after brand: offset = brand's padded rows / N; rotation = cores/chip
    assert category.old["sparse_core_shard_row_offset"] == _pad(1_000_000, 128) // 128
    assert category.new["sparse_core_shard_row_offset"] == _pad(1_000_000, 64) // 64
    assert (category.old["sparse_core_shard_rotation"],
            category.new["sparse_core_shard_rotation"]) == (4, 2)
    # the first table of a stack keeps offset 0 and rotation 0; its padding, its stack's rows
    # per SparseCore and N change
    assert set(stacks["item_id"].field.split(",")) == {
        "padded_rows", "total_rows_per_sparse_core_shard", "num_sparse_cores"}
    # brand: first of its stack, padded to 1,000,448 rows under both N; only N and the rows
    # per SparseCore change - every table of the slice is named
    assert _pad(1_000_000, 128) == _pad(1_000_000, 64) == 1_000_448
    assert set(stacks["brand"].field.split(",")) == {
        "total_rows_per_sparse_core_shard", "num_sparse_cores", "per_sparse_core_batch_size"}
    # the first feature's table (TensorFlow gives it the batch): 512 per replica / cores per chip
    assert (stacks["brand"].old["per_sparse_core_batch_size"],
            stacks["brand"].new["per_sparse_core_batch_size"]) == (512 // 4, 512 // 2)
    assert set(stacks) == {"brand", "category", "item_id", "user_id", "item_terms",
                           "query_terms"}
    memory = _by(result.changes, "memory")
    # the same bytes per chip over as many chips; each SparseCore holds twice as much
    assert memory["chip"].old["capacity_bytes"] == 95 * 2**30
    assert memory["chip"].new["capacity_bytes"] == 32 * 2**30
    assert memory["sparsecore"].new["bytes"] > 1.9 * memory["sparsecore"].old["bytes"]


def test_identical_configurations_have_no_differences() -> None:
    result = tpuemb_cfg.diff(EXAMPLE, EXAMPLE)
    assert result.changes == () and result.findings == () and not result.breaking


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github", "markdown"])
def test_every_format_renders(fmt: str) -> None:
    from tpuemb_cfg.review.report import render

    result = tpuemb_cfg.diff(EXAMPLE, NEXT)
    text = render(fmt, result)
    assert "brand_category_shop" in text


def test_sarif_and_github_annotate_new_file(tmp_path: Path) -> None:
    import json

    from tpuemb_cfg.review.report import render

    result = tpuemb_cfg.diff(EXAMPLE, NEXT)
    sarif = json.loads(render("sarif", result))
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
            for r in sarif["runs"][0]["results"] for loc in r["locations"]}
    assert uris == {"file://" + str(NEXT)}
    rules = {r["id"] for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert {"DIFF001", "DIFF006"} <= rules
    github = render("github", result).splitlines()
    assert all(line.startswith(("::notice ", "::warning ", "::error ")) for line in github)
    assert any(f"file={NEXT}" in line and "DIFF006" in line for line in github)


def test_keras_rs_moving_from_tensorflow_to_jax_restacks_the_mlperf_model() -> None:
    """keras-rs' MLPerf DLRM-DCNv2 on v6e-32 (N = 64): on TensorFlow, TensorFlow's stacker
    (tables sorted by name, one stack per width and optimizer below the limits; the limits of
    keras-rs' conversion are lost: 256); on JAX, jax-tpu-embedding's (tables in feature order,
    every table of the width in one stack, each stack's limits the largest of its tables')."""
    spec = ROOT / "examples" / "sparsecore" / "keras_rs_dcnv2_v6e32.py"
    result = tpuemb_cfg.diff(spec, spec, DiffOptions(
        old=SideOptions(keras_backend="tensorflow"), new=SideOptions(keras_backend="jax"),
        checkpoint=False))
    stacks = _by(result.changes, "stack")
    n = 64
    rows_0 = _pad(40_000_000, n)
    assert rows_0 == 40_000_000  # a multiple of 8 x 64 already
    # TensorFlow: '0', '1', '10', ... (by name); '10' third, after '0' and '1' (39,060 rows)
    assert stacks["10"].old["sparse_core_shard_row_offset"] == (rows_0 + _pad(39_060, n)) // n
    assert stacks["10"].old["sparse_core_shard_rotation"] == 2 * 2  # k = 2, 2 cores per chip
    # JAX: feature order '0', '10', ...: '10' second
    assert stacks["10"].new["sparse_core_shard_row_offset"] == rows_0 // n == 625_000
    assert stacks["10"].new["sparse_core_shard_rotation"] == 1 * 2
    assert stacks["10"].new["stacked_table_name"] == "0_10_11_19_1_20_21_22_9"
    assert {stacks[t].old["stacked_table_name"] for t in ("21", "9")} == {"21_9"}
    limits = _by(result.changes, "stack_limit")
    change = limits["0_10_11_19_1_20_21_22_9"]
    assert (change.old["max_ids_per_partition"], change.new["max_ids_per_partition"]) == (
        256, 8192)
    assert (change.old["max_unique_ids_per_partition"],
            change.new["max_unique_ids_per_partition"]) == (256, 4096)
    # keras-rs on TensorFlow drops the tables' limits (SC004); on JAX it keeps them
    gone = {c.name for c in result.changes if c.subject == "finding" and c.kind == "removed"}
    assert gone == {"SC004"}


def test_tensorflow_2_20_to_2_21_changes_one_layout_and_no_row() -> None:
    """TensorFlow 2.21 writes per_sparse_core_batch_size and num_features in each layout; both
    versions' stackers give them to the first feature's table only (keys sorted: 'brand', 512
    samples per replica / 2 SparseCores per chip = 256; one feature). Nothing moves."""
    result = tpuemb_cfg.diff(EXAMPLE, EXAMPLE, DiffOptions(
        old=SideOptions(tf_version="2.20"), new=SideOptions(tf_version="2.21")))
    stacks = _by(result.changes, "stack")
    assert set(stacks) == {"brand"}
    assert stacks["brand"].field == "per_sparse_core_batch_size,num_features"
    assert (stacks["brand"].old["per_sparse_core_batch_size"],
            stacks["brand"].new["per_sparse_core_batch_size"]) == (0, 512 // 2)
    assert (stacks["brand"].old["num_features"], stacks["brand"].new["num_features"]) == (0, 1)
    assert "keeps its rows" in stacks["brand"].message
    settings = _by(result.changes, "setting")
    assert settings["tf_version"].old == "2.20" and settings["tf_version"].new == "2.21"


def test_tpu7x_as_4_or_2_sparsecores_per_device() -> None:
    """jax-tpu-embedding first counted a TPU7x chip as one device of 4 SparseCores (commit
    080ed3e), then as two devices of 2 (fce2aef, "Megacore is disabled"; every release).
    8 chips, N = 32 either way: 8 partitions of 4 or 16 of 2. The second table of a stack is
    rotated by N / partitions: 4, then 2; nothing else of the rows moves."""
    from dataclasses import replace

    from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
    from tpuemb_cfg.sparsecore.topology import Topology, parse_topology

    spec = ROOT / "examples" / "sparsecore" / "v5p_jax_ranking.py"
    config = load_sparsecore_spec(str(spec), legacy=False).config
    two = parse_topology("tpu7x-16")
    assert (two.chips, two.devices, two.num_sparse_cores) == (8, 16, 32)
    four = Topology(chips=8, sparse_cores_per_chip=4, hosts=two.hosts, kind=two.kind,
                    devices_per_chip=1)
    result = tpuemb_cfg.diff(replace(config, topology=four), replace(config, topology=two),
                             DiffOptions(checkpoint=False))
    topology = {c.field: (c.old, c.new) for c in result.changes if c.subject == "topology"}
    assert topology == {"devices": (8, 16), "sparse_cores_per_device": (4, 2)}
    stacks = _by(result.changes, "stack")
    assert set(stacks) == {"query", "user", "document"}
    # 'query_user': query first (offset 0, rotation 0), user second
    assert (stacks["user"].old["sparse_core_shard_rotation"],
            stacks["user"].new["sparse_core_shard_rotation"]) == (32 // 8, 32 // 16)
    for name in ("query", "document"):  # their rows stay: only the partition count differs
        assert stacks[name].field == "num_partitions"
        assert "keeps its rows" in stacks[name].message


def test_a_sample_shows_the_drops_of_lower_limits(tmp_path: Path) -> None:
    """NEW lowers 'item_id_user_id' to 16 ids per partition: on TensorFlow (no id dropping)
    every step of the sample exceeds it, so every id of its two tables counts as dropped
    (2 steps x 32,768 rows x 2 features), where OLD dropped none."""
    import subprocess
    import sys

    low = tmp_path / "low.py"
    low.write_text(EXAMPLE.read_text().replace('"item_id_user_id": 512,', '"item_id_user_id": 16,'))
    sample = tmp_path / "day.npz"
    subprocess.run([sys.executable, str(ROOT / "examples" / "plan" / "zipf_sample.py"),
                    str(EXAMPLE), "-o", str(sample), "--rows", "65536", "--batch", "32768"],
                   check=True, capture_output=True)
    seen: list[str] = []
    result = tpuemb_cfg.diff(EXAMPLE, low, DiffOptions(ids=str(sample), checkpoint=False),
                             on_sample=lambda planner, label: seen.append(label))
    assert seen == [str(EXAMPLE), str(low)]
    load = _by(result.changes, "load")
    drops = load["item_id_user_id"]
    assert (drops.old["dropped"], drops.new["dropped"]) == (0, 2 * 32_768 * 2)
    assert (drops.old["failed_steps"], drops.new["failed_steps"]) == (0, 2)
    assert drops.severity == "warning"
    assert set(load) == {"item_id_user_id"}  # the other stacks drop nothing on either side



def _ckpt(result: object) -> set[str]:
    return {d.rule for d in result.findings if d.rule.startswith("CKPT")}  # type: ignore[attr-defined]


def test_the_checkpoint_of_each_change_as_tensorflow_2_21_restores_it(tmp_path: Path) -> None:
    """What TensorFlow 2.21's adapter does (docs/diff/checkpoints.md; seen on a CPU:
    tests/data/diff/breaking): a table added refuses the whole restore; a vocabulary change
    inside a stack gives a tensor of the wrong size; a new slice or TensorFlow 2.20 -> 2.21
    reshards every stack but silently leaves the slots at their initial values; an optimizer
    without Adagrad's accumulators drops them."""
    added = tpuemb_cfg.diff(EXAMPLE, NEXT)
    assert added.checkpoint.outcome == "fails" and added.breaking
    assert "CKPT001" in _ckpt(added)
    assert added.checkpoint.changed_tables == ("shop",)

    grown = tmp_path / "grown.py"
    grown.write_text(EXAMPLE.read_text().replace(
        "item_terms = TableConfig(vocabulary_size=5_000_000",
        "item_terms = TableConfig(vocabulary_size=6_000_000"))
    result = tpuemb_cfg.diff(EXAMPLE, grown)
    assert result.checkpoint.outcome == "fails" and _ckpt(result) >= {"CKPT002"}

    for options in (DiffOptions(old=SideOptions(topology="v5p-64"),
                                new=SideOptions(topology="v6e-32")),
                    DiffOptions(old=SideOptions(tf_version="2.20"),
                                new=SideOptions(tf_version="2.21"))):
        result = tpuemb_cfg.diff(EXAMPLE, EXAMPLE, options)
        assert (result.checkpoint.outcome, result.checkpoint.adapter) == ("wrong", "applied")
        verdicts = {v.variable: v.outcome for v in result.checkpoint.verdicts}
        stacks = ("brand_category", "item_id_user_id", "item_terms_query_terms")
        assert verdicts == {**{s: "reshards" for s in stacks},
                            **{f"{s}/accumulators": "lost" for s in stacks}}
        assert _ckpt(result) == {"CKPT004", "CKPT009"}

    sgd = tmp_path / "sgd.py"
    sgd.write_text(EXAMPLE.read_text().replace(
        "optimizer = Adagrad(learning_rate=0.01, initial_accumulator_value=0.1)",
        "optimizer = SGD(learning_rate=0.01)").replace(
            "    Adagrad,\n", "    Adagrad,\n    SGD,\n"))
    result = tpuemb_cfg.diff(EXAMPLE, sgd)
    optimizer = [c for c in result.changes if c.subject == "optimizer"]
    assert len(optimizer) == 6 and all("'accumulators' dropped" in c.message for c in optimizer)
    assert result.checkpoint.outcome == "restores" and result.breaking
    assert _ckpt(result) == {"CKPT006"}
    dropped = {v.variable for v in result.checkpoint.verdicts if v.outcome == "lost"}
    assert dropped == {"brand_category/accumulators", "item_id_user_id/accumulators",
                       "item_terms_query_terms/accumulators"}


def test_a_jax_side_has_no_tensorflow_checkpoint_to_compare() -> None:
    spec = ROOT / "examples" / "sparsecore" / "keras_rs_dcnv2_v6e32.py"
    result = tpuemb_cfg.diff(spec, spec, DiffOptions(
        old=SideOptions(keras_backend="tensorflow"), new=SideOptions(keras_backend="jax")))
    assert result.checkpoint is None and not result.breaking
    assert any("Orbax" in note for note in result.notes)
