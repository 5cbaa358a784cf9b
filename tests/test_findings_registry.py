"""One findings registry: every finding id a command can emit (``tpuemb validate``'s rules,
SparseCore's SC, PARSE001, ``tpuemb plan``'s PLAN) is a registered rule that ``tpuemb explain``
explains, and ``tpuemb plan --format sarif`` lists a rule entry for every id it reports.

The ids a command can emit are found in the package's source: every word shaped like a rule id
(upper-case letters, three digits) in a string of code - not in a docstring or a comment, where
ids are references (``CTOR013`` names a constructor check of validation-rules.md, which
raises an error rather than reporting a finding; ``noqa: BLE001`` is ruff's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, zipf_sample
from test_architecture import NOT_FINDING_IDS, emitted_finding_ids

from tpuemb_cfg.rules import RULES, all_rules
from tpuemb_cfg.rules.plan import LimitDrops, LoadImbalance, OverMemory, plan_findings

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "examples" / "quickstart.pbtxt")

#: Each id-shaped word of a string in the package's code -> the modules naming it (the one scan,
#: ``test_architecture.emitted_finding_ids``; ids in docstrings and comments are references).
EMITTED = emitted_finding_ids()


def test_the_scan_finds_every_family() -> None:
    # the scan is not vacuous: the ids the planner and the validator name in code are found
    for rule_id in ("PLAN001", "PLAN004", "PLAN010", "PLAN011", "PLAN020", "PLAN021",
                    "TBL010", "PARSE001", "SC001", "TAG002"):
        assert rule_id in EMITTED, rule_id
    assert "tpuemb_cfg.planner.limits" not in EMITTED.get("CTOR013", set())


def test_every_emitted_id_is_registered() -> None:
    missing = {i: sorted(m) for i, m in EMITTED.items()
               if i not in RULES and i not in NOT_FINDING_IDS}
    assert not missing, f"finding ids used in code but not registered: {missing}"


def test_all_rules_is_the_registry_in_id_order() -> None:
    ids = [r.id for r in all_rules()]
    assert ids == sorted(RULES)
    assert [r.id for r in all_rules("plan")] == [
        "PLAN001", "PLAN002", "PLAN003", "PLAN004", "PLAN010", "PLAN011", "PLAN020", "PLAN021"]
    assert {r.target for r in all_rules()} == {"configuration", "sparsecore", "plan", "diff"}
    assert [r.id for r in all_rules("diff") if r.family == "DIFF"] == [
        f"DIFF{i:03d}" for i in range(1, 11)]


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_explain_every_registered_id(rule_id: str) -> None:
    rule = RULES[rule_id]
    result = run_cli("explain", rule_id.lower())
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{rule_id} · {rule.severity} · {rule.summary}")
    assert rule.explanation in result.stdout
    assert rule.explanation.startswith("## What it does\n")


def test_rules_lists_the_plan_rules() -> None:
    entries = json.loads(run_cli("rules", "--format", "json").stdout)
    assert {"id": "PLAN004", "severity": "error",
            "summary": "a TPU device is over its HBM (legacy tables, slots, padding)"} in entries


def test_validate_does_not_select_plan_rules(tmp_path: Path) -> None:
    # a plan rule runs on the planner's facts, never on a configuration
    result = run_cli("validate", "--select", "PLAN001", QUICKSTART)
    assert result.exit_code == 2 and "matches no rule" in result.output


def test_plan_rules_word_the_facts() -> None:
    # One legacy device over its HBM (PLAN004), one host under it (no finding), a stack that
    # drops 3 of 40 ids (PLAN010), and an imbalance under and over its threshold.
    device = OverMemory(level="chip", index=2, total=2048 + 1024, parts=(("state", 2048),
                        ("padding", 1024)), capacity=2048, over=3, units=4,
                        largest=(("ads", 0),), sized=False, table_path="table_descriptor[0]",
                        hint="use more hosts")
    host = OverMemory(level="host", index=0, total=100, parts=(("tables", 100),), capacity=100,
                      over=0, units=1, largest=(), sized=True, table_path="", hint=None)
    drops = LimitDrops(stack="s", dropped=3, total=40, worst_table="t", worst_share=0.05,
                       failed_steps=0, steps=5, over_cores="-", max_ids=8, max_unique_ids=8,
                       observed_ids=9, observed_unique_ids=9, path="p", hint="raise them")
    calm = LoadImbalance(level="host", hottest=1, units=2, max_over_mean=1.2,
                         total_variation=0.1, threshold=1.5, top="t", strategy="MOD",
                         path="sharding_strategy")
    hot = LoadImbalance(level="sparsecore", hottest=3, units=8, max_over_mean=2.0,
                        total_variation=0.25, threshold=1.5, top=None, strategy="stacked",
                        path="")
    found = plan_findings([device, host, drops, calm, hot])
    assert [(d.rule, d.severity, d.field_path) for d in found] == [
        ("PLAN004", "error", "table_descriptor[0]"), ("PLAN010", "error", "p"),
        ("PLAN020", "warning", "")]
    assert found[0].message == ("chip 2 needs 3 KiB (3072 bytes: state 2 KiB, padding 1 KiB), "
                                "more than its 2 KiB of HBM (3 of 4 chips over); largest: 'ads'")
    assert found[1].message.startswith("stacked table 's' drops 3 of 40 ids of the sample "
                                       "(7.50%; most in table 't', 5.00%)")
    assert found[2].message.startswith("sparsecore 3 serves 2.00x the mean load, above the "
                                       "threshold 1.5 (total variation 0.250)")


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> str:
    zipf = zipf_sample()
    path = tmp_path_factory.mktemp("registry") / "B.npz"
    columns = zipf.zipf_columns(zipf.schema_of(QUICKSTART), 384, exponent=1.3, max_bag=2)
    zipf.write(str(path), columns, 64)
    return str(path)


def test_plan_sarif_lists_a_rule_for_every_finding(sample: str) -> None:
    # two hosts of one TensorCore each: a host over 1M (PLAN001), a device over 1K (PLAN004),
    # DIV_DEFAULT's first host hot (PLAN021)
    result = run_cli("plan", QUICKSTART, "--ids", sample, "--hosts", "2", "--host-memory", "1M",
                     "--hbm", "1K", "--fail-on", "imbalance>1.01", "--format", "sarif")
    assert result.exit_code == 1, result.output
    run = json.loads(result.stdout)["runs"][0]
    rules: list[dict[str, Any]] = run["tool"]["driver"]["rules"]
    listed = [r["id"] for r in rules]
    reported = {r["ruleId"] for r in run["results"]}
    assert reported == {"PLAN001", "PLAN004", "PLAN021"}
    assert set(listed) == {r.id for r in all_rules("plan")}
    assert listed == sorted(listed)
    for res in run["results"]:
        entry = rules[res["ruleIndex"]]
        assert entry["id"] == res["ruleId"]
        assert entry["fullDescription"]["text"] == RULES[res["ruleId"]].explanation
        assert entry["defaultConfiguration"]["level"] == res["level"]
