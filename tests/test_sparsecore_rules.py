"""The SparseCore rule family (SC001-SC016): each rule fires on a hand-written configuration at
the field its finding names, with the numbers derived by hand below, and stays silent on a
clean one; findings are placed at the spec lines of the records' origins and honour
``# tpuemb: disable=ID``; SC001's fix renames a key; ``tpuemb explain`` and the JSON and SARIF
formats carry every SC rule.

The stackings here are written by hand from the rules both references follow (facts.md:
padded width = multiple of 8, padded rows = multiple of 8 x N, row offsets = earlier padded
rows / N, rotation k x SparseCores per chip mod N), so the rules are tested apart from the
stacker. The examples in ``examples/sparsecore`` go through the whole path (spec loader,
stacker, rules) at the end.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rulecheck import invoke

from tpuemb_cfg.model import Diagnostic
from tpuemb_cfg.rules import RULES
from tpuemb_cfg.rules.sparsecore import KeyRename, limit_key_renames
from tpuemb_cfg.sparsecore.config import (
    Origin,
    SparseCoreConfig,
    SparseCoreFeature,
    SparseCoreOptimizer,
    SparseCoreTable,
)
from tpuemb_cfg.sparsecore.stacking import Stack, StackedTable, Stacking
from tpuemb_cfg.sparsecore.topology import Topology
from tpuemb_cfg.spec_check import validate_sparsecore
from tpuemb_cfg.validation.fix import KeyPlace, KeyRenameAt, locate_limit_key, rename_spec_keys
from tpuemb_cfg.validation.report import FileReport, render
from tpuemb_cfg.validation.validator import run_rules, run_sparsecore_rules, selected_rules

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "sparsecore"
SC_IDS = sorted(r for r in RULES if r.startswith("SC"))
ADAGRAD = SparseCoreOptimizer("adagrad", hyper={"initial_accumulator_value": 0.1}, group="g")


def table(name: str, vocabulary_size: int = 100_000, dim: int = 16, **kw: Any
          ) -> SparseCoreTable:
    return SparseCoreTable(name, vocabulary_size, dim, kw.pop("optimizer", ADAGRAD), **kw)


def config(tables: Sequence[SparseCoreTable], batch: int = 128, *, chips: int = 4,
           cores: int = 2, mode: str = "tensorflow", **kw: Any) -> SparseCoreConfig:
    """One feature per table (named after it) of ``batch`` samples, on ``chips`` x ``cores``."""
    features = kw.pop("features", None) or tuple(
        SparseCoreFeature(t.name, t.name, (batch,), (batch, t.dim)) for t in tables)
    topology = kw.pop("topology", None) or Topology(chips=chips, sparse_cores_per_chip=cores)
    return SparseCoreConfig(api=kw.pop("api", "jax" if mode == "jax" else "tensorflow"),
                            mode=mode,  # type: ignore[arg-type]
                            tables=tuple(tables), features=tuple(features), topology=topology,
                            **kw)


def roundup(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def stacking(cfg: SparseCoreConfig, groups: Sequence[Sequence[str]] | None = None,
             **stack_fields: Any) -> Stacking:
    """The stacks ``groups`` (table names; default: one stack per table) as both references
    lay them out; limits as TensorFlow looks them up by stacked name (or a jax table's own for
    a one-table stack), overridden by ``stack_fields``."""
    chips, cores = cfg.topology.chips, cfg.topology.sparse_cores_per_chip
    n = chips * cores
    by_name = {t.name: t for t in cfg.tables}
    stacks = []
    for names in groups or [[t.name] for t in cfg.tables]:
        members, offset = [], 0
        for k, name in enumerate(names):
            t = by_name[name]
            rows = roundup(t.vocabulary_size, 8 * n)
            members.append(StackedTable(name, t.vocabulary_size, t.dim, rows, roundup(t.dim, 8),
                                        offset // n, k * cores % n))
            offset += rows
        stack_name = "_".join(names)
        if cfg.mode == "jax" and len(names) == 1:
            own = by_name[names[0]]
            limits = (own.max_ids_per_partition or 256, own.max_unique_ids_per_partition or 256)
        else:
            limits = ((cfg.max_ids_per_table or {}).get(stack_name, 256),
                      (cfg.max_unique_ids_per_table or {}).get(stack_name, 256))
        fields = {"max_ids_per_partition": limits[0], "max_unique_ids_per_partition": limits[1],
                  **stack_fields}
        stacks.append(Stack(name=stack_name, tables=tuple(members), group="g", combiner="mean",
                            total_sample_count=0, **fields))
    return Stacking(mode=cfg.mode, num_partitions=chips, sparse_cores_per_partition=cores,
                    stacks=tuple(stacks), features=())


def run(cfg: SparseCoreConfig, stacks: Stacking | None = None, rule_id: str | None = None,
        **options: Any) -> list[Diagnostic]:
    """The findings of the SC rules (or of ``rule_id`` alone) on ``cfg`` with ``stacks``."""
    found = run_sparsecore_rules(cfg, selected_rules("SC"), options=options,
                                 stacking=stacks or stacking(cfg))
    assert not [d for d in found if "internal error" in d.message], found
    return [d for d in found if rule_id is None or d.rule == rule_id]


def where(found: Sequence[Diagnostic]) -> list[tuple[str, str]]:
    return [(d.rule, d.field_path) for d in found]


# -- clean ---------------------------------------------------------------------------------------


def test_a_clean_configuration_has_no_finding_in_either_mode() -> None:
    tables = [table("user", dim=64), table("video", dim=64), table("ads", dim=32)]
    tf = config(tables, max_ids_per_table={"user_video": 512, "ads": 256})
    assert run(tf, stacking(tf, [["user", "video"], ["ads"]])) == []
    jax = config(tables, 1024, mode="jax")
    assert run(jax, stacking(jax, [["user", "video"], ["ads"]])) == []


def test_sparsecore_rules_do_not_run_on_a_tpu_embedding_configuration() -> None:
    from tpuemb_cfg.formats.io import load

    message = load(str(EXAMPLES.parent / "quickstart.pbtxt"))
    assert run_rules(message, selected_rules("SC")) == []
    assert all(RULES[r].target == "sparsecore" for r in SC_IDS)
    assert not [r for r in RULES if r.startswith("SC") is (RULES[r].target != "sparsecore")]


# -- SC001 / SC002: limit keys -------------------------------------------------------------------


def test_sc001_a_key_naming_a_table_inside_a_stack_and_its_rename() -> None:
    tables = [table("user", dim=64), table("video", dim=64), table("ads", dim=32)]
    cfg = config(tables, max_ids_per_table={"user": 1024, "ads": 512},
                 max_unique_ids_per_table={"nobody": 8})
    stacks = stacking(cfg, [["user", "video"], ["ads"]])
    assert limit_key_renames(cfg, stacks) == [
        KeyRename("max_ids_per_table", "user", "user_video", "user_video"),
        KeyRename("max_unique_ids_per_table", "nobody", None, None),
    ]
    found = run(cfg, stacks, "SC001")
    assert where(found) == [
        ("SC001", 'sparse_core_config.max_ids_per_table["user"]'),
        ("SC001", 'sparse_core_config.max_unique_ids_per_table["nobody"]'),
    ]
    assert "'user_video' gets the default 256" in found[0].message
    assert found[0].hint == "rename the key 'user' to 'user_video' (tpuemb validate --fix)"
    assert "names no table: the stacked tables are 'user_video' and 'ads'" in found[1].message


def test_sc001_two_keys_for_one_stack_are_not_renamed() -> None:
    tables = [table("user", dim=64), table("video", dim=64)]
    cfg = config(tables, max_ids_per_table={"user": 1024, "video": 2048})
    stacks = stacking(cfg, [["user", "video"]])
    assert [r.new for r in limit_key_renames(cfg, stacks)] == [None, None]
    assert len(run(cfg, stacks, "SC001")) == 2
    # and a stack that has its key already: the table's key is not renamed onto it
    cfg = replace(cfg, max_ids_per_table={"user": 1024, "user_video": 2048})
    assert [r.new for r in limit_key_renames(cfg, stacks)] == [None]


def test_sc002_stacks_without_an_entry_once_per_dictionary() -> None:
    tables = [table("user", dim=64), table("video", dim=64), table("ads", dim=32),
              table("news", dim=8)]
    cfg = config(tables, max_ids_per_table={"user": 1024})
    stacks = stacking(cfg, [["user", "video"], ["ads"], ["news"]])
    found = run(cfg, stacks, "SC002")
    # user_video is what SC001's key points to: not listed again
    assert where(found) == [("SC002", "sparse_core_config.max_ids_per_table")]
    assert found[0].severity == "info"
    assert "no entry for the 2 stacked tables 'ads' and 'news'" in found[0].message
    assert run(replace(cfg, max_ids_per_table=None), stacks, "SC002") == []


# -- SC003 / SC004: limits lost ------------------------------------------------------------------


def test_sc003_a_multi_table_jax_stack_ignores_its_tables_limits() -> None:
    tables = [table("user", dim=64, max_ids_per_partition=1024, max_unique_ids_per_partition=256,
                    suggested_coo_buffer_size_per_device=4096),
              table("video", dim=64, max_ids_per_partition=256,
                    max_unique_ids_per_partition=256)]
    cfg = config(tables, 1024, mode="jax")
    found = run(cfg, stacking(cfg, [["user", "video"]]), "SC003")
    assert where(found) == [
        ("SC003", 'tables["user"].max_ids_per_partition'),
        ("SC003", 'tables["user"].suggested_coo_buffer_size_per_device'),
    ]
    assert "max_ids_per_partition 1024 is ignored: it is stacked with 'video' into " \
           "'user_video', whose limit is 256" in found[0].message
    # alone, the table keeps its limits but auto_stack_tables still drops the suggestion
    alone = run(cfg, stacking(cfg), "SC003")
    assert where(alone) == [("SC003", 'tables["user"].suggested_coo_buffer_size_per_device')]
    # TensorFlow has no per-table limits to lose
    assert run(replace(cfg, mode="tensorflow"), stacking(cfg, [["user", "video"]]), "SC003") == []


def test_sc004_keras_rs_conversion_drops_the_tables_limits() -> None:
    tables = [table("user", max_ids_per_partition=1024, max_unique_ids_per_partition=256),
              table("video", max_ids_per_partition=256, max_unique_ids_per_partition=256)]
    cfg = config(tables, api="keras_rs", limits_dropped_by_conversion=True,
                 initialize_tables_on_host=False)
    found = run(cfg, rule_id="SC004")
    assert where(found) == [("SC004", 'tables["user"].max_ids_per_partition')]
    assert "max_ids_per_partition 1024 never reaches TensorFlow" in found[0].message
    assert run(replace(cfg, limits_dropped_by_conversion=False), rule_id="SC004") == []


# -- SC005 / SC006: optimizers -------------------------------------------------------------------


def test_sc005_an_unsupported_optimizer_once_per_optimizer_object() -> None:
    rms = SparseCoreOptimizer("rms_prop", origin=Origin("spec.py", 7))
    cfg = config([table("a", optimizer=rms), table("b", optimizer=rms), table("c"),
                  table("d", optimizer=SparseCoreOptimizer("custom"))])
    found = run(cfg, rule_id="SC005")
    assert where(found) == [("SC005", 'tables["a"].optimizer')]
    assert found[0].message.startswith("tables 'a' and 'b': optimizer rms_prop does not run")
    assert found[0].severity == "error"


def test_sc006_weight_decay() -> None:
    decay = SparseCoreOptimizer("adagrad", weight_decay=True)
    found = run(config([table("a", optimizer=decay), table("b")]), rule_id="SC006")
    assert where(found) == [("SC006", 'tables["a"].optimizer')]
    assert "NotImplementedError" in found[0].message


# -- SC007 / SC008: batch and ids ----------------------------------------------------------------


def test_sc007_tensorflow_batch_per_replica_not_divisible() -> None:
    found = run(config([table("a"), table("b")], features=(
        SparseCoreFeature("f/odd", "a", (127,), (127, 16)),
        SparseCoreFeature("f/even", "b", (128, 4), (128, 4, 16)),
    )), rule_id="SC007")
    assert where(found) == [("SC007", 'features["f/odd"].output_shape')]
    # 127 over 2 SparseCores: TensorFlow's truncating division gives 63
    assert "TensorFlow computes 63 samples per SparseCore" in found[0].message
    assert found[0].hint == "use a batch that is a multiple of 2 (e.g. 128)"


def test_sc007_jax_global_batch_per_device() -> None:
    # the reference's abort: B=6 on 4 devices of 2 SparseCores is 1 per device
    found = run(config([table("t")], 6, chips=4, cores=2, mode="jax"), rule_id="SC007")
    assert where(found) == [("SC007", 'features["t"].output_shape')]
    assert "global batch 6 over 4 device(s) (4 chips, 4 devices, 1 host, 8 SparseCores) is 1 " \
        "per device (not even)" in found[0].message
    assert found[0].hint == "use a batch that is a multiple of 8 (e.g. 8)"
    assert run(config([table("t")], 16, chips=4, cores=2, mode="jax"), rule_id="SC007") == []


def test_sc008_ids_beyond_int32() -> None:
    edge = table("edge", vocabulary_size=2**31)  # ids 0 .. 2^31 - 1: fits
    over = table("over", vocabulary_size=2**31 + 1)
    found = run(config([edge, over], chips=1024), rule_id="SC008")
    assert where(found) == [("SC008", 'tables["over"].vocabulary_size')]
    assert "2,147,483,649" in found[0].message


# -- SC009 / SC010: sizes ------------------------------------------------------------------------


def test_sc009_activation_limit_tensorflow_at_jax_above() -> None:
    # 4 bytes x 128 x (8192 // 2) = 2 MiB exactly: TensorFlow refuses a join at the limit,
    # jax-tpu-embedding only above it
    tf = config([table("a", dim=128)], 8192, chips=1, cores=2)
    found = run(tf, rule_id="SC009")
    assert where(found) == [("SC009", 'tables["a"]')]
    assert "2 MiB per SparseCore (4 x 128 x rows), at or above the 2 MiB" in found[0].message
    assert "never stacked" in found[0].message
    jax = config([table("a", dim=128)], 8192, chips=1, cores=2, mode="jax")  # 8192 // N=2
    assert run(jax, rule_id="SC009") == []
    assert where(run(config([table("a", dim=128)], 8200, chips=1, cores=2, mode="jax"),
                     rule_id="SC009")) == [("SC009", 'tables["a"]')]
    # a smaller limit of jax-tpu-embedding's own
    small = replace(jax, activation_mem_bytes_limit=_mib(1))
    assert len(run(small, rule_id="SC009")) == 1
    assert run(config([table("a", dim=128)], 8190, chips=1, cores=2), rule_id="SC009") == []


def _mib(n: int) -> int:
    return n << 20


def test_sc009_tensorflow_shard_limit() -> None:
    # 4 x 8 x 2^26 rows (a multiple of 8 x 2) / 1 chip = 2 GiB exactly
    at = config([table("big", vocabulary_size=2**26, dim=8)], 2, chips=1, cores=2)
    found = run(at, rule_id="SC009")
    assert where(found) == [("SC009", 'tables["big"]')]
    assert "its shard per chip is 2 GiB" in found[0].message
    below = config([table("big", vocabulary_size=2**26 - 16, dim=8)], 2, chips=1, cores=2)
    assert run(below, rule_id="SC009") == []
    assert run(replace(at, mode="jax"), rule_id="SC009") == []  # no shard limit in jax


def test_sc010_padding_waste() -> None:
    # width 4 -> 8: half of 5,000,064 x 8 x 4 bytes is padding (N = 8: rows to 64)
    cfg = config([table("tags", vocabulary_size=5_000_000, dim=4),
                  table("tiny", vocabulary_size=1000, dim=4),  # 50% but far below 1 MiB
                  table("fine", vocabulary_size=5_000_000, dim=8)])
    found = run(cfg, rule_id="SC010")
    assert where(found) == [("SC010", 'tables["tags"]')]
    assert found[0].message == ("table 'tags': 50% of its 152.6 MiB is padding (width 4 padded "
                                "to 8)")
    assert run(cfg, rule_id="SC010", sparsecore_padding_waste=0.6) == []
    # rows: 100,000 rows on 8192 SparseCores are padded to 131,072 (24%), width 6 -> 8 (25%)
    rows = config([table("t", vocabulary_size=100_000, dim=6)], chips=4096)
    found = run(rows, rule_id="SC010")
    assert "100,000 rows padded to 131,072 (a multiple of 8 x 8192 SparseCores)" \
        in found[0].message
    assert "width 6 padded to 8" in found[0].message


# -- SC011 - SC013 -------------------------------------------------------------------------------


def test_sc011_distinct_learning_rate_callables() -> None:
    def sgd(rate: Any) -> SparseCoreOptimizer:
        return SparseCoreOptimizer("stochastic_gradient_descent", learning_rate=rate)

    one = lambda: 0.1  # noqa: E731
    two = lambda: 0.1  # noqa: E731
    cfg = config([table("a", dim=24, optimizer=sgd(one)), table("b", dim=24, optimizer=sgd(two)),
                  table("c", dim=24, optimizer=sgd(0.1))])
    found = run(cfg, stacking(cfg), "SC011")
    assert where(found) == [("SC011", 'tables["b"].optimizer')]
    assert "(2 distinct objects), so they are kept in 2 stacks ('a' and 'b')" in found[0].message
    # one callable object: one group (what stacking did is then not the callables' doing)
    same = config([table("a", dim=24, optimizer=sgd(one)), table("b", dim=24, optimizer=sgd(one))])
    assert run(same, stacking(same), "SC011") == []
    # stacked together after all, or stacking disabled: nothing kept apart by the callables
    assert run(cfg, stacking(cfg, [["a", "b"], ["c"]]), "SC011") == []
    assert run(replace(cfg, disable_table_stacking=True), stacking(cfg), "SC011") == []


def test_sc012_host_memory_of_initialize_tables_on_host() -> None:
    # 4 x 2^28 x 64 = 64 GiB: not above the default; x 128 = 128 GiB is
    at = config([table("a", vocabulary_size=2**28, dim=64)], chips=64)
    assert run(at, rule_id="SC012") == []
    over = config([table("a", vocabulary_size=2**28, dim=128)], chips=64)
    found = run(over, rule_id="SC012")
    assert where(found) == [("SC012", "sparse_core_config.initialize_tables_on_host")]
    assert "128 GiB for 1 table(s)" in found[0].message
    assert len(run(at, rule_id="SC012", memory_budget_bytes=1 << 30)) == 1
    assert run(replace(over, initialize_tables_on_host=False), rule_id="SC012") == []


def test_sc013_sparse_cores_defaulted_to_four() -> None:
    defaulted = Topology(chips=8, sparse_cores_per_chip=4, sparse_cores_defaulted=True)
    found = run(config([table("a")], topology=defaulted), rule_id="SC013")
    assert where(found) == [("SC013", "topology")]
    assert "SparseCores per device: v5p 4, v6e 2, TPU7x 2" in found[0].message


# -- SC014 - SC016: jax-tpu-embedding's preprocessing -------------------------------------------


def test_sc014_suggested_buffer_above_the_theoretical_maximum() -> None:
    # roundup8(16) x 4 SparseCores per device x N = 4 x 4 = 16: 1024
    cfg = config([table("t", max_ids_per_partition=16)], 64, chips=4, cores=4, mode="jax")
    found = run(cfg, stacking(cfg, suggested_coo_buffer_size_per_device=1032), "SC014")
    assert where(found) == [("SC014", 'tables["t"].suggested_coo_buffer_size_per_device')]
    assert "1,032 is above the theoretical maximum 1,024" in found[0].message
    assert run(cfg, stacking(cfg, suggested_coo_buffer_size_per_device=1024), "SC014") == []


def test_sc015_a_zero_limit_and_a_buffer_beyond_int32() -> None:
    cfg = config([table("user")], max_ids_per_table={"user": 0})
    found = run(cfg, rule_id="SC015")
    assert where(found) == [("SC015", 'sparse_core_config.max_ids_per_table["user"]')]
    # roundup8(2^27) x 4 x (64 x 4) = 2^37 entries
    big = config([table("t", max_ids_per_partition=2**27)], 256, chips=64, cores=4, mode="jax")
    found = run(big, rule_id="SC015")
    assert where(found) == [("SC015", 'tables["t"].max_ids_per_partition')]
    assert "137,438,953,472 entries per device" in found[0].message


def test_sc016_jax_sparse_core_counts() -> None:
    found = run(config([table("t")], 24, chips=3, cores=2, mode="jax"), rule_id="SC016")
    assert where(found) == [("SC016", "topology")]
    assert "3 device(s) x 2 SparseCores = 6 SparseCores, not a power of two" in found[0].message
    found = run(config([table("t")], 24, chips=4, cores=3, mode="jax"), rule_id="SC016")
    assert [d.field_path for d in found] == ["topology.sparse_cores_per_chip", "topology"]
    assert run(config([table("t")], 24, chips=3, cores=2), rule_id="SC016") == []  # TensorFlow


def test_a_failed_stacking_silences_the_rules_that_need_it() -> None:
    from tpuemb_cfg.rules import SparseCoreContext

    pytest.importorskip("tpuemb_cfg.sparsecore.feed")
    odd = config([table("a")], mode="nonsense")  # feed.stack refuses the mode
    ctx = SparseCoreContext(odd)
    assert ctx.stacking is None
    assert "nonsense" in (ctx.stacking_error or "")
    found = run_sparsecore_rules(odd, selected_rules("SC"))
    assert where(found) == [("SC017", "")]
    assert found[0].message.startswith("the tables cannot be stacked: ValueError: unknown "
                                       "stacking mode 'nonsense'")


# -- placement, suppression, output formats ------------------------------------------------------

SPEC = '''\
opt = RMSProp()
user = TableConfig(name="user")
video = TableConfig(name="video", optimizer=opt)  # tpuemb: disable=SC010
features = {"user": FeatureConfig(user, output_shape=[127])}
sparse_core_config = SparseCoreEmbeddingConfig(
    max_ids_per_table={
        "user": 64,
    })
'''


def _placed_config(path: str) -> SparseCoreConfig:
    rms = SparseCoreOptimizer("rms_prop", origin=Origin(path, 1))
    tables = [table("user", dim=64, origin=Origin(path, 2)),
              table("video", vocabulary_size=5_000_000, dim=4, optimizer=rms,
                    origin=Origin(path, 3))]
    features = (SparseCoreFeature("user", "user", (127,), (127, 64), origin=Origin(path, 4)),
                SparseCoreFeature("video", "video", (128,), (128, 4)))
    return config(tables, features=features, max_ids_per_table={"user": 64},
                  origin=Origin(path, None),
                  setting_origins={"sparse_core_config": Origin(path, 5),
                                   "max_ids_per_table": Origin(path, 5)})


def test_findings_are_placed_at_the_origin_lines(tmp_path: Path) -> None:
    path = tmp_path / "spec.py"
    path.write_text(SPEC)
    cfg = _placed_config(str(path))
    found = validate_sparsecore(cfg, selected_rules("SC"),
                                stacking=stacking(cfg, [["user", "video"]]))
    placed = [(d.rule, d.line, d.column) for d in found]
    # SC001 at the key's own line and column; SC005 at the optimizer's line; SC007 at the
    # feature's line (its first character); SC010 on line 3 is silenced by its comment
    assert placed == [("SC005", 1, 1), ("SC007", 4, 1), ("SC001", 7, 9)]
    assert {d.path for d in found} == {str(path)}


def test_a_finding_without_a_line_names_its_field(tmp_path: Path) -> None:
    path = tmp_path / "spec.py"
    path.write_text(SPEC)
    cfg = _placed_config(str(path))
    cfg = replace(cfg, features=(replace(cfg.features[0], origin=Origin()), cfg.features[1]))
    found = [d for d in validate_sparsecore(cfg, selected_rules("SC007"),
                                            stacking=stacking(cfg)) if d.rule == "SC007"]
    assert found[0].line is None
    assert found[0].message.endswith(
        '(at features["user"].output_shape; no line of the spec builds it)')


def test_json_and_sarif_carry_sparsecore_findings(tmp_path: Path) -> None:
    path = tmp_path / "spec.py"
    path.write_text(SPEC)
    cfg = _placed_config(str(path))
    found = validate_sparsecore(cfg, selected_rules("SC"),
                                stacking=stacking(cfg, [["user", "video"]]))
    reports = [FileReport(str(path), found)]
    document = json.loads(render("json", reports))
    first = document["files"][0]["diagnostics"][0]
    assert (first["rule"], first["field_path"], first["line"]) == (
        "SC005", 'tables["video"].optimizer', 1)
    sarif = json.loads(render("sarif", reports))
    run_ = sarif["runs"][0]
    assert set(SC_IDS) <= {r["id"] for r in run_["tool"]["driver"]["rules"]}
    result = next(r for r in run_["results"] if r["ruleId"] == "SC001")
    assert result["locations"][0]["physicalLocation"]["region"] == {"startLine": 7,
                                                                    "startColumn": 9}
    assert result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == \
        'sparse_core_config.max_ids_per_table["user"]'


def test_the_library_entry_point_takes_a_sparsecore_config(tmp_path: Path) -> None:
    import tpuemb_cfg

    path = tmp_path / "spec.py"
    path.write_text(SPEC)
    pytest.importorskip("tpuemb_cfg.sparsecore.feed")
    found = tpuemb_cfg.validate(_placed_config(str(path)), select="SC005")
    assert [(d.rule, d.line) for d in found] == [("SC005", 1)]


@pytest.mark.parametrize("rule_id", SC_IDS)
def test_explain_prints_every_sparsecore_rule(rule_id: str) -> None:
    result = invoke("explain", rule_id.lower())
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{rule_id} · {RULES[rule_id].severity} · ")
    assert "## What it does" in result.output
    assert "Spec: sparsecore.md section 5" in result.output


# -- the fix -------------------------------------------------------------------------------------


def test_the_rename_edits_the_literal_of_the_dict_passed() -> None:
    text = ('features = {"user": 1}\n'
            "c = Config(max_ids_per_table={'user': 64, \"video\": 8})  # keep\n"
            'name = "user"\n')
    place = locate_limit_key(text, 2, "max_ids_per_table", "user", ("user", "video"))
    assert place == KeyPlace(53, 59, 2, 31)  # line 2 starts at 23
    assert text[place.start:place.end] == "'user'"
    # a key the dictionary does not hold (a finding suggesting one) has no literal to point at
    assert locate_limit_key(text, 2, "max_ids_per_table", "ads", ("user", "video")) == (
        "the dictionary at line 2 has no key 'ads'")
    fixed = rename_spec_keys(text.encode(), [
        KeyRenameAt("max_ids_per_table", "user", "user_video", 2, ("user", "video")),
        KeyRenameAt("max_ids_per_table", "name", "x", 3, ("name",))], "s.py")
    assert fixed.data == text.replace("{'user': 64", "{'user_video': 64").encode()
    assert fixed.notes == [
        "s.py:2: renamed the limit key 'user' to 'user_video' (SC001)",
        "s.py:3: not fixed (SC001): the max_ids_per_table key 'name' cannot be located for "
        "certain: line 3 does not pass max_ids_per_table= as a keyword argument; rename it to "
        "'x' by hand",
    ]
    assert fixed.changed


# -- the examples, through the spec loader and the stacker ----------------------------------------


def _loader() -> Any:
    pytest.importorskip("tpuemb_cfg.sparsecore.feed")
    pytest.importorskip("tpuemb_cfg.sparsecore.jte")
    return pytest.importorskip("tpuemb_cfg.embedding.sparsecore")


@pytest.mark.parametrize("name", ["v6e_dcnv2.py", "v5p_jax_ranking.py"])
def test_the_examples_validate_clean(name: str) -> None:
    import tpuemb_cfg

    _loader()
    assert tpuemb_cfg.validate(str(EXAMPLES / name), show_derived=True) == []


def test_the_broken_example_fails_with_its_documented_rules() -> None:
    _loader()
    path = str(EXAMPLES / "broken_v6e.py")
    result = invoke("validate", "--format", "json", path)
    assert result.exit_code == 1
    found = json.loads(result.output)["files"][0]["diagnostics"]
    placed = sorted({(d["rule"], d["line"]) for d in found})
    text = (EXAMPLES / "broken_v6e.py").read_text().splitlines()
    # every finding is on the line whose comment names its rule (SC002: the config call)
    for rule_id, line in placed:
        assert rule_id in text[line - 1] or rule_id == "SC002", (rule_id, line)
    assert {r for r, _ in placed} == {"SC001", "SC002", "SC005", "SC006", "SC007", "SC010",
                                      "SC011"}


#: keras-rs 0.4.0's config classes, as stand-ins: the 25 lines that open the keras-rs spec of the
#: API tests (tests/data/sparsecore/api_keras_rs_spec.py), then this test's tables.
KERAS_RS_SPEC = "".join(
    (Path(__file__).parent / "data" / "sparsecore" / "api_keras_rs_spec.py").read_text()
    .splitlines(keepends=True)[:25]) + '''topology = "v6e-8"
user = TableConfig("user", 100_000, 32, optimizer="adagrad", placement="sparsecore",
                   max_ids_per_partition=1024)
video = TableConfig("video", 100_000, 32, optimizer="adagrad", placement="sparsecore")
feature_config = {
    "user": FeatureConfig("user", user, (1024, 1), (1024, 32)),
    "video": FeatureConfig("video", video, (1024, 1), (1024, 32)),
}
'''


def test_a_keras_rs_spec_reports_its_dropped_limits_at_the_table(tmp_path: Path) -> None:
    import tpuemb_cfg

    _loader()
    path = tmp_path / "krs.py"
    path.write_text(KERAS_RS_SPEC)
    found = tpuemb_cfg.validate(str(path))
    assert [(d.rule, d.line, d.field_path) for d in found] == [
        ("SC004", 27, 'tables["user"].max_ids_per_partition')]


def test_fix_renames_the_keys_of_the_broken_example(tmp_path: Path) -> None:
    _loader()
    path = tmp_path / "broken_v6e.py"
    shutil.copy(EXAMPLES / "broken_v6e.py", path)
    result = invoke("validate", "--fix", "--select", "SC001", str(path))
    assert result.exit_code == 0, result.output
    text = path.read_text()
    assert 'max_ids_per_table={"user_video": 1024}' in text
    assert 'max_unique_ids_per_table={"user_video": 512}' in text
    assert invoke("validate", "--select", "SC001", str(path)).output == ""


def test_the_rules_page_lists_every_rule_with_its_severity_and_summary() -> None:
    page = (EXAMPLES.parent.parent / "docs" / "sparsecore" / "rules.md").read_text()
    for rule_id in SC_IDS:
        rule = RULES[rule_id]
        assert f"| `{rule_id}` | {rule.severity} | {rule.summary} |" in page, rule_id
