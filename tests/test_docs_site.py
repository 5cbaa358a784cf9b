"""The README is a front page and the reference a site (issue 35, item 8).

- README.md stays short (at most 250 lines).
- Every page under docs/ is in the site's navigation (mkdocs.yml), and every page the navigation
  names exists or is generated.
- The README's quick-start lines are the ones CI runs (.ci/run), verbatim; the site's install page
  repeats the README's quick start, install lines and dependency table word for word.
- The generated pages (tools/docs_pages.py, the MkDocs hook) cover every registered rule and every
  command with each of its options; with MkDocs installed, the hook adds them to a build.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
from conftest import ROOT

DOCS = ROOT / "docs"
README = ROOT / "README.md"
MKDOCS_YML = ROOT / "mkdocs.yml"
HOOK = ROOT / "tools" / "docs_pages.py"


def _docs_pages() -> ModuleType:
    """tools/docs_pages.py as a module (it is a MkDocs hook file, not part of the package)."""
    if "docs_pages" not in sys.modules:
        spec = importlib.util.spec_from_file_location("docs_pages", HOOK)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["docs_pages"] = module
        spec.loader.exec_module(module)
    return sys.modules["docs_pages"]


def _nav_pages() -> list[str]:
    """The page paths listed under ``nav:`` in mkdocs.yml."""
    text = MKDOCS_YML.read_text(encoding="utf-8")
    nav = text.split("\nnav:\n", 1)[1]
    pages = []
    for line in nav.splitlines():
        if not line.strip() or not line.startswith(" "):
            break  # the next top-level key ends the navigation
        match = re.search(r'-\s+(?:(?:"[^"]*"|[^:"]+):\s+)?([\w./-]+\.md)\s*$', line)
        if match:
            pages.append(match[1])
    return pages


def _section(text: str, heading: str) -> str:
    """The text of the section under ``heading`` (a line of its own), up to the next heading of
    the same or a higher level."""
    level = len(heading.split(" ", 1)[0])
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end, in_code = start, False
    while end < len(lines):
        line = lines[end]
        in_code ^= line.lstrip().startswith("```")
        marker = line.split(" ", 1)[0]
        if not in_code and marker and set(marker) == {"#"} and len(marker) <= level:
            break
        end += 1
    return "\n".join(lines[start:end])


def _fenced(text: str) -> list[list[str]]:
    """The lines of each fenced code block of ``text``."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _table(text: str) -> list[str]:
    """The rows of the first Markdown table in ``text``."""
    rows: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return rows


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert 50 < len(lines) <= 250, len(lines)


def test_every_docs_page_is_in_the_navigation() -> None:
    nav = _nav_pages()
    on_disk = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
    assert len(on_disk) > 20
    assert sorted(set(on_disk) - set(nav)) == []
    assert len(nav) == len(set(nav)), "a page is listed twice"


def test_every_navigation_entry_exists_or_is_generated() -> None:
    generated = {_docs_pages().RULES_PAGE, _docs_pages().COMMANDS_PAGE}
    missing = [page for page in _nav_pages()
               if not (DOCS / page).is_file() and page not in generated]
    assert missing == []
    assert generated <= set(_nav_pages())
    text = MKDOCS_YML.read_text(encoding="utf-8")
    assert re.search(r"^hooks:\n  - tools/docs_pages\.py$", text, re.MULTILINE)
    assert re.search(r"^strict: true$", text, re.MULTILINE)


def _quick_start() -> list[str]:
    section = _section(README.read_text(encoding="utf-8"), "## Quick start")
    (block,) = _fenced(section)
    return block


def test_the_quick_start_lines_are_what_ci_runs() -> None:
    lines = _quick_start()
    assert len(lines) == 2
    assert lines[0].endswith("/tpuemb simulate")
    assert lines[1].endswith("-m pytest -q")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for line in lines:
        assert line in ci, f"the README's quick-start line {line!r} is not a line of .ci/run"
    # the suite runs after the example, and first with the newest protobuf (the floor is later)
    assert ci.index(lines[0]) < ci.index(lines[1])
    assert ".venv/bin/mkdocs build --strict" in "\n".join(ci)


