"""Project settings for ``tpuemb validate`` from ``[tool.tpuemb]`` in the nearest pyproject.toml.

Example::

    [tool.tpuemb]
    select = ["TAG", "MODE", "TBL001"]   # ids or prefixes; default: every default-on rule
    ignore = ["TBL010"]                  # ids or prefixes
    fail-on = "warning"                  # error (default), warning or info
    show-derived = false                 # also run the on-request info rules
    memory-budget = "16G"                # per-host budget for SIZE003 (bytes, or K/M/G/T: 2^10..)
    tpu = "v4"                           # TPU generation whose device memory SIZE004 checks

    [tool.tpuemb.severity]               # change a rule's severity
    TAG006 = "warning"

The nearest pyproject.toml is the first one found walking up from the folder that holds all the
files being validated (the current folder for standard input); the search stops at the first
pyproject.toml, with or without a ``[tool.tpuemb]`` table. Command-line options win: ``--select``
and ``--fail-on`` replace the file's values, ``--ignore`` adds to them.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from tpuemb_cfg.base import units
from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.model import SEVERITY_RANK, Severity
from tpuemb_cfg.model.derived import TPU_DEVICE_MEMORY


@dataclass
class Settings:
    """Validation settings; ``source`` is the pyproject.toml they came from (``None``: defaults)."""

    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    fail_on: Severity = "error"
    show_derived: bool = False
    severity: dict[str, Severity] = field(default_factory=dict)
    memory_budget_bytes: int | None = None
    tpu_generation: str | None = None
    source: str | None = None


def parse_size(value: object, *, path: str | None = None, key: str = "memory-budget") -> int:
    """Bytes from an int or a string such as ``"16GiB"`` / ``"512M"``: the one size grammar of
    :func:`tpuemb_cfg.base.units.parse_size` (binary units; ``"16GB"`` is 16 GiB)."""
    try:
        return units.parse_size(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{value!r}: {exc}", path=path, key=key) from None


def parse_tpu(value: object, *, path: str | None = None, key: str = "tpu") -> str:
    """A known TPU generation name (``"v4"``, ``"V5e"`` -> ``"v5e"``) for SIZE004."""
    if isinstance(value, str) and value.strip().lower() in TPU_DEVICE_MEMORY:
        return value.strip().lower()
    raise InputError(
        f"expected a TPU generation, one of {', '.join(TPU_DEVICE_MEMORY)}; got {value!r}",
        path=path,
        key=key,
    )


def find_pyproject(start: str | os.PathLike[str]) -> Path | None:
    """The first pyproject.toml in ``start`` or one of its parents."""
    folder = Path(os.path.realpath(start))
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file():
            return path
    return None


def common_folder(files: Iterable[str]) -> Path:
    """The deepest folder holding every file (the current folder for ``-`` or no files)."""
    # os.path.realpath, not Path.resolve: a loop of symbolic links is that file's error (its
    # own report), not one that stops every other file.
    folders = [os.path.dirname(os.path.realpath(f)) for f in files if f != "-"]
    if not folders:
        return Path.cwd()
    return Path(os.path.commonpath(folders))


def _str_list(value: Any, path: str, key: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(
            f"expected a list of rule ids or prefixes, got {value!r}", path=path, key=key
        )
    return [v.strip().upper() for v in value if v.strip()]


def _severity(value: Any, path: str, key: str) -> Severity:
    if not isinstance(value, str) or value.lower() not in SEVERITY_RANK:
        raise InputError(
            f"expected 'error', 'warning' or 'info', got {value!r}", path=path, key=key
        )
    return cast(Severity, value.lower())


def _flag(value: Any, path: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"expected true or false, got {value!r}", path=path, key=key)
    return value


def _severities(value: Any, path: str, key: str) -> dict[str, Severity]:
    if not isinstance(value, dict):
        raise InputError("expected a table of rule id = severity", path=path, key=key)
    return {
        str(rule_id).upper(): _severity(sev, path, f"{key}.{rule_id}")
        for rule_id, sev in value.items()
    }


def _budget(value: Any, path: str, key: str) -> int:
    return parse_size(value, path=path, key=key)


def _tpu(value: Any, path: str, key: str) -> str:
    return parse_tpu(value, path=path, key=key)


#: The keys of ``[tool.tpuemb]`` (``_`` read as ``-``): the :class:`Settings` attribute each
#: sets and the reader of its value (value, file, dotted key).
_KEYS: dict[str, tuple[str, Callable[[Any, str, str], object]]] = {
    "select": ("select", _str_list),
    "ignore": ("ignore", _str_list),
    "fail-on": ("fail_on", _severity),
    "show-derived": ("show_derived", _flag),
    "memory-budget": ("memory_budget_bytes", _budget),
    "tpu": ("tpu_generation", _tpu),
    "severity": ("severity", _severities),
}


def _read_document(pyproject: Path) -> dict[str, Any]:
    """The TOML document ``pyproject``."""
    name = str(pyproject)
    try:
        with open(pyproject, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=name) from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} cannot appear in a TOML file (TOML "
            "files are UTF-8); save it as UTF-8", path=name, offset=exc.start) from None
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\s*\(at line (\d+), column (\d+)\)", str(exc))
        reason = str(exc)[: at.start()] if at else str(exc)
        raise InputError(f"invalid TOML: {reason}", path=name,
                         line=int(at[1]) if at else None,
                         column=int(at[2]) if at else None) from None


def load_settings(start: str | os.PathLike[str] | None = None) -> Settings:
    """Settings from the nearest pyproject.toml above ``start`` (defaults when there is none).

    Raises :class:`InputError` (with the file and key) for unreadable TOML or a bad value.
    """
    pyproject = find_pyproject(start if start is not None else Path.cwd())
    if pyproject is None:
        return Settings()
    name = str(pyproject)
    document = _read_document(pyproject)
    tool = document.get("tool")
    if tool is not None and not isinstance(tool, dict):
        raise InputError(f"expected a table ([tool]), got {tool!r}", path=name, key="tool")
    table = (tool or {}).get("tpuemb")
    settings = Settings(source=name)
    if table is None:
        return settings
    if not isinstance(table, dict):
        raise InputError(f"expected a table ([tool.tpuemb]), got {table!r}", path=name,
                         key="tool.tpuemb")
    for raw_key, value in table.items():
        where = f"tool.tpuemb.{raw_key}"
        known = _KEYS.get(raw_key.replace("_", "-"))
        if known is not None:
            attribute, read = known
            setattr(settings, attribute, read(value, name, where))
        elif not isinstance(value, dict):  # sub-tables belong to other commands
            raise InputError(
                f"unknown setting {raw_key!r}; known: select, ignore, fail-on, show-derived, "
                "memory-budget, tpu, [tool.tpuemb.severity]",
                path=name,
                key=where,
            )
    return settings
