"""The generated pages of the documentation site: every validation rule and every command.

MkDocs runs this file as a hook (``hooks:`` in ``mkdocs.yml``): :func:`on_files` adds the pages
to each build, so they are written from the code itself and cannot drift from it.

- ``reference/rules.md``: every rule of the registry, in the order ``tpuemb rules`` lists them
  (id, severity, summary, what it reads, the ``tpuemb explain`` text, and whether
  ``tpuemb validate --fix`` repairs it). Rules reach the registry by importing
  :mod:`tpuemb_cfg.commands.validate`, the module of ``tpuemb rules`` and ``tpuemb explain``, so
  a family registered there appears here with no change to this file.
- ``reference/commands.md``: every subcommand of the ``tpuemb`` group (imported as the group
  imports it when it runs), its usage line, its help and each option as ``--help`` shows it.

:func:`pages` is plain Python (no MkDocs import): the tests call it directly.
"""

from __future__ import annotations

import re
from typing import Any

RULES_PAGE = "reference/rules.md"
COMMANDS_PAGE = "reference/commands.md"

_HEADING = re.compile(r"^#{1,6} +(.*?)\s*$")
_FENCE = re.compile(r"^\s*```")


def _cell(text: str) -> str:
    """Text for one cell of a Markdown table: one line, pipes escaped, no raw HTML."""
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def _prose(text: str) -> str:
    """Help or explanation text outside code blocks: no raw HTML."""
    return text.replace("<", "&lt;")


def _explanation(text: str) -> list[str]:
    """A rule's explanation with its ``## Section`` headings as bold lines, so that the page's
    headings stay one per rule; code blocks are kept as they are."""
    lines: list[str] = []
    in_code = False
    for line in text.splitlines():
        if _FENCE.match(line):  # a code block stands apart from the paragraphs around it
            in_code = not in_code
            lines.extend([line, ""] if not in_code else ["", line])
            continue
        heading = None if in_code else _HEADING.match(line)
        if heading is not None:
            lines.extend(["", f"**{heading[1]}**", ""])
        else:
            lines.append(line if in_code else _prose(line))
    if in_code:  # an unclosed block must not swallow the next rule
        lines.append("```")
    return lines


def rules_page() -> str:
    """The page of every registered validation rule."""
    import tpuemb_cfg.commands.validate  # noqa: F401  (the module of `rules` and `explain`)
    from tpuemb_cfg.rules import RULES  # every rule registered by then
    from tpuemb_cfg.validation.fix import fixes_for

    entries = [RULES[rule_id] for rule_id in sorted(RULES)]
    out = [
        "# Rules",
        "",
        "Generated from the rule registry when the site is built: every rule `tpuemb rules` "
        "lists, with the text `tpuemb explain ID` prints. The target is what a rule reads (a "
        "`TPUEmbeddingConfiguration`, a SparseCore configuration, ...). How validation runs, "
        "selects and silences them: [validate](../validate.md).",
        "",
        f"{len(entries)} rules. A rule *on request* runs only when selected (`--select`) or with "
        "`--show-derived`; the `--fix` column names the fix of `tpuemb validate --fix` that "
        "repairs it.",
        "",
        "| rule | severity | summary | target | `--fix` |",
        "|---|---|---|---|---|",
    ]
    for r in entries:
        fix = ", ".join(sorted(fixes_for([r.id]))) or ""
        severity = r.severity + (" (on request)" if r.on_request else "")
        out.append(f"| [{r.id}](#{r.id.lower()}) | {severity} | {_cell(r.summary)} | "
                   f"{r.target} | {fix} |")
    family = None
    for r in entries:
        if r.family != family:
            family = r.family
            out += ["", f"## {family}"]
        out += ["", f"### {r.id}", "", f"**{r.severity}**"
                + (" (on request: `--select` it or use `--show-derived`)" if r.on_request else "")
                + f" · target `{r.target}` · {_prose(r.summary)}"]
        fixes = sorted(fixes_for([r.id]))
        if fixes:
            out += ["", f"Repaired by `tpuemb validate --fix` ({', '.join(fixes)})."]
        out += ["", *_explanation(r.explanation)]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).rstrip() + "\n"


def _help_paragraphs(text: str) -> list[str]:
    """Click help text as Markdown: a ``\\b`` paragraph (printed as written) becomes a code
    block, the others plain paragraphs."""
    import inspect

    lines: list[str] = []
    for paragraph in re.split(r"\n\s*\n", inspect.cleandoc(text)):
        if paragraph.startswith("\b"):
            body = paragraph[1:].strip("\n")
            lines += ["```text", body, "```", ""]
        else:
            lines += [_prose(" ".join(paragraph.split())), ""]
    return lines


def _context(command: Any, name: str, parent: Any | None = None) -> Any:
    """The context the command runs in (its own settings, its parent's help option names)."""
    import click

    return click.Context(command, info_name=name, parent=parent, **command.context_settings)


def _options_table(command: Any, ctx: Any) -> list[str]:
    rows = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or param.param_type_name == "argument":  # arguments: in the usage
            continue
        names, help_text = record
        # a pipe inside a code span does not end the cell
        rows.append(f"| `{' '.join(names.split()).replace('`', '')}` | {_cell(help_text)} |")
    if not rows:
        return []
    return ["| option | what it does |", "|---|---|", *rows, ""]


def commands_page() -> str:
    """The page of every `tpuemb` command and its options, from the click definitions."""
    from tpuemb_cfg.cli import COMMANDS, main

    root = _context(main, "tpuemb")
    names = main.list_commands(root)
    out = [
        "# Command reference",
        "",
        "Generated from the `tpuemb` command's own definitions when the site is built: what "
        "`tpuemb COMMAND --help` prints, as tables.",
        "",
        "```text",
        main.get_usage(root),
        "```",
        "",
        *_help_paragraphs(main.help or ""),
        *_options_table(main, root),
        "| command | what it does |",
        "|---|---|",
        *(f"| [`tpuemb {name}`](#tpuemb-{name}) | {_cell(COMMANDS[name][2])} |"
          for name in names),
    ]
    for name in names:
        command = main.get_command(root, name)
        if command is None:
            continue
        ctx = _context(command, name, root)
        out += ["", f"## tpuemb {name}", "", "```text", command.get_usage(ctx), "```", ""]
        out += _help_paragraphs(command.help or COMMANDS[name][2])
        out += _options_table(command, ctx)
    return "\n".join(out).rstrip() + "\n"


def pages() -> dict[str, str]:
    """Every generated page: its path under docs/ and its Markdown."""
    return {RULES_PAGE: rules_page(), COMMANDS_PAGE: commands_page()}


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated pages to the build."""
    from mkdocs.structure.files import File

    for path, content in pages().items():
        files.append(File.generated(config, path, content=content))
    return files
