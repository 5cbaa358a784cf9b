"""``tpuemb diff`` on the command line: git (``--against``), outputs, exit codes, hostile input."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

EXAMPLE = ROOT / "examples" / "sparsecore" / "v6e_dcnv2.py"
NEXT = ROOT / "examples" / "diff" / "v6e_dcnv2_next.py"
LEGACY = ROOT / "examples" / "quickstart.pbtxt"

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env)


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository whose HEAD holds the example, and whose work tree holds the next one."""
    _git(tmp_path, "init", "-q")
    model = tmp_path / "model.py"
    shutil.copy(EXAMPLE, model)
    _git(tmp_path, "add", "model.py")
    _git(tmp_path, "commit", "-q", "-m", "the model")
    shutil.copy(NEXT, model)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@needs_git
def test_against_head_reads_old_from_git(repo: Path) -> None:
    result = run_cli("diff", "model.py", "--against", "HEAD", "-f", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["old"] == "HEAD:model.py" and document["new"] == "model.py"
    moved = {c["name"] for c in document["changes"] if c["subject"] == "stack"}
    assert {"brand", "category", "item_terms", "query_terms"} <= moved
    # the same as comparing the two files
    direct = run_cli("diff", str(EXAMPLE), "model.py", "-f", "json")
    assert json.loads(direct.stdout)["changes"] == [
        {**c, "old_location": c["old_location"] and [str(EXAMPLE), *c["old_location"][1:]]}
        for c in document["changes"]]


@needs_git
def test_against_refuses_what_git_cannot_give(repo: Path) -> None:
    result = run_cli("diff", "model.py", "--against", "no-such-ref")
    assert result.exit_code == 2
    assert "no-such-ref" in result.output and "Traceback" not in result.output
    (repo / "other.py").write_text("x = 1\n")  # a file the change adds: nothing to compare
    result = run_cli("diff", "other.py", "--against", "HEAD")
    assert result.exit_code == 0 and "other.py is not in HEAD" in result.stderr
    result = run_cli("diff", "model.py", "--against", "--help")
    assert result.exit_code == 2


def test_against_outside_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    shutil.copy(NEXT, tmp_path / "model.py")
    monkeypatch.chdir(tmp_path)
    result = run_cli("diff", "model.py", "--against", "HEAD")
    assert result.exit_code == 2, result.output
    assert "git" in result.output and "Traceback" not in result.output


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    for args in (
        [str(EXAMPLE)],                                               # one file, no --against
        [str(EXAMPLE), str(NEXT), str(NEXT)],                         # three files
        [str(EXAMPLE), str(tmp_path / "missing.py")],                 # missing file
        [str(EXAMPLE), str(tmp_path)],                                # a folder
        [str(EXAMPLE), str(NEXT), "--topology", "v9z-8"],             # unknown chip
        [str(EXAMPLE), str(NEXT), "--topology", "v5p-64,v6e-32,v6e-8"],
        [str(EXAMPLE), str(NEXT), "--tf-version", "3.0"],
        [str(EXAMPLE), str(NEXT), "--keras-backend", "torch"],
        [str(EXAMPLE), str(NEXT), "-o", str(NEXT)],                   # output over an input
        [str(EXAMPLE), str(NEXT), "--ids", str(tmp_path / "none.npz")],
        [str(EXAMPLE), str(NEXT), "--object-path", "model//embedding"],
        [str(EXAMPLE), str(NEXT), "--topology", "v6e-99999999999999999999"],
        [str(EXAMPLE), str(NEXT), "--object-path", "emb\x1b[31m"],
        [str(EXAMPLE), str(NEXT), "--object-path", ""],
    ):
        result = run_cli("diff", *args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output, args
        assert result.output.strip(), args


def test_a_broken_input_names_its_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("table_descriptor {\n  name: \"a\"\n  vocabulary_size: many\n}\n")
    result = run_cli("diff", str(LEGACY), str(bad))
    assert result.exit_code == 2
    assert f"{bad}:3" in result.output and "Traceback" not in result.output


def test_the_report_is_written_atomically_and_an_input_is_never_replaced(
        tmp_path: Path) -> None:
    out = tmp_path / "review.md"
    result = run_cli("diff", str(EXAMPLE), str(NEXT), "-f", "markdown", "-o", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("### tpuemb diff") and "brand_category_shop" in text
    assert [p.name for p in tmp_path.iterdir()] == ["review.md"]  # no temporary left
    link = tmp_path / "link.md"
    link.symlink_to(NEXT)
    before = NEXT.read_bytes()
    result = run_cli("diff", str(EXAMPLE), str(NEXT), "-o", str(link))
    assert result.exit_code == 2 and NEXT.read_bytes() == before


def test_fail_on_decides_the_exit_status() -> None:
    assert run_cli("diff", str(EXAMPLE), str(NEXT)).exit_code == 0
    assert run_cli("diff", str(EXAMPLE), str(NEXT), "--fail-on", "warning").exit_code == 1
    assert run_cli("diff", str(EXAMPLE), str(EXAMPLE), "--fail-on", "info").exit_code == 0


@needs_git
def test_the_input_limit_holds_for_a_file_read_from_git(repo: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPUEMB_MAX_INPUT", "1K")
    result = run_cli("diff", "model.py", "--against", "HEAD")
    assert result.exit_code == 2
    assert "HEAD:model.py" in result.output and "input limit" in result.output


def test_ctrl_c_while_a_spec_runs_exits_130_and_writes_nothing(tmp_path: Path) -> None:
    import sys

    stop = tmp_path / "stop.py"
    stop.write_text(NEXT.read_text() + "\nraise KeyboardInterrupt\n")
    out = tmp_path / "review.md"
    done = subprocess.run([sys.executable, "-m", "tpuemb_cfg", "diff", str(EXAMPLE), str(stop),
                           "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stop.py"]


def _tf_cases() -> list[dict]:
    data = json.loads((ROOT / "tests" / "data" / "diff" / "breaking" / "cases.json").read_text())
    return [c for c in data["cases"]
            if c["old"]["saved_by"] == c["new"]["restored_by"] == "TPUEmbeddingV2"]


@pytest.mark.parametrize("after_build", [False, True], ids=["restore-on-create", "after-build"])
def test_breaking_agrees_with_tensorflow_on_every_stored_pair(tmp_path: Path,
                                                              after_build: bool) -> None:
    """The OLD/NEW pairs TensorFlow 2.21 itself saved and restored on a CPU
    (tests/data/diff/breaking, tools/tf_reference/checkpoint_pairs.py): `tpuemb diff
    --breaking` gives TensorFlow's outcome, and exits 1 exactly when OLD's state does not all
    arrive (TensorFlow raised, a table or slot came back other than it was saved, or a
    variable of OLD has none of its name under NEW: a dropped slot)."""
    cases = _tf_cases()
    assert len(cases) >= 20
    for case in cases:
        old, new = tmp_path / f"{case['id']}_old.py", tmp_path / f"{case['id']}_new.py"
        old.write_text(case["old"]["spec"])
        new.write_text(case["new"]["spec"])
        args = ["diff", str(old), str(new), "--breaking", "-f", "json",
                "--object-path", case["root"]]
        expected = case["after_build"] if after_build else case
        result = run_cli(*args, *(["--after-build"] if after_build else []))
        document = json.loads(result.stdout)
        assert document["checkpoint"]["outcome"] == expected["outcome"], case["id"]
        # every value NEW restored is OLD's (or new), and every OLD variable has a NEW one
        kept = (all(v in ("equal", "new") for v in expected["values"].values())
                and set(case["old"]["variables"]) <= set(case["new"]["variables"]))
        assert result.exit_code == (0 if kept and expected["outcome"] in ("restores", "reshards")
                                    else 1), (case["id"], expected, result.output[-2000:])


def test_the_library_refuses_wrong_types_naming_the_argument() -> None:
    import tpuemb_cfg
    from tpuemb_cfg import DiffOptions, SideOptions
    from tpuemb_cfg.base.errors import UsageError

    for make, match in ((lambda: SideOptions(topology=5), "SideOptions topology"),  # type: ignore[arg-type]
                        (lambda: DiffOptions(old="v5p"), "DiffOptions old"),  # type: ignore[arg-type]
                        (lambda: DiffOptions(findings=1), "DiffOptions findings"),  # type: ignore[arg-type]
                        (lambda: tpuemb_cfg.diff(EXAMPLE, EXAMPLE, "x"), "options")):  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=match):
            make()
    with pytest.raises(UsageError, match="keras_backend 'torch'"):
        SideOptions(keras_backend="torch")
