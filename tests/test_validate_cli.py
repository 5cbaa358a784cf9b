"""`tpuemb validate`, `tpuemb rules`, `tpuemb explain`: formats, exit codes, settings."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from xml.etree import ElementTree as ET

from rulecheck import CLEAN, NUM_HOSTS_ZERO, invoke, write_config

from tpuemb_cfg.formats.io import load
from tpuemb_cfg.rules import RULES

# num_hosts 0 (error, 2:1), cores 3 vs hosts 2 would warn; here: an error and a warning.
ERRORS = CLEAN.replace("num_hosts: 1", "num_hosts: 0")
WARNING_ONLY = CLEAN.replace("num_hosts: 1", "num_hosts: 3")  # TBL010 at 3:1
INFO_ONLY = CLEAN.replace(
    "    gradient_accumulation_status: ENABLED\n", "    # accumulation unset\n"
)


def test_text_format_and_exit_1(tmp_path: Path) -> None:
    path = write_config(tmp_path, ERRORS)
    result = invoke("validate", path)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == f"{path}:2:1: error[TBL008] num_hosts is 0; it must be >= 1"
    assert lines[1] == "    hint: set num_hosts to the number of TPU hosts"
    assert lines[-1] == "Found 1 error, 0 warnings and 0 info in 1 file."


def test_clean_exit_0_and_no_output(tmp_path: Path) -> None:
    result = invoke("validate", write_config(tmp_path, CLEAN))
    assert (result.exit_code, result.output) == (0, "")


def test_fail_on(tmp_path: Path) -> None:
    warn = write_config(tmp_path, WARNING_ONLY)
    assert invoke("validate", warn).exit_code == 0
    assert invoke("validate", "--fail-on", "warning", warn).exit_code == 1
    info = write_config(tmp_path, INFO_ONLY, "i.pbtxt")
    assert invoke("validate", "--fail-on", "warning", info).exit_code == 0
    assert invoke("validate", "--fail-on", "info", info).exit_code == 1


def test_parse_error_exit_2_and_reported(tmp_path: Path) -> None:
    good = write_config(tmp_path, ERRORS, "good.pbtxt")
    bad_text = "table_descriptor {\n  name: 'x'\n  dimension: x\n}\n"
    bad = write_config(tmp_path, bad_text, "bad.pbtxt")
    result = invoke("validate", good, bad)
    assert result.exit_code == 2
    assert f"{good}:2:1: error[TBL008]" in result.output
    assert f"{bad}:3:14: error[PARSE001] " in result.output
    missing = invoke("validate", "--format", "json", str(tmp_path / "missing.pbtxt"))
    assert missing.exit_code == 2
    doc = json.loads(missing.output)
    assert doc["files"][0]["diagnostics"][0]["rule"] == "PARSE001"


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    path = write_config(tmp_path, CLEAN)
    result = invoke("validate", "--select", "NOPE", path)
    assert result.exit_code == 2
    assert "matches no rule" in result.output
    assert invoke("validate", "--format", "xml", path).exit_code == 2
    assert invoke("validate").exit_code == 2
    assert invoke("validate", "--diff", path).exit_code == 2


def test_json_format_exact_shape(tmp_path: Path) -> None:
    path = write_config(tmp_path, ERRORS)
    result = invoke("validate", "--format", "json", path, "--ignore", "ACC")
    assert result.exit_code == 1
    assert json.loads(result.output) == {
        "schema_version": 1,
        "files": [
            {
                "path": path,
                "diagnostics": [NUM_HOSTS_ZERO],
            }
        ],
        "summary": {"error": 1, "warning": 0, "info": 0},
    }


def test_binary_input_has_null_positions(tmp_path: Path) -> None:
    binary = tmp_path / "c.binpb"
    binary.write_bytes(load(write_config(tmp_path, ERRORS)).SerializeToString())
    doc = json.loads(invoke("validate", "-f", "json", str(binary)).output)
    assert [(d["rule"], d["line"], d["column"]) for d in doc["files"][0]["diagnostics"]] == [
        ("TBL008", None, None)
    ]
    text = invoke("validate", str(binary)).output.splitlines()[0]
    assert text == f"{binary}: error[TBL008] num_hosts is 0; it must be >= 1 (at num_hosts)"


_MESSAGE = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}
_LEVEL = {"enum": ["none", "note", "warning", "error"]}
# The parts of the SARIF 2.1.0 schema this output uses (required properties, types, enums).
MINIMAL_SARIF_SCHEMA = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"enum": ["2.1.0"]},
        "$schema": {"type": "string"},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["tool"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id"],
                                            "properties": {
                                                "id": {"type": "string"},
                                                "shortDescription": _MESSAGE,
                                                "fullDescription": _MESSAGE,
                                                "defaultConfiguration": {
                                                    "type": "object",
                                                    "properties": {"level": _LEVEL},
                                                },
                                            },
                                        },
                                    },
                                },
                            }
                        },
                    },
                    "columnKind": {"enum": ["utf16CodeUnits", "unicodeCodePoints"]},
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["message"],
                            "properties": {
                                "ruleId": {"type": "string"},
                                "ruleIndex": {"type": "integer", "minimum": -1},
                                "level": _LEVEL,
                                "message": _MESSAGE,
                            },
                        },
                    },
                },
            },
        },
    },
}


def _check_sarif(log: dict) -> None:
    """Structural checks of the SARIF 2.1.0 schema's required properties and enums."""
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-2.1.0.json")
    assert isinstance(log["runs"], list) and len(log["runs"]) == 1
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert isinstance(driver["name"], str) and driver["name"]
    rules = driver["rules"]
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids))
    for r in rules:
        assert set(r) <= {
            "id",
            "name",
            "shortDescription",
            "fullDescription",
            "help",
            "defaultConfiguration",
            "properties",
        }
        assert isinstance(r["shortDescription"]["text"], str) and r["shortDescription"]["text"]
        assert r["defaultConfiguration"]["level"] in ("none", "note", "warning", "error")
    assert run["columnKind"] in ("utf16CodeUnits", "unicodeCodePoints")
    for res in run["results"]:
        assert isinstance(res["message"]["text"], str) and res["message"]["text"]
        assert res["level"] in ("none", "note", "warning", "error")
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        for loc in res["locations"]:
            phys = loc["physicalLocation"]
            assert isinstance(phys["artifactLocation"]["uri"], str)
            region = phys.get("region")
            if region is not None:
                assert region["startLine"] >= 1 and region["startColumn"] >= 1
            for logical in loc.get("logicalLocations", []):
                assert isinstance(logical["fullyQualifiedName"], str)


