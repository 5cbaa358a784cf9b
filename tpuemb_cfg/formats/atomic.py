"""Outputs that never replace an input and are never left half-written.

Every command that writes files follows the same two steps, and this module holds both:

1. **Before any work**, :func:`check_outputs` compares the planned outputs with the inputs and
   with the file system, so that a typo costs nothing and destroys nothing::

       check_outputs([("--out", out), ("--plot", plot)],
                     [("CONFIG", config), ("--batches", batches)],
                     suffixes={plot: (".png", ".svg", ".pdf")})

   It raises :class:`~tpuemb_cfg.base.errors.UsageError` (one line naming both paths) when an output
   is the same file as an input - after resolving symbolic links, and hard links by device and
   inode - or as another output, or has an extension outside ``suffixes``; and
   :class:`~tpuemb_cfg.base.errors.OutputError` when the output's folder does not exist (with
   ``make_dirs=True``: when no existing ancestor is a writable folder), is not a folder or is not
   writable, or when the output is a folder or a read-only file. ``-`` (stdin/stdout) is skipped.
   Items are paths or ``(label, path)`` pairs; the label (an option name) appears in messages.

2. **At the end**, the outputs are written atomically:

   - :func:`write_bytes(path, data) <write_bytes>` for one file, :func:`atomic_output(path)
     <atomic_output>` to stream one file (``with atomic_output(p) as handle: handle.write(...)``);
   - :class:`OutputSet` for several files that must appear together or not at all::

         with OutputSet(make_dirs=True) as outputs:      # make_dirs: --out-dir may not exist
             outputs.write_bytes(out_dir / "summary.json", text.encode())
             with outputs.open(out_dir / "tables.npz") as handle:   # streamed
                 tpuemb_cfg.formats.npzio.write_npz(handle, arrays)
             with outputs.open(plot_path) as handle:
                 figure.savefig(handle, format="svg")            # format from the extension
         # all files are renamed into place here; an exception inside the block removes them
         # all, and the folders the set created

   Each file is written to a temporary file created with :func:`tempfile.mkstemp` in the target's
   own folder (random name, ``O_CREAT | O_EXCL | O_NOFOLLOW``: a planted symlink is never
   followed), flushed, ``fsync``-ed, given the mode of the file it replaces (or ``0o666 & ~umask``)
   and renamed over the target with :func:`os.replace`. A symbolic link is written through: the
   file it points to is replaced and the link stays. An existing output that is not a regular file
   (``/dev/null``, a FIFO) is written directly, and ``/dev/stdout``, ``/dev/stderr`` and
   ``/dev/fd/N`` through the process's own descriptor (so ``>>`` appends). Every ``OSError``
   becomes one :class:`~tpuemb_cfg.base.errors.OutputError` line naming the output. SIGINT, SIGTERM
   and SIGHUP are blocked while an :class:`OutputSet` renames its files, so a signal cannot split
   the set.

:func:`remove_temporaries` deletes the temporary files still being written, and the temporary
folders of :func:`make_temporary_folder` (a checkpoint folder being built, renamed into place by
its writer, ``formats.orbax_write``); the CLI calls it when it must exit at once on a second
Ctrl-C.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from tpuemb_cfg.base import interrupt as _interrupt
from tpuemb_cfg.base.errors import OutputError, UsageError

PathLike = str | os.PathLike[str]
#: A path, or ``(label, path)`` where the label (e.g. ``--out``) is shown in messages.
PathSpec = PathLike | tuple[str, PathLike]

_OWN_DESCRIPTORS = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/self/fd/")
_LIVE: set[str] = set()  # temporary files being written, removed on an abrupt exit
_LIVE_FOLDERS: set[str] = set()  # temporary folders being filled, removed on an abrupt exit
_LIVE_LOCK = threading.Lock()


# --------------------------------------------------------------------------------------------
# Checking planned outputs


def _split(item: PathSpec) -> tuple[str, str]:
    """(how to name it in a message, path)."""
    if isinstance(item, tuple):
        label, path = item
        name = os.fspath(path)
        return f"{label} {name}", name
    name = os.fspath(item)
    return name, name


def resolve_target(path: PathLike) -> Path:
    """The file a write to ``path`` lands in: the end of its chain of symbolic links."""
    return Path(os.path.realpath(os.fspath(path)))


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _how(output: str, other: str) -> str:
    if os.path.abspath(output) == os.path.abspath(other):
        return ""
    if os.path.realpath(output) == os.path.realpath(other):
        return " (through a symbolic link)"
    return " (a hard link to it)"


def _shown(folder: Path) -> str:
    """A folder as the user would type it: relative to the current folder when inside it."""
    try:
        relative = os.path.relpath(folder)
    except ValueError:  # another drive (Windows)
        return str(folder)
    return str(folder) if relative.startswith("..") else relative


def _check_folder(option: str, path: str, make_dirs: bool) -> None:
    """Raise OutputError unless ``path`` can be created or replaced (``option``: the option
    that names it, ``""`` for none)."""
    what = f"{option} path" if option else "output path"
    try:
        info = os.stat(path)  # through symbolic links
    except (FileNotFoundError, NotADirectoryError):
        info = None
    except OSError as exc:
        raise OutputError(f"cannot write here: {exc.strerror}; choose another {what}",
                          path=path) from None
    if info is not None:
        if stat.S_ISDIR(info.st_mode):
            raise OutputError(f"is a folder; give the {what} of a file to write", path=path)
        if not os.access(path, os.W_OK):
            if _on_read_only_file_system(path):
                raise OutputError(
                    f"is on a read-only file system (mounted read-only); choose another {what}",
                    path=path)
            raise OutputError(
                f"is read-only; make it writable (chmod u+w) or choose another {what}",
                path=path)
        if not stat.S_ISREG(info.st_mode) or _is_special(path):
            return  # a device, a pipe, /dev/stdout: written directly
    folder = resolve_target(path).parent
    if not folder.is_dir():
        existing = folder
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise OutputError(
                f"cannot write here: {_shown(existing)} is a file, not a folder; choose another "
                f"{what}",
                path=path)
        if not make_dirs:
            raise OutputError(
                f"cannot write here: folder {_shown(folder)} does not exist; create it first "
                f"(mkdir -p {_shown(folder)}) or choose another {what}",
                path=path)
        folder = existing
    if not os.access(folder, os.W_OK | os.X_OK):
        if _on_read_only_file_system(folder):
            raise OutputError(
                f"cannot write here: folder {_shown(folder)} is on a read-only file system "
                f"(mounted read-only); choose another {what}",
                path=path)
        raise OutputError(
            f"cannot write here: folder {_shown(folder)} is not writable (permission denied); "
            f"choose another {what}",
            path=path)


def _on_read_only_file_system(path: PathLike) -> bool:
    """Whether ``path`` lies on a file system mounted read-only (``EROFS`` for any write), which
    ``os.access`` reports as a plain "not writable"."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        return False


