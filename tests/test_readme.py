"""Every shell and Python example of README.md runs as printed (issue 12).

The ```sh, ```console and ```python blocks run in order in one temporary folder holding a copy of
examples/, as a new user following the README from the top would run them: shell lines through
bash with the installed `tpuemb` first on PATH, Python blocks with exec. A ```console block shows
``$ command`` lines followed by their output; the output must be exactly that (stdout and stderr
together). A ```sh line must exit 0.

Blocks that cannot run here are listed in SKIPPED with the reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT

README = ROOT / "README.md"

# A block is skipped when its first line starts with one of these; keep this list short.
SKIPPED = {
    "python3 -m venv .venv": "creates a virtual environment and installs packages with pip",
    "pip install .": "installs packages with pip",
}

_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    language: str
    line: int  # 1-based line of the opening fence in README.md
    text: str

    @property
    def id(self) -> str:
        return f"{self.language}-line{self.line}"


def blocks() -> list[Block]:
    """The ```sh, ```console and ```python blocks of README.md, in order."""
    found: list[Block] = []
    lines = README.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start, language, body = i, match[1], []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        if language in ("sh", "console", "python"):
            found.append(Block(language, start + 1, "\n".join(body) + "\n"))
    return found


BLOCKS = blocks()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for the whole README, with a copy of examples/."""
    root = tmp_path_factory.mktemp("readme")
    shutil.copytree(ROOT / "examples", root / "examples")
    return root


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("TPUEMB_MAX_INPUT", None)
    return env


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=_environment(),
                          capture_output=True, text=True, timeout=300)


def _console(block: Block, cwd: Path) -> None:
    """``$ command`` lines and the output each must print, exactly."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"README.md:{block.line}: output before the first `$ ` command"
            steps[-1][1].append(line)
    for command, expected in steps:
        done = subprocess.run(["bash", "-c", command + " 2>&1"], cwd=cwd, env=_environment(),
                              capture_output=True, text=True, timeout=300)
        shown = "\n".join(expected).rstrip("\n")
        assert done.stdout.rstrip("\n") == shown, (
            f"README.md:{block.line}: `{command}` printed\n{done.stdout}\ninstead of\n{shown}")


def _sh(block: Block, cwd: Path) -> None:
    """Every command line (a trailing `# comment` is the shell's business) exits 0."""
    for line in block.text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        done = _shell(line, cwd)
        assert done.returncode == 0, (
            f"README.md:{block.line}: `{line}` exited {done.returncode}\n{done.stdout}\n"
            f"{done.stderr}")
        assert "Traceback" not in done.stderr


def _python(block: Block, cwd: Path) -> None:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        exec(compile(block.text, f"README.md:{block.line}", "exec"), {"__name__": "__readme__"})
    finally:
        os.chdir(old)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_readme_example_runs_as_printed(block: Block, folder: Path) -> None:
    first = block.text.lstrip().splitlines()[0] if block.text.strip() else ""
    for prefix, reason in SKIPPED.items():
        if first.startswith(prefix):
            pytest.skip(f"README.md:{block.line}: {reason}")
    {"sh": _sh, "console": _console, "python": _python}[block.language](block, folder)


def test_the_readme_has_examples_of_every_kind() -> None:
    kinds = {b.language for b in BLOCKS}
    assert kinds == {"sh", "console", "python"}
    skipped = [b for b in BLOCKS if any(b.text.lstrip().startswith(p) for p in SKIPPED)]
    assert len(skipped) <= 3, [b.id for b in skipped]