def test_sarif_format(tmp_path: Path) -> None:
    path = write_config(tmp_path, ERRORS)
    result = invoke("validate", "--format", "sarif", path)
    assert result.exit_code == 1
    log = json.loads(result.output)
    _check_sarif(log)
    run = log["runs"][0]
    # every rule validation runs; tpuemb plan's (PLAN) are listed by tpuemb plan's SARIF,
    # tpuemb diff's (DIFF, CKPT) by tpuemb diff's
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} == {
        r for r in RULES if not r.startswith(("PLAN", "CKPT", "DIFF"))
    }
    results = [r for r in run["results"] if r["ruleId"] == "TBL008"]
    assert len(results) == 1
    assert results[0]["level"] == "error"
    assert results[0]["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 2,
        "startColumn": 1,
    }
    assert results[0]["locations"][0]["logicalLocations"] == [{"fullyQualifiedName": "num_hosts"}]
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.validate(log, MINIMAL_SARIF_SCHEMA)


def test_github_format(tmp_path: Path) -> None:
    path = write_config(tmp_path, ERRORS)
    result = invoke("validate", "--format", "github", "--select", "TBL008", path)
    assert result.exit_code == 1
    assert result.output == (
        f"::error file={path},line=2,col=1,title=TBL008 (error)::num_hosts is 0; it must be >= 1"
        "%0Ahint: set num_hosts to the number of TPU hosts\n"
    )


def test_junit_format(tmp_path: Path) -> None:
    bad = write_config(tmp_path, ERRORS, "bad.pbtxt")
    good = write_config(tmp_path, CLEAN, "good.pbtxt")
    result = invoke("validate", "--format", "junit", "--select", "TBL", bad, good)
    assert result.exit_code == 1
    root = ET.fromstring(result.output.split("\n", 1)[1])
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "1", "0")
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [bad, good]
    failure = suites[0].find("testcase/failure")
    assert failure is not None and failure.get("message") == "num_hosts is 0; it must be >= 1"
    assert suites[1].find("testcase").get("name") == "valid"