def check_outputs(
    outputs: Iterable[PathSpec],
    inputs: Iterable[PathSpec] = (),
    *,
    suffixes: Mapping[str, Iterable[str]] | Iterable[str] | None = None,
    make_dirs: bool = False,
) -> None:
    """Refuse, before any work, outputs that would destroy an input or cannot be written.

    ``suffixes``: extensions every output must end with (case-insensitive), or a mapping from an
    output's path (as given) to its allowed extensions. ``make_dirs``: missing folders will be
    created (the nearest existing ancestor must then be writable). See the module docstring for
    the errors.
    """
    planned = [(*_split(item), item[0] if isinstance(item, tuple) else "") for item in outputs]
    planned = [entry for entry in planned if entry[1] != "-"]
    sources = [_split(item) for item in inputs]
    sources = [(label, path) for label, path in sources if path != "-"]
    allowed: dict[str, tuple[str, ...]] = {}
    if isinstance(suffixes, Mapping):
        for item, extensions in suffixes.items():
            allowed[os.fspath(item)] = tuple(e.lower() for e in extensions)
    elif suffixes is not None:
        every = tuple(e.lower() for e in suffixes)
        allowed = {path: every for _, path, _ in planned}

    input_ids = [(label, path, _identity(path)) for label, path in sources]
    seen: list[tuple[str, str, str, tuple[int, int] | None]] = []
    for label, path, option in planned:
        extensions = allowed.get(path)
        if extensions and not path.lower().endswith(extensions):
            found = os.path.splitext(path)[1] or "no extension"
            raise UsageError(
                f"{label}: cannot write {found!s} files; use one of the extensions "
                f"{', '.join(extensions)}"
            )
        identity = _identity(path)
        if identity is not None and _is_special(path):
            identity = None  # writing to a device or a pipe destroys nothing
        real = os.path.realpath(path)
        for in_label, in_path, in_identity in input_ids:
            if identity is not None and identity == in_identity:
                raise UsageError(
                    f"refusing to write {label}: it is the same file as the input "
                    f"{in_label}{_how(path, in_path)}; writing it would destroy the input - "
                    "choose another output path"
                )
        for other_label, other_path, other_real, other_identity in seen:
            if real == other_real or (identity is not None and identity == other_identity):
                raise UsageError(
                    f"{other_label} and {label} are the same file{_how(path, other_path)}; "
                    "give each output its own path"
                )
        seen.append((label, path, real, identity))
        _check_folder(option.strip(), path, make_dirs)