def test_the_install_page_repeats_the_readme_word_for_word() -> None:
    readme = README.read_text(encoding="utf-8")
    page = (DOCS / "install.md").read_text(encoding="utf-8")
    assert _fenced(_section(page, "## Quick start"))[0] == _quick_start()
    assert _fenced(_section(page, "## Installing"))[0] == _fenced(_section(readme,
                                                                          "## Install"))[0]
    readme_table = _table(_section(readme, "## Dependencies and why"))
    assert _table(_section(page, "## Dependencies and why")) == readme_table
    # every optional extra of pyproject.toml is in the table, with its reason
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extras = re.findall(r"^(\w+) = \[", pyproject.split("[project.optional-dependencies]")[1]
                        .split("\n[")[0], re.MULTILINE)
    assert {"test", "dev", "plot", "ray", "plan", "docs"} <= set(extras)
    for extra in set(extras) - {"test"}:
        assert any(f"extra `{extra}`" in row for row in readme_table), extra
    docs_row = next(row for row in readme_table if "extra `docs`" in row)
    assert "mkdocs-material>=9.5" in docs_row and len(docs_row.split("|")[3].strip()) > 40


def test_the_rule_page_has_every_registered_rule() -> None:
    import tpuemb_cfg.commands.validate  # noqa: F401  (what `tpuemb rules` lists)
    from tpuemb_cfg.rules import RULES
    from tpuemb_cfg.validation.fix import FIXES

    page = _docs_pages().rules_page()
    headings = re.findall(r"^### (\S+)$", page, re.MULTILINE)
    assert headings == sorted(RULES)
    assert len(headings) >= 125
    for rule_id, rule in RULES.items():
        section = _section(page, f"### {rule_id}")
        assert rule.summary.replace("<", "&lt;") in section, rule_id
        assert rule.severity in section.splitlines()[1], rule_id
        # the explanation's sections, as bold lines, and its last line
        assert "**Use instead**" in section, rule_id
        last = rule.explanation.strip().splitlines()[-1].replace("<", "&lt;")
        assert last in section, rule_id
        assert f"| [{rule_id}](#{rule_id.lower()}) |" in page
    fixed = {rule_id for ids in FIXES.values() for rule_id in ids}
    for rule_id in fixed:
        assert "Repaired by `tpuemb validate --fix`" in _section(page, f"### {rule_id}")
    assert page.count("Repaired by `tpuemb validate --fix`") == len(fixed)


def test_the_command_page_has_every_command_and_option() -> None:
    from tpuemb_cfg.cli import COMMANDS, main

    page = _docs_pages().commands_page()
    headings = re.findall(r"^## tpuemb (\S+)$", page, re.MULTILINE)
    assert headings == sorted(COMMANDS)
    assert "validate" in headings and "plan" in headings
    root = click.Context(main, info_name="tpuemb")
    for name in COMMANDS:
        command = main.get_command(root, name)
        assert command is not None
        section = _section(page, f"## tpuemb {name}")
        assert f"Usage: tpuemb {name} [OPTIONS]" in section
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for flag in param.opts + param.secondary_opts:
                    assert re.search(rf"^\| `[^`]*{re.escape(flag)}\b", section,
                                     re.MULTILINE), (name, flag)
    # the help texts as click shows them, defaults included
    assert "[default: numba]" in _section(page, "## tpuemb simulate")


def test_the_hook_adds_the_generated_pages_to_a_build(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    from mkdocs.config import load_config
    from mkdocs.structure.files import Files

    config: Any = load_config(str(MKDOCS_YML), site_dir=str(tmp_path / "site"))
    # the event as a build runs it: the hooks named in mkdocs.yml, through MkDocs' plugins
    files = config.plugins.on_files(Files([]), config=config)
    generated = {f.src_uri: f.content_string for f in files}
    assert generated == _docs_pages().pages()


def test_the_home_page_has_the_readme_s_commands() -> None:
    readme = _table(README.read_text(encoding="utf-8"))
    assert readme[0] == "| command | what it does |" and len(readme) >= 9
    assert _table((DOCS / "index.md").read_text(encoding="utf-8")) == readme


def test_the_readme_links_resolve() -> None:
    """Every relative link of the README names a file or folder of the repository (the site
    checks its own links when it is built)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", README.read_text(encoding="utf-8"))
    local = [t.split("#", 1)[0] for t in targets if "://" not in t]
    assert len(local) > 20
    assert [t for t in local if not (ROOT / t).exists()] == []
