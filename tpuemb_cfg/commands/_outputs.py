"""What `tpuemb simulate` shows and writes for a synthetic run, one worker or several.

The runs (``tpuemb_cfg.sim``) compute and return; this module is the one place that writes their
files (``_progress`` shows how they go): ``OUT_DIR/tables.npz`` (final tables and slots, whole or
the touched rows: ``--tables``), ``OUT_DIR/summary.json`` (the summary, with ``config`` and
``out_dir`` added), the ``--plot`` image (PNG, SVG or PDF, from its extension) and the
``--save-batches`` file (each step's batch streamed in as the run goes, :func:`batches_file`).
:func:`check_run_outputs` checks them all before the run starts; :func:`write_run` writes them
together at its end, as one :class:`~tpuemb_cfg.formats.atomic.OutputSet` (with the batches staged
in the same set): all of them or, when anything fails (a full disk, the plot, Ctrl-C), none, and
never through a predictable temporary name.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import UsageError, printable
from tpuemb_cfg.base.units import format_size
from tpuemb_cfg.formats.atomic import OutputSet, check_outputs

if TYPE_CHECKING:
    import numpy as np

    from tpuemb_cfg.formats.atomic import OutputSet

__all__ = ["PLOT_FORMATS", "batches_file", "check_plot", "check_run_outputs",
           "require_disk_space", "require_matplotlib", "status_line", "write_run"]

#: A command that has run this long (seconds) shows what it is doing (stderr a terminal).
STATUS_DELAY = 2.0

#: ``--plot`` extensions and the matplotlib format each one writes.
PLOT_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
# Metadata left out so that equal runs write equal bytes.
_PLOT_METADATA: dict[str, dict[str, None]] = {
    "png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None},
}


@contextlib.contextmanager
def status_line(delay: float | None = None) -> Iterator[Callable[[str], None]]:
    """A one-line status on stderr for work that may take long (``tpuemb validate`` of a large
    file): shown only when stderr is a terminal, once the block has run ``delay`` seconds
    (:data:`STATUS_DELAY`), refreshed with the elapsed time, and erased at the end. The
    callback sets the text (what is being done, e.g. the file and its number)."""
    wait = STATUS_DELAY if delay is None else delay
    text = [""]
    if not _is_terminal(sys.stderr):
        yield lambda message: None
        return
    import threading
    import time

    stop = threading.Event()
    started = time.monotonic()
    shown = [False]
    stream = sys.stderr

    def refresh() -> None:
        while not stop.wait(0.0 if not shown[0] and wait <= 0 else 0.25):
            elapsed = time.monotonic() - started
            if elapsed < wait:
                continue
            try:
                stream.write(f"\r{printable(text[0])} ({elapsed:.0f} s)\x1b[K")
                stream.flush()
            except (OSError, ValueError):
                return
            shown[0] = True

    worker = threading.Thread(target=refresh, name="tpuemb-status", daemon=True)
    worker.start()
    try:
        yield lambda message: text.__setitem__(0, message)
    finally:
        stop.set()
        worker.join()
        if shown[0]:
            try:
                stream.write("\r\x1b[K")
                stream.flush()
            except (OSError, ValueError):
                pass


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def check_run_outputs(out_dir: Path, plot: str | None, inputs: list[tuple[str, str]], *,
                      tables: str = "all", save_batches: str | None = None) -> None:
    """Refuse, before the run, outputs that would replace an input (``(option, path)`` pairs)
    or cannot be written: ``OUT_DIR/tables.npz`` (unless ``tables`` is ``none``) and
    ``OUT_DIR/summary.json`` (OUT_DIR is created when missing), the ``--plot`` file, whose
    folder must exist and whose extension must be one of :data:`PLOT_FORMATS`, and the
    ``--save-batches`` file (an ``.npz`` whose folder exists)."""
    if plot == "-":  # check_outputs leaves "-" (standard output) alone
        check_plot(plot)
    if save_batches == "-":
        raise UsageError("--save-batches -: the batches are an .npz archive; give its file name "
                         "(B.npz)")
    outputs: list[tuple[str, str | Path]] = [("--out-dir", out_dir / "summary.json")]
    if tables != "none":
        outputs.insert(0, ("--out-dir", out_dir / "tables.npz"))
    if plot is not None:
        outputs.append(("--plot", plot))
    if save_batches is not None:
        outputs.append(("--save-batches", save_batches))
    check_outputs(outputs, inputs, make_dirs=True)  # first: an input named as output says so
    if save_batches is not None:  # its folder must exist (only OUT_DIR is created)
        check_outputs([("--save-batches", save_batches)], suffixes=(".npz",))
    if plot is not None:  # its folder must exist (only OUT_DIR is created), its format known
        check_plot(plot)


def check_plot(plot: str) -> None:
    """Refuse a ``--plot`` path that cannot take the image, before any work: ``-``, a folder
    that does not exist, an extension outside :data:`PLOT_FORMATS`, or a name that is only an
    extension (``.png``: a hidden file without a name, whose suffix Python reads as empty)."""
    if plot == "-":  # check_outputs leaves "-" (standard output) alone
        raise UsageError("--plot -: the plot is an image file; give its name (FILE.png, "
                         "FILE.svg or FILE.pdf)")
    check_outputs([("--plot", plot)], suffixes=tuple(PLOT_FORMATS))
    if Path(plot).suffix.lower() not in PLOT_FORMATS:
        raise UsageError(
            f"--plot {plot}: {Path(plot).name!r} is a file name without an extension (a "
            "leading dot makes a hidden file); give a name and the extension, e.g. "
            "run.png, run.svg or run.pdf")


def write_run(out_dir: Path, summary: dict[str, Any], state: Mapping[str, np.ndarray] | None,
              config_label: str, plot: str | None = None, *,
              shown_dir: Path | None = None, outputs: OutputSet | None = None) -> Path:
    """Add ``config`` and ``out_dir`` (``shown_dir``, the folder as the user typed it, when
    given) to ``summary``; write ``tables.npz`` (``state``; None: no tables file) and
    ``summary.json`` into ``out_dir`` (created when missing) and the plot to ``plot``, all or
    none of them (staged in ``outputs`` when given: with the files staged there before, such
    as the ``--save-batches`` file, committed by its owner); return the path of
    ``tables.npz``."""
    from tpuemb_cfg.formats.npzio import write_npz

    summary["config"] = config_label
    summary["out_dir"] = str(shown_dir if shown_dir is not None else out_dir)
    tables_path = out_dir / "tables.npz"
    with contextlib.nullcontext(outputs) if outputs is not None else OutputSet(
            make_dirs=True) as staged:
        if state is not None:
            with staged.open(tables_path) as handle:
                write_npz(handle, state)
        staged.write_bytes(out_dir / "summary.json",
                           (json.dumps(summary, indent=2) + "\n").encode())
        if plot is not None:
            with staged.open(plot) as handle:
                _draw(summary, handle, PLOT_FORMATS[Path(plot).suffix.lower()])
    return tables_path


@contextlib.contextmanager
def batches_file(outputs: OutputSet, path: str | None
                 ) -> Iterator[Callable[[int, Mapping[str, np.ndarray]], None] | None]:
    """``--save-batches``: an ``on_batch`` callback streaming each step's replay-contract arrays
    into ``path``, staged in ``outputs`` (renamed into place with the run's other files, or
    deleted with them when the run fails); None without a path."""
    if path is None:
        yield None
        return
    from tpuemb_cfg.formats.npzio import NpzWriter

    with outputs.open(path) as handle, NpzWriter(handle) as writer:
        def on_batch(step: int, arrays: Mapping[str, np.ndarray]) -> None:
            for key, value in arrays.items():
                writer.add(key, value)

        yield on_batch


def require_disk_space(option: str, path: str, needed: int) -> None:
    """Refuse, before the run, a file of about ``needed`` bytes that the disk holding ``path``
    has no room for (``shutil.disk_usage`` of its folder)."""
    import os
    import shutil

    folder = os.path.dirname(os.path.abspath(path))
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if needed > free:
        raise UsageError(
            f"{option} {path}: the file would take about {format_size(needed)}, and its disk has "
            f"{format_size(free)} free; run fewer steps (--steps), or write it to a larger disk")


def require_matplotlib() -> None:
    """Refuse ``--plot`` before the run starts when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib, which is not installed; install it with "
            "`pip install 'tpuemb[plot]'` (or `pip install matplotlib`), or drop --plot"
        ) from None