def refuse_hard_linked(path: PathLike) -> None:
    """Refuse to rewrite a file that has other names (hard links): ``OutputError``.

    An atomic write replaces the file with a new one (a new inode) under this name only: the
    other names would silently keep the old content. Writing into the file itself instead
    would keep them together, but could leave it half-written (a full disk, a crash), which no
    tpuemb output may be. So ``tpuemb fmt`` and ``tpuemb validate --fix``, the commands that
    rewrite their input, leave such a file as it is and say so; the user decides.
    """
    try:
        links = os.stat(path).st_nlink
    except OSError:
        return  # the write itself reports what is wrong
    if links > 1:
        name = os.fspath(path)
        quoted = shlex.quote(name)
        raise OutputError(
            f"not rewritten: the file has {links} hard links (other names for the same file), "
            "and rewriting it would give this name a new file while the others keep the old "
            f"content; to rewrite only this name, break the link first (cp {quoted} "
            f"{shlex.quote(name + '.tmp')} && mv {shlex.quote(name + '.tmp')} {quoted}) and run "
            "again",
            path=name)


# --------------------------------------------------------------------------------------------
# Writing


def _error(path: PathLike, exc: OSError) -> OutputError:
    reason = exc.strerror or str(exc)
    return OutputError(f"cannot write: {reason}", path=os.fspath(path))


def _mode_for(target: Path) -> int:
    try:
        return target.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _is_special(path: PathLike) -> bool:
    """An existing output that is not a regular file (``/dev/null``, a FIFO, a terminal), or one
    of the process's own descriptors (``/dev/stdout``: replacing the file behind it would lose
    what a ``>>`` redirection appended to)."""
    if os.fspath(path).startswith(_OWN_DESCRIPTORS):
        return True
    try:
        mode = os.stat(path).st_mode  # through symbolic links, /dev/stdout's included
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _own_descriptor(path: PathLike) -> int | None:
    """1 for ``/dev/stdout``, 2 for ``/dev/stderr``, N for ``/dev/fd/N`` and ``/proc/self/fd/N``."""
    name = os.fspath(path)
    fixed = {"/dev/stdout": 1, "/dev/stderr": 2}
    if name in fixed:
        return fixed[name]
    for prefix in ("/dev/fd/", "/proc/self/fd/"):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return int(name[len(prefix):])
    return None


@contextmanager
def _direct(path: PathLike) -> Iterator[BinaryIO]:
    """Write straight into a device or pipe: there is nothing to replace atomically.

    The process's own descriptors are written through a duplicate, at their current position
    (reopening ``/dev/stdout`` would truncate the file a ``>>`` redirection appends to).
    """
    try:
        number = _own_descriptor(path)
        if number is not None:
            if number == 1:
                import sys

                sys.stdout.flush()
            handle = os.fdopen(os.dup(number), "wb")
        else:
            handle = open(path, "wb")
        with handle:
            yield handle
    except OSError as exc:
        raise _error(path, exc) from None


def _forget(tmp: str) -> None:
    with _LIVE_LOCK:
        _LIVE.discard(tmp)


def _unlink(tmp: str) -> None:
    _forget(tmp)
    try:
        os.unlink(tmp)
    except OSError:
        pass


def remove_temporaries() -> None:
    """Delete every temporary file and folder still being written (before an abrupt exit)."""
    with _LIVE_LOCK:
        pending = list(_LIVE)
        _LIVE.clear()
        folders = list(_LIVE_FOLDERS)
        _LIVE_FOLDERS.clear()
    for tmp in pending:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def make_temporary_folder(parent: PathLike, name: str) -> Path:
    """A new private folder with an unpredictable name (``.NAME.<random>.tmp``) in ``parent``,
    removed by :func:`remove_temporaries` until :func:`release_temporary_folder`.

    ``OSError`` becomes an ``OutputError`` naming ``parent``."""
    try:
        with _interrupt.held():  # the folder exists only once it is registered for removal
            folder = tempfile.mkdtemp(prefix=f".{name[:40]}.", suffix=".tmp", dir=parent)
            with _LIVE_LOCK:
                _LIVE_FOLDERS.add(folder)
    except OSError as exc:
        raise _error(parent, exc) from None
    return Path(folder)


def folder_mode() -> int:
    """The mode a new folder gets by default: ``0o777 & ~umask`` (for a temporary folder, made
    private, when it is published)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o777 & ~umask


def make_missing_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents: the folders made, parents first (for
    :func:`remove_made_folders`). ``OSError`` is the caller's to report."""
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def remove_made_folders(made: list[Path]) -> None:
    """Remove the folders a writer created for its outputs (``made``: parents first), deepest
    first, each only if it is empty (another process may have put something there)."""
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            pass


