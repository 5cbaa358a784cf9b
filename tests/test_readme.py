"""Every shell and Python example of README.md, and of the site pages that took over the README's
examples (issue 35), runs as printed (issue 12).

The ```sh, ```console and ```python blocks of each document run in order in one temporary folder
(one per document) holding a copy of examples/, as a new user following the page from the top
would run them: shell lines through
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

#: The documents whose examples run, each in its own folder.
DOCUMENTS = ("README.md", "docs/install.md", "docs/formats.md", "docs/tour.md",
             "docs/plan-walkthrough.md", "docs/guarantees.md", "docs/diff.md")

# A block is skipped when its first line starts with one of these; keep this list short.
SKIPPED = {
    "python3 -m venv .venv": "creates a virtual environment and installs packages with pip",
    "pip install .": "installs packages with pip",
}

_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass
class Block:
    document: str  # the path from the repository's root
    language: str
    line: int  # 1-based line of the opening fence in the document
    text: str

    @property
    def id(self) -> str:
        return f"{self.document}-{self.language}-line{self.line}"

    @property
    def where(self) -> str:
        return f"{self.document}:{self.line}"


def blocks(document: str) -> list[Block]:
    """The ```sh, ```console and ```python blocks of ``document``, in order."""
    found: list[Block] = []
    lines = (ROOT / document).read_text(encoding="utf-8").splitlines()
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
            found.append(Block(document, language, start + 1, "\n".join(body) + "\n"))
    return found


BLOCKS = [block for document in DOCUMENTS for block in blocks(document)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One folder per document (made when its first block runs), with a copy of examples/."""
    return {}


def _folder(folders: dict[str, Path], document: str, factory: pytest.TempPathFactory) -> Path:
    if document not in folders:
        root = factory.mktemp(Path(document).stem)
        shutil.copytree(ROOT / "examples", root / "examples")
        folders[document] = root
    return folders[document]


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
            assert steps, f"{block.where}: output before the first `$ ` command"
            steps[-1][1].append(line)
    for command, expected in steps:
        done = subprocess.run(["bash", "-c", command + " 2>&1"], cwd=cwd, env=_environment(),
                              capture_output=True, text=True, timeout=300)
        shown = "\n".join(expected).rstrip("\n")
        assert done.stdout.rstrip("\n") == shown, (
            f"{block.where}: `{command}` printed\n{done.stdout}\ninstead of\n{shown}")


def _sh(block: Block, cwd: Path) -> None:
    """Every command line (a trailing `# comment` is the shell's business) exits 0."""
    for line in block.text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        done = _shell(line, cwd)
        assert done.returncode == 0, (
            f"{block.where}: `{line}` exited {done.returncode}\n{done.stdout}\n"
            f"{done.stderr}")
        assert "Traceback" not in done.stderr


def _python(block: Block, cwd: Path) -> None:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        exec(compile(block.text, block.where, "exec"), {"__name__": "__readme__"})
    finally:
        os.chdir(old)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_readme_example_runs_as_printed(block: Block, folders: dict[str, Path],
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    first = block.text.lstrip().splitlines()[0] if block.text.strip() else ""
    for prefix, reason in SKIPPED.items():
        if first.startswith(prefix):
            pytest.skip(f"{block.where}: {reason}")
    folder = _folder(folders, block.document, tmp_path_factory)
    {"sh": _sh, "console": _console, "python": _python}[block.language](block, folder)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_documents_have_examples(document: str) -> None:
    """Each document has examples that run, at most 3 skipped; the README has every kind."""
    found = [b for b in BLOCKS if b.document == document]
    skipped = [b for b in found if any(b.text.lstrip().startswith(p) for p in SKIPPED)]
    assert len(skipped) <= 3, [b.id for b in skipped]
    assert len(found) > len(skipped), document
    if document == "README.md":
        assert {b.language for b in found} == {"sh", "console", "python"}
