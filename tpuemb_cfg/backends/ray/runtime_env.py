"""The Ray ``runtime_env`` of the host actors: tpuemb ships itself, the user adds the rest.

A host actor unpickles ``host.Shard``, so every node that runs one must import ``tpuemb_cfg`` -
the driver's version of it, since the driver and the actors exchange its objects. Rather than
asking for the package on every machine, the driver sends its own: :func:`actor_runtime_env`
puts the directory of the imported ``tpuemb_cfg`` package (with its compiled protobuf modules,
``proto/*_pb2.py``, which the build generates there) in the actors' ``py_modules``. Ray zips it
once per driver (about 2.5 MB; caches excluded: :data:`EXCLUDES`), keeps it in the cluster's
object store under a hash of its content, and unpacks it once per node; the actor's Python then
finds it first on its ``PYTHONPATH`` (Ray prepends the ``py_modules`` directories), ahead of any
``tpuemb`` installed on the node, editable or not.

A directory rather than a wheel: it is what the driver runs, whatever installed it (a wheel, an
editable checkout, ``PYTHONPATH``), its generated modules included, with no build step, and
nothing is installed on the nodes (no pip, no network).

The user's own ``runtime_env`` (``--runtime-env JSON``: ``pip``, ``env_vars``, ``working_dir``
...) is checked before anything starts (:func:`check_runtime_env`: a JSON object of the fields
Ray knows, of the types Ray accepts) and merged with tpuemb's: the user's keys as given, the
package first in ``py_modules`` (the user's entries after it), the caches first in
``excludes``. The env is per actor (``remote.options(runtime_env=...)``), so it also reaches the
actors of a process that was connected before (a Ray Job, a notebook); Ray merges it with the
job's ``runtime_env`` key by key (``env_vars`` variable by variable), so a job-level
``py_modules`` must be given again here to reach the actors.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tpuemb_cfg.base.errors import InputError, UsageError, parameter, printable
from tpuemb_cfg.formats.limits import (
    format_size,
    json_too_deep,
    line_col,
    max_input_bytes,
    read_input,
)

__all__ = ["EXCLUDES", "MAX_NESTING", "actor_runtime_env", "check_runtime_env", "package_dir",
           "parse_runtime_env"]

#: What the shipped package leaves out (gitwildmatch patterns, as Ray's ``excludes``): Python's
#: and numba's caches, which the nodes make for themselves.
EXCLUDES = ("__pycache__", "*.pyc", ".numba-cache")


def package_dir() -> str:
    """The directory of the ``tpuemb_cfg`` package this process imported (this module's
    grandparent)."""
    return str(Path(__file__).resolve().parents[2])


#: How deep a ``runtime_env`` may nest (JSON objects and arrays, the top-level object counted):
#: Ray's fields need at most four levels (``{"pip": {"packages": ["numpy"]}}``); deeper input
#: is refused before it is parsed (a recursive parser would exhaust the stack).
MAX_NESTING = 32


def parse_runtime_env(text: str) -> dict[str, Any]:
    """A ``runtime_env`` from the command line: a JSON object, or ``@FILE`` holding one (read
    within the input limit, ``TPUEMB_MAX_INPUT``: a device or a pipe is read in chunks up to
    it); checked by :func:`check_runtime_env`. Anything else is one ``UsageError`` line."""
    origin = parameter("runtime_env")
    source = printable(text if len(text) <= 80 else text[:79] + "…")  # echoed as it may print
    limit = max_input_bytes()
    if text.startswith("@"):
        try:
            data = read_input(text[1:], limit, what="a runtime_env")
            text = data.decode("utf-8")
        except InputError as exc:
            raise UsageError(f"{origin} {source}: {exc.message}") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"{origin} {source}: not UTF-8 text (byte {exc.start}); expected a "
                             "JSON object") from None
    elif len(text) > limit:
        raise UsageError(f"{origin}: {len(text):,} characters, more than the input limit of "
                         f"{format_size(limit)}; pass a smaller runtime_env")
    deep = json_too_deep(text, MAX_NESTING)
    if deep is not None:
        line, column = line_col(text, deep)
        raise UsageError(f"{origin} {source}: nested more than {MAX_NESTING} levels deep (at "
                         f"line {line} column {column}); a runtime_env needs a few (e.g. "
                         "'{\"env_vars\": {\"A\": \"1\"}}')")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{origin} {source}: not JSON ({exc.msg} at line {exc.lineno} column "
                         f"{exc.colno}); expected an object such as "
                         "'{\"pip\": [\"numpy\"], \"env_vars\": {\"A\": \"1\"}}'") from None
    return check_runtime_env(value)


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests dicts, lists and tuples more than :data:`MAX_NESTING` levels deep
    (a container that holds itself does); walked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children = list(item.values())
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            continue
        if depth > MAX_NESTING:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def check_runtime_env(value: Any) -> dict[str, Any]:
    """``value`` as a plain dict when Ray accepts it as a ``runtime_env``: a mapping of the
    fields Ray knows (``RuntimeEnv.known_fields``: a misspelt one would otherwise be taken
    for a plugin and ignored) whose values have the types Ray checks, nested at most
    :data:`MAX_NESTING` levels; else ``UsageError``."""
    origin = parameter("runtime_env")
    if not isinstance(value, Mapping):
        raise UsageError(f"{origin}: expected a JSON object of runtime_env fields (pip, "
                         f"env_vars, working_dir, ...), got {type(value).__name__}")
    if _too_deep(value):
        raise UsageError(f"{origin}: nested more than {MAX_NESTING} levels deep (or holds "
                         "itself); a runtime_env needs a few")
    try:
        from ray.runtime_env import RuntimeEnv
    except ImportError:  # nothing runs without Ray: connecting says how to install it
        return dict(value)

    known = sorted(name for name in RuntimeEnv.known_fields if not name.startswith("_"))
    unknown = [str(key) for key in value if key not in RuntimeEnv.known_fields]
    if unknown:
        raise UsageError(f"{origin}: unknown field {', '.join(map(repr, unknown))}; Ray's "
                         f"runtime_env fields are {', '.join(known)}")
    config = value.get("config")
    if isinstance(config, Mapping):  # Ray would log a warning and ignore an unknown entry
        from ray.runtime_env import RuntimeEnvConfig

        unknown = [str(key) for key in config if key not in RuntimeEnvConfig.known_fields]
        if unknown:
            entries = ", ".join(sorted(RuntimeEnvConfig.known_fields))
            raise UsageError(f"{origin}: unknown entry {', '.join(map(repr, unknown))} of its "
                             f"config; Ray's are {entries}")
    ray_logger = logging.getLogger("ray")
    level = ray_logger.level
    ray_logger.setLevel(logging.ERROR)  # its checks log warnings of what they ignore
    try:
        RuntimeEnv(**value)
    except (TypeError, ValueError) as exc:
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"{origin}: {text[:240]}") from None
    finally:
        ray_logger.setLevel(level)
    return dict(value)


def actor_runtime_env(given: Mapping[str, Any] | None, ship: bool) -> dict[str, Any] | None:
    """The host actors' ``runtime_env``: ``given`` (the user's) with, when ``ship``, this
    process's ``tpuemb_cfg`` first in ``py_modules`` and :data:`EXCLUDES` first in
    ``excludes``; None when that leaves nothing to set."""
    env = dict(given or {})
    if ship:
        env["py_modules"] = [package_dir(), *env.get("py_modules", ())]
        env["excludes"] = [*EXCLUDES, *env.get("excludes", ())]
    return env or None