def rate_series(summary: Mapping[str, Any]) -> list[tuple[str, list[float]]]:
    """What ``--plot`` draws in its learning-rate panel: per dynamic tag of the run's summary
    (``learning_rates``), its label (the tag and the tables reading it) and its rate at every
    step (NaN where a step has none recorded); empty without dynamic rates."""
    series = []
    for rate in summary.get("learning_rates", []):
        values = [math.nan if value is None else float(value) for value in rate["per_step"]]
        if values and not all(math.isnan(value) for value in values):
            users = ", ".join(str(user) for user in rate.get("used_by", ()))
            series.append((f"tag {rate['tag']}" + (f" ({users})" if users else ""), values))
    return series


def _draw(summary: Mapping[str, Any], handle: IO[bytes], fmt: str) -> None:
    """Loss (top) and each table's update norm (middle, or bottom) per step, and each dynamic
    learning-rate tag's rate per step (bottom, when the run has any: :func:`rate_series`), as
    ``fmt`` into ``handle``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = rate_series(summary)
    if not rates:
        figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    else:
        figure, (top, bottom, lowest) = plt.subplots(3, 1, sharex=True, figsize=(8, 8.5))
    # A long run's lists hold the values of its recorded steps (sim.history); else every step.
    steps = summary.get("recorded_steps") or list(range(len(summary["loss"])))
    top.plot(steps, summary["loss"])
    top.set_ylabel("loss")
    for name, table in summary["tables"].items():
        norms = [math.nan if v is None else v for v in table["update_norm"]]  # None: not finite
        bottom.plot(steps, norms, label=name)
    bottom.set_ylabel("update norm")
    if not rates:
        bottom.set_xlabel("step")
    bottom.legend()
    if rates:
        for label, values in rates:
            lowest.plot(steps, values, label=label)
        lowest.set_ylabel("learning rate")
        lowest.set_xlabel("step")
        lowest.legend()
    figure.tight_layout()
    try:
        with matplotlib.rc_context({"svg.hashsalt": "tpuemb"}):  # stable SVG element ids
            figure.savefig(handle, format=fmt, metadata=_PLOT_METADATA[fmt])
    finally:
        plt.close(figure)