def test_select_ignore_options(tmp_path: Path) -> None:
    path = write_config(tmp_path, ERRORS.replace('name: "ads"', 'name: ""'))
    out = invoke("validate", "--select", "TBL002,TBL008", path).output
    assert "TBL002" in out and "TBL008" in out
    out = invoke("validate", "--ignore", "TBL008", "--ignore", "TBL002", path)
    assert out.exit_code == 0


def test_suppression_comment(tmp_path: Path) -> None:
    suppressed = ERRORS.replace("num_hosts: 0", "num_hosts: 0  # tpuemb: disable=TBL008")
    path = write_config(tmp_path, suppressed)
    assert invoke("validate", path).exit_code == 0


def test_show_derived(tmp_path: Path) -> None:
    path = write_config(tmp_path, CLEAN)
    result = invoke("validate", "--show-derived", path)
    assert result.exit_code == 0
    assert "info[FEAT006] derived batch_size_per_tensor_core = 16" in result.output


def test_stdin(tmp_path: Path) -> None:
    result = invoke("validate", "-", stdin=ERRORS)
    assert result.exit_code == 1
    assert result.output.startswith("<stdin>:2:1: error[TBL008]")


def test_pyproject_settings(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [tool.tpuemb]
            ignore = ["TBL008"]
            fail-on = "warning"

            [tool.tpuemb.severity]
            TBL006 = "warning"
            """
        )
    )
    path = write_config(tmp_path, ERRORS.replace("dimension: 8", "dimension: 0"), "configs/c.pbtxt")
    result = invoke("validate", "--select", "TBL", path)
    assert result.exit_code == 1  # TBL006 is now a warning, and warnings fail
    assert "warning[TBL006]" in result.output and "TBL008" not in result.output
    assert invoke("validate", "--select", "TBL", "--fail-on", "error", path).exit_code == 0


def test_pyproject_bad_value_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.tpuemb]\nfail-on = "sometimes"\n')
    result = invoke("validate", write_config(tmp_path, CLEAN))
    assert result.exit_code == 2
    assert "key tool.tpuemb.fail-on" in result.output


def test_rules_command() -> None:
    result = invoke("rules", "--format", "json")
    assert result.exit_code == 0
    entries = json.loads(result.output)
    assert {
        "id": "TAG002",
        "severity": "error",
        "summary": "tags are not exactly 0..K-1",
    } in entries
    assert all(set(e) == {"id", "severity", "summary"} for e in entries)
    assert [e["id"] for e in entries] == sorted(RULES)
    text = invoke("rules").output
    assert "TAG007    info     tag table (K, list order)  (on request)" in text


def test_explain_command() -> None:
    result = invoke("explain", "tag002")
    assert result.exit_code == 0
    assert result.output.startswith("TAG002 · error · tags are not exactly 0..K-1\n")
    assert "renumber" in result.output
    unknown = invoke("explain", "TAG02")
    assert unknown.exit_code == 2
    assert "unknown rule" in unknown.output


DATA = Path(__file__).parent / "data" / "validate"


def test_tag_gap_end_to_end() -> None:
    path = str(DATA / "tag_gap.pbtxt")
    result = invoke("validate", path)
    assert result.exit_code == 1
    assert result.output == (
        f"{path}:30:31: error[TAG002] dynamic tag 2 is missing: the tags in use are 0, 1 and 3 "
        "(3 distinct), but they must be exactly 0..2; tag 1 is used by 'video' and tag 3 is used "
        "by 'news'\n"
        "    hint: renumber 3 -> 2 (tpuemb validate --fix renumbers the tags and prints the "
        "old -> new mapping; reorder the learning-rate list to match)\n"
        "Found 1 error, 0 warnings and 0 info in 1 file.\n"
    )
    table = invoke("validate", "--select", "TAG007", path)
    assert table.exit_code == 0
    # The first dynamic tag is unset (tag 0): located at its `dynamic` (10:21).
    assert table.output.startswith(
        f"{path}:10:21: info[TAG007] K = 3: the learning-rate list must have 3 elements: "
        "[0] learning rate of 'ads'; [1] learning rate of 'video'; [3] learning rate of 'news'\n"
    )
