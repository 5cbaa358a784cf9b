"""What `tpuemb simulate` shows and writes for a synthetic run, one worker or several.

The runs (``tpuemb_cfg.sim``) compute and return; this module is the one place that draws their
progress bar and writes their files: ``OUT_DIR/tables.npz`` (final tables and slots),
``OUT_DIR/summary.json`` (the summary, with ``config`` and ``out_dir`` added) and the ``--plot``
image (PNG, SVG or PDF, from its extension). :func:`check_run_outputs` checks them all before
the run starts; :func:`write_run` writes them together at its end, as one
:class:`~tpuemb_cfg.atomic.OutputSet`: all of them or, when anything fails (a full disk, the
plot, Ctrl-C), none, and never through a predictable temporary name.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from tpuemb_cfg.errors import UsageError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["PLOT_FORMATS", "check_run_outputs", "progress", "require_matplotlib", "write_run"]

#: ``--plot`` extensions and the matplotlib format each one writes.
PLOT_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
# Metadata left out so that equal runs write equal bytes.
_PLOT_METADATA: dict[str, dict[str, None]] = {
    "png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None},
}


@contextlib.contextmanager
def progress(length: int, quiet: bool) -> Iterator[Callable[[int], None] | None]:
    """A progress callback advancing a bar of ``length`` on stderr, or None when ``quiet`` or
    stderr is not a terminal (the runs take None as "no progress")."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    with click.progressbar(length=length, label="simulating", file=sys.stderr,
                           show_pos=True) as bar:
        yield lambda _done: bar.update(1)


def check_run_outputs(out_dir: Path, plot: str | None, inputs: list[tuple[str, str]]) -> None:
    """Refuse, before the run, outputs that would replace an input (``(option, path)`` pairs)
    or cannot be written: ``OUT_DIR/tables.npz`` and ``OUT_DIR/summary.json`` (OUT_DIR is
    created when missing), and the ``--plot`` file, whose folder must exist and whose extension
    must be one of :data:`PLOT_FORMATS`."""
    from tpuemb_cfg.atomic import check_outputs

    if plot == "-":  # check_outputs leaves "-" (standard output) alone
        raise UsageError("--plot -: the plot is an image file; give its name (FILE.png, "
                         "FILE.svg or FILE.pdf)")
    outputs: list[tuple[str, str | Path]] = [("--out-dir", out_dir / "tables.npz"),
                                             ("--out-dir", out_dir / "summary.json")]
    if plot is not None:
        outputs.append(("--plot", plot))
    check_outputs(outputs, inputs, make_dirs=True)  # first: an input named as output says so
    if plot is not None:  # its folder must exist (only OUT_DIR is created), its format known
        check_outputs([("--plot", plot)], suffixes=tuple(PLOT_FORMATS))


def write_run(out_dir: Path, summary: dict[str, Any], state: Mapping[str, np.ndarray],
              config_label: str, plot: str | None = None) -> Path:
    """Add ``config`` and ``out_dir`` to ``summary``; write ``tables.npz`` (``state``) and
    ``summary.json`` into ``out_dir`` (created when missing) and the plot to ``plot``, all or
    none of them; return the path of ``tables.npz``."""
    from tpuemb_cfg.atomic import OutputSet
    from tpuemb_cfg.npzio import write_npz

    summary["config"] = config_label
    summary["out_dir"] = str(out_dir)
    tables_path = out_dir / "tables.npz"
    with OutputSet(make_dirs=True) as outputs:
        with outputs.open(tables_path) as handle:
            write_npz(handle, state)
        outputs.write_bytes(out_dir / "summary.json",
                            (json.dumps(summary, indent=2) + "\n").encode())
        if plot is not None:
            with outputs.open(plot) as handle:
                _draw(summary, handle, PLOT_FORMATS[Path(plot).suffix.lower()])
    return tables_path


def require_matplotlib() -> None:
    """Refuse ``--plot`` before the run starts when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib, which is not installed; install it with "
            "`pip install 'tpuemb[plot]'` (or `pip install matplotlib`), or drop --plot"
        ) from None


def _draw(summary: Mapping[str, Any], handle: IO[bytes], fmt: str) -> None:
    """Loss (top) and each table's update norm (bottom) per step, as ``fmt`` into ``handle``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    top.plot(summary["loss"])
    top.set_ylabel("loss")
    for name, table in summary["tables"].items():
        bottom.plot(table["update_norm"], label=name)
    bottom.set_ylabel("update norm")
    bottom.set_xlabel("step")
    bottom.legend()
    figure.tight_layout()
    try:
        with matplotlib.rc_context({"svg.hashsalt": "tpuemb"}):  # stable SVG element ids
            figure.savefig(handle, format=fmt, metadata=_PLOT_METADATA[fmt])
    finally:
        plt.close(figure)
