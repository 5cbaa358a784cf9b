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
        assert stacks[name].field == "stacked_table_name"
    # item_terms grows: its padding, and the row offset of query_terms after it
    assert stacks["item_terms"].old["padded_rows"] == _pad(5_000_000, n) == 5_000_192
    assert stacks["item_terms"].new["padded_rows"] == _pad(6_000_000, n) == 6_000_640
    assert stacks["query_terms"].old["sparse_core_shard_row_offset"] == 5_000_192 // n
    assert stacks["query_terms"].new["sparse_core_shard_row_offset"] == 6_000_640 // n
    assert stacks["query_terms"].field == "sparse_core_shard_row_offset"
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
    # the first table of a stack keeps offset 0 and rotation 0; only its padding can move
    assert stacks["item_id"].field == "padded_rows"
    # brand (first of its stack, 1,000,000 rows: a multiple of both 1024 and 512 after
    # padding to 1,000,448) does not move at all
    assert _pad(1_000_000, 128) == _pad(1_000_000, 64) == 1_000_448
    assert "brand" not in stacks and "item_terms" not in stacks
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