def release_temporary_folder(folder: PathLike, *, remove: bool) -> None:
    """Stop tracking a folder of :func:`make_temporary_folder`; ``remove``: delete it first
    (it was abandoned), else it was renamed into place."""
    name = os.fspath(folder)
    if remove:
        shutil.rmtree(name, ignore_errors=True)
    with _LIVE_LOCK:
        _LIVE_FOLDERS.discard(name)


class Finishing:
    """A writer used as a context manager: ``finish()`` when the block ends normally,
    ``abort(error)`` when it raises (``KeyboardInterrupt`` included). Subclasses define both."""

    def finish(self) -> Any:
        raise NotImplementedError

    def abort(self, error: BaseException | None = None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        if value is None:
            self.finish()
        else:
            self.abort(value if isinstance(value, BaseException) else None)


@dataclass
class _Staged:
    path: str  # as given, for messages
    target: Path
    tmp: str


def _create_temporary(path: PathLike, made: list[Path] | None = None) -> tuple[Path, str, int]:
    """(target, temporary path, open descriptor) for a write to ``path``."""
    target = resolve_target(path)
    folder = target.parent
    try:
        if made is not None and not folder.is_dir():
            made.extend(make_missing_folders(folder))
        with _interrupt.held():  # the file exists only once it is registered for removal
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:40]}.", suffix=".tmp",
                                       dir=folder)
            with _LIVE_LOCK:
                _LIVE.add(tmp)
    except OSError as exc:
        raise _error(path, exc) from None
    return target, tmp, fd


def _finish(handle: BinaryIO, tmp: str, target: Path) -> None:
    handle.flush()
    os.fsync(handle.fileno())
    os.chmod(tmp, _mode_for(target))


def sync_folder(folder: Path) -> None:
    """Flush a folder's entries (a rename in it) to disk, where the platform allows."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_output(path: PathLike) -> Iterator[BinaryIO]:
    """A binary handle whose content replaces ``path`` only when the block ends without error.

    A symbolic link is written through (its target is replaced, the link kept); an existing
    non-regular file (``/dev/null``) is written directly. ``OSError`` becomes ``OutputError``.
    An :class:`OutputSet` of one file.
    """
    with OutputSet() as outputs, outputs.open(path) as handle:
        yield handle


def write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically; ``-`` writes to standard output."""
    if os.fspath(path) == "-":
        import sys

        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    with atomic_output(path) as handle:
        handle.write(data)


class OutputSet:
    """Several outputs written together at the end of a run, or not at all.

    Use as a context manager: files staged inside the block (:meth:`open`, :meth:`write_bytes`)
    are renamed into place when it ends without an exception (:meth:`commit`) and deleted when it
    raises (:meth:`discard`), together with any folder created for them.
    """

    def __init__(self, *, make_dirs: bool = False) -> None:
        self._staged: list[_Staged] = []
        self._made: list[Path] = []
        self._make_dirs = make_dirs

    @contextmanager
    def open(self, path: PathLike) -> Iterator[BinaryIO]:
        """A handle for the content of ``path``; staged when the block ends without error.

        A device or pipe (``/dev/null``) is written at once instead: it cannot be staged.
        """
        if _is_special(path):
            with _direct(path) as direct:
                yield direct
            return
        target, tmp, fd = _create_temporary(path, self._made if self._make_dirs else None)
        try:
            with os.fdopen(fd, "wb") as handle:
                yield handle
                _finish(handle, tmp, target)
        except OSError as exc:
            _unlink(tmp)
            raise _error(path, exc) from None
        except BaseException:
            _unlink(tmp)
            raise
        self._staged.append(_Staged(os.fspath(path), target, tmp))

    def write_bytes(self, path: PathLike, data: bytes) -> None:
        """Stage ``data`` as the content of ``path``."""
        with self.open(path) as handle:
            handle.write(data)

    def commit(self) -> None:
        """Rename every staged file into place (SIGINT, SIGTERM, SIGHUP held back meanwhile)."""
        staged, self._staged = self._staged, []
        with _interrupt.held():
            for i, item in enumerate(staged):
                try:
                    os.replace(item.tmp, item.target)
                except OSError as exc:
                    for rest in staged[i:]:
                        _unlink(rest.tmp)
                    raise _error(item.path, exc) from None
                _forget(item.tmp)
        for folder in {item.target.parent for item in staged}:
            sync_folder(folder)
        self._made = []

    def discard(self) -> None:
        """Delete every staged file and the folders created for them."""
        staged, self._staged = self._staged, []
        for item in staged:
            _unlink(item.tmp)
        remove_made_folders(self._made)
        self._made = []

    def __enter__(self) -> OutputSet:
        return self

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()
