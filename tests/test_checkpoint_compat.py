"""``tpuemb diff --breaking``'s checkpoint verdicts against TensorFlow 2.21 itself.

``tests/data/diff/breaking/cases.json`` holds OLD/NEW pairs of SparseCore specs and what
TensorFlow 2.21 did on a CPU (``tools/tf_reference/checkpoint_pairs.py``; README beside the
data): a checkpoint saved by the real ``TPUEmbeddingV2`` (or ``TPUEmbeddingForServing``) under OLD,
with known per-table values, restored under NEW through TensorFlow's own checkpoint adapter. Here
tpuemb reads the same spec texts, stacks them itself, and must say the same: the layouts bytes
TensorFlow saved, the checkpoint keys, whether the adapter applies, the outcome (restores,
reshards, fails, wrong), each variable's fate per table, and the same again for the restore run
after ``build()``. Then hand-checked cases of the rules and the CKPT findings.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA

from tpuemb_cfg.algorithms import slot_names
from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec
from tpuemb_cfg.formats.io import load
from tpuemb_cfg.model.checkpoint import (
    PARAMETERS,
    CheckpointReport,
    CheckpointView,
    LayoutRecord,
    checkpoint_key,
    checkpoint_verdicts,
    layouts_from_proto,
    saved_layouts,
    view_of_legacy,
    view_of_sparsecore,
    view_of_tables,
)
from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts
from tpuemb_cfg.rules import RULES
from tpuemb_cfg.rules.checkpoint import checkpoint_findings
from tpuemb_cfg.sparsecore.summary import layouts_of

BREAKING = DATA / "diff" / "breaking"
ROOT = Path(__file__).resolve().parents[1]


@cache
def _document() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((BREAKING / "cases.json").read_text())
    return data


def _cases() -> list[dict[str, Any]]:
    return list(_document()["cases"])


def _case(case_id: str) -> dict[str, Any]:
    return next(c for c in _cases() if c["id"] == case_id)


_SPECS: dict[str, Any] = {}


def _config(text: str, tmp: Path) -> Any:
    if text not in _SPECS:
        path = tmp / f"spec_{len(_SPECS)}.py"
        path.write_text(text)
        _SPECS[text] = load_sparsecore_spec(str(path), legacy=False).config
    return _SPECS[text]


def _view(side: dict[str, Any], kind: str, root: str, tmp: Path) -> CheckpointView:
    config = _config(side["spec"], tmp)
    if kind == "TPUEmbeddingForServing":
        used = {f.table for f in config.features}
        return view_of_tables([(t.name, t.vocabulary_size, t.dim, slot_names(t.optimizer.algorithm))
                               for t in config.tables if t.name in used], object_path=root)
    layouts, stacking = layouts_of(config)
    # the bytes TPUEmbeddingV2 saved under _sparse_core_table_layouts, from tpuemb's own stacking
    assert saved_layouts(layouts).SerializeToString().hex() == side["layouts_hex"]
    view = view_of_sparsecore(config, stacking, object_path=root)
    stored = SparseCoreTableLayouts.FromString(bytes.fromhex(side["layouts_hex"]))
    assert view.layouts == layouts_from_proto(stored)
    return view


def _views(case: dict[str, Any], tmp: Path) -> tuple[CheckpointView, CheckpointView]:
    old = _view(case["old"], case["old"]["saved_by"], case["root"], tmp)
    new = _view(case["new"], case["new"]["restored_by"], case["root"], tmp)
    return old, new


#: tpuemb's verdict of a NEW variable -> what TensorFlow's restore left in each of its tables.
_VALUES = {"restores": {"equal"}, "reshards": {"equal"}, "lost": {"initial", "differs"},
           "initialized": {"new"}}


def _per_table(report: CheckpointReport, new: CheckpointView) -> dict[str, str]:
    names = {v.name for v in new.variables}
    out = {}
    for verdict in report.verdicts:
        if verdict.variable in names:
            slot = new.variable(verdict.variable).slot  # type: ignore[union-attr]
            for table in verdict.tables:
                out[f"{table}:{slot}"] = verdict.outcome
    return out


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("breaking")


def test_the_pairs_cover_the_issue() -> None:
    doc = _document()
    assert doc["tensorflow"] == "2.21.0"
    cases = _cases()
    assert len(cases) >= 24
    covers = " | ".join(c["covers"] for c in cases)
    for topic in ("identical", "batch size change only", "table added to a stack",
                  "table removed", "table renamed", "vocabulary grown inside a stack",
                  "vocabulary shrunk inside a stack", "vocabulary grown alone",
                  "vocabulary shrunk alone", "dim change", "stacking on -> off",
                  "stacking off -> on", "another topology (num_partitions)",
                  "another topology (SparseCores per partition)", "table order change",
                  "a table moving between stacks", "slot added", "slot removed",
                  "a table named `a`", "num_features changed", "unsharded"):
        assert topic in covers, topic
    assert {c["outcome"] for c in cases} == {"restores", "reshards", "fails", "wrong"}


@pytest.mark.parametrize("case_id", [c["id"] for c in _cases()])
def test_tpuemb_says_what_tensorflow_did(case_id: str, spec_dir: Path) -> None:
    case = _case(case_id)
    old, new = _views(case, spec_dir)
    assert list(old.keys()) == case["old"]["keys"]
    assert {v.name: list(v.shape) for v in old.variables} == case["old"]["variables"]
    assert {v.name: list(v.shape) for v in new.variables} == case["new"]["variables"]
    report = checkpoint_verdicts(old, new)
    assert (report.outcome, report.adapter) == (case["outcome"], case["adapter"])
    if case["outcome"] == "fails":
        assert report.error
        causes = {v.cause for v in report.verdicts if v.outcome == "fails"}
        error = case["error"]
        if error["type"] == "KeyError":
            assert causes == {"key_rewrite"}
            assert error["message"].strip("'") in report.error
        elif "must have the same keys" in error["message"]:
            assert causes == {"table_set"}
        else:
            assert causes == {"shape"}
        return
    tables = _per_table(report, new)
    assert set(tables) == set(case["values"])
    for key, value in case["values"].items():
        assert value in _VALUES[tables[key]], (key, tables[key], value)


@pytest.mark.parametrize("case_id", [c["id"] for c in _cases()])
def test_restore_after_build_as_tensorflow_did(case_id: str, spec_dir: Path) -> None:
    case = _case(case_id)
    old, new = _views(case, spec_dir)
    report = checkpoint_verdicts(old, new, after_build=True)
    assert report.outcome == case["after_build"]["outcome"]
    if report.outcome != "fails":
        tables = _per_table(report, new)
        for key, value in case["after_build"]["values"].items():
            assert value in _VALUES[tables[key]], (key, tables[key], value)


# --- hand-checked --------------------------------------------------------------------------------

def test_checkpoint_keys_escape_as_tensorflow() -> None:
    # trackable_utils.escape_local_name: "/" -> ".S", "." -> ".."
    assert (checkpoint_key("embedding", "item_user/accumulators")
            == "embedding/item_user.Saccumulators/.ATTRIBUTES/VARIABLE_VALUE")
    assert checkpoint_key("model/emb", "a.b") == "model/emb/a..b/.ATTRIBUTES/VARIABLE_VALUE"


def test_saved_layouts_are_in_table_name_order() -> None:
    layouts = SparseCoreTableLayouts()
    for name, stack in (("user", "item_user"), ("item", "item_user"), ("cat", "cat")):
        layouts.tables.add(table_name=name, stacked_table_name=stack)
    assert [t.table_name for t in saved_layouts(layouts).tables] == ["cat", "item", "user"]


def test_legacy_view_names_tables_and_slots() -> None:
    config = load(str(ROOT / "examples" / "quickstart.pbtxt"))
    view = view_of_legacy(config)
    by_table: dict[str, list[str]] = {}
    for v in view.variables:
        by_table.setdefault(v.tables[0], []).append(v.name)
    for table in config.table_descriptor:
        algorithm = table.optimization_parameters.WhichOneof("parameters") or ""
        assert by_table[table.name] == [table.name] + [
            f"{table.name}/{s}" for s in slot_names(algorithm)]
        assert view.variable(table.name).shape == (  # type: ignore[union-attr]
            table.vocabulary_size, table.dimension)


def _layout(table: str, stack: str, rows: int, padded: int, offset: int, rotation: int,
            total: int) -> LayoutRecord:
    """8 SparseCores on 2 chips, width 8."""
    return LayoutRecord(table, stack, 8, 2, total, (rows, 8), (padded, 8), offset, rotation)


def _sc(layouts: list[LayoutRecord], slots: tuple[str, ...] = ()) -> CheckpointView:
    from tpuemb_cfg.model.checkpoint import CheckpointVariable

    variables = []
    stacks: dict[str, list[LayoutRecord]] = {}
    for t in layouts:
        stacks.setdefault(t.stacked_table_name, []).append(t)
    for name, ts in stacks.items():
        shape = (ts[0].total_rows_per_sparse_core_shard * ts[0].num_sparse_cores,
                 ts[0].unsharded_padded_shape[1])
        tables = tuple(t.table_name for t in ts)
        variables.append(CheckpointVariable(name, tables, PARAMETERS, shape))
        variables += [CheckpointVariable(f"{name}/{s}", tables, s, shape) for s in slots]
    return CheckpointView("sparsecore", tuple(variables),
                          tuple(sorted(layouts, key=lambda t: t.table_name)))


def test_shape_changes_that_add_up_move_rows_without_an_error() -> None:
    # N = 8. OLD: u 64 rows (offset 0), i 128 rows (offset 8): 24 rows per SparseCore.
    # NEW: u 56 (padded 64, offset 0), i 136 (padded 192, offset 8): 32 rows per SparseCore.
    # The adapter pads OLD's u (64 rows) by NEW's 64 - 56 = 8 -> 72 rows, 9 per SparseCore, and
    # OLD's i (128) by 192 - 136 = 56 -> 184, 23 per SparseCore: 9 + 23 = 32, no error.
    old = _sc([_layout("u", "u_i", 64, 64, 0, 0, 24), _layout("i", "u_i", 128, 128, 8, 0, 24)])
    new = _sc([_layout("u", "u_i", 56, 64, 0, 0, 32), _layout("i", "u_i", 136, 192, 8, 0, 32)])
    report = checkpoint_verdicts(old, new)
    assert report.outcome == "wrong"
    (verdict,) = report.verdicts
    assert (verdict.outcome, verdict.cause) == ("lost", "shape")
    # one more row for i: 185 -> 24 rows on some SparseCores: the tensor has the wrong size
    new = _sc([_layout("u", "u_i", 56, 64, 0, 0, 32), _layout("i", "u_i", 135, 192, 8, 0, 32)])
    assert checkpoint_verdicts(old, new).outcome == "fails"


def test_a_rotation_change_reshards_and_drops_the_slots() -> None:
    old = _sc([_layout("a", "a", 64, 64, 0, 0, 8)], slots=("accumulators",))
    new = _sc([_layout("a", "a", 64, 64, 0, 4, 8)], slots=("accumulators",))
    report = checkpoint_verdicts(old, new)
    assert report.outcome == "wrong"
    assert [(v.variable, v.outcome, v.how, v.cause) for v in report.verdicts] == [
        ("a", "reshards", "rotation", "reshard"),
        ("a/accumulators", "lost", "rotation", "slot_deferred")]
    assert report.breaking


def test_same_layouts_restore_as_they_are() -> None:
    view = _sc([_layout("a", "a", 64, 64, 0, 0, 8)], slots=("accumulators",))
    report = checkpoint_verdicts(view, view)
    assert (report.outcome, report.adapter, report.breaking) == ("restores", "not_applicable",
                                                                 False)


# --- the CKPT findings ---------------------------------------------------------------------------

def _findings(case_id: str, spec_dir: Path) -> list[tuple[str, str]]:
    old, new = _views(_case(case_id), spec_dir)
    return [(d.rule, d.field_path) for d in checkpoint_findings([checkpoint_verdicts(old, new)])]


def test_each_pitfall_is_its_own_finding(spec_dir: Path) -> None:
    assert _findings("table_added_to_stack", spec_dir) == [("CKPT001", 'tables["query"]')]
    assert ("CKPT002", 'tables["item"]') in _findings("vocab_grown_in_stack", spec_dir)
    assert _findings("stacking_off", spec_dir) == [
        ("CKPT003", 'tables["item"]'), ("CKPT003", 'tables["user"]'),
        ("CKPT007", 'tables["item"]'), ("CKPT009", 'tables["cat"]')]
    assert sorted(_findings("topology_v5p_to_v6e_adagrad", spec_dir)) == [
        ("CKPT004", 'tables["cat"]'), ("CKPT004", 'tables["item"]'),
        ("CKPT009", 'tables["cat"]'), ("CKPT009", 'tables["item"]')]
    assert _findings("unsharded_table_named_a_in_layer", spec_dir) == [
        ("CKPT005", 'tables["a"]'), ("CKPT009", 'tables["b"]')]
    assert sorted(_findings("optimizer_adagrad_to_sgd", spec_dir)) == [
        ("CKPT006", 'tables["cat"]'), ("CKPT006", 'tables["item"]')]
    assert sorted(_findings("optimizer_sgd_to_adagrad", spec_dir)) == [
        ("CKPT008", 'tables["cat"]'), ("CKPT008", 'tables["item"]')]
    assert _findings("identical", spec_dir) == []
    old, new = _views(_case("topology_v5p_to_v6e"), spec_dir)
    after = checkpoint_findings([checkpoint_verdicts(old, new, after_build=True)])
    assert {d.rule for d in after} == {"CKPT010"}


def test_the_findings_are_registered_for_diff() -> None:
    ids = [rule_id for rule_id in RULES if rule_id.startswith("CKPT")]
    assert ids == [f"CKPT{n:03d}" for n in range(1, 11)]
    assert {RULES[i].target for i in ids} == {"diff"}
    for rule_id in ids:
        assert "tensorflow/python/" in RULES[rule_id].explanation, rule_id
