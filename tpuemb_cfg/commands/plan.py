"""``tpuemb plan``: will it fit, will it balance, which limits - from a sample of real ids.

A thin command over ``tpuemb_cfg.session.open_plan`` and ``planner.planning``: it parses the
options, checks every output (``-o``, ``--plot``) and opens the configuration and the sample
before any work, draws a progress bar over the sample (stderr a terminal; otherwise a line at
most every :data:`LINE_EVERY` seconds), prints the report (text, JSON or SARIF) and writes the
outputs atomically. Exit status: 0 the gate passed, 1 it failed (``--fail-on``), 2 bad input or
usage, 130 Ctrl-C (the CLI's own handling).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import click

from tpuemb_cfg.base.errors import InputError, UsageError, printable, printable_json
from tpuemb_cfg.base.platform import chip_names, sparsecore_chips
from tpuemb_cfg.base.units import parse_size
from tpuemb_cfg.commands._outputs import _PLOT_METADATA, check_plot, require_matplotlib
from tpuemb_cfg.commands.flags import LINES, keras_backend_option
from tpuemb_cfg.formats.atomic import OutputSet, check_outputs
from tpuemb_cfg.planner.checks import number_problem
from tpuemb_cfg.planner.inputs import sample_files
from tpuemb_cfg.planner.planning import PlanOptions, format_text, parse_compare, parse_gate
from tpuemb_cfg.rules import RULES, all_rules
from tpuemb_cfg.session import open_plan, place_plan_findings
from tpuemb_cfg.validation.report import FileReport, format_sarif

#: Without a terminal, a progress line at most this often (seconds).
LINE_EVERY = 10.0
PLAN_FORMATS = ("text", "json", "sarif")


def _type_units(unit: str) -> str:
    """``"v5p and TPU7x count TensorCores"``: the chip kinds whose ``KIND-N`` counts ``unit``."""
    kinds = [c for c in sparsecore_chips() if c.type_unit == unit]
    return f"{chip_names(kinds, last=' and ')} count{'s' if len(kinds) == 1 else ''} {unit}"


def _size(value: str | None, option: str) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value)
    except (InputError, ValueError) as exc:
        raise UsageError(f"{option} {value!r}: {getattr(exc, 'message', exc)}") from None


def _in_range(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """``--quantile`` and ``--headroom``: finite and in their range (``planner.checks``)."""
    problem = number_problem(str(param.name), value)
    if problem is not None:
        raise click.BadParameter(problem)
    return value


@contextlib.contextmanager
def _progress(total: int, unit: str, quiet: bool) -> Iterator[Callable[[int], None] | None]:
    """A bar over ``total`` (stderr a terminal), else a line at most every LINE_EVERY seconds."""
    if quiet or total <= 0:
        yield None
        return
    if sys.stderr.isatty():
        with click.progressbar(length=total, label=f"reading the sample ({unit})",
                               file=sys.stderr, show_pos=True) as bar:
            yield bar.update
        return
    done = [0]
    last = [time.monotonic()]

    def line(n: int) -> None:
        done[0] += n
        now = time.monotonic()
        if now - last[0] >= LINE_EVERY:
            last[0] = now
            click.echo(f"plan: {100 * done[0] / total:.0f}% of the sample read "
                       f"({done[0]:,} of {total:,} {unit})", err=True)

    yield line


def render(result: Any, fmt: str, path: str) -> str:
    """The plan as ``fmt``: the text report, the JSON document, or SARIF findings."""
    if fmt == "json":
        return printable_json(result.to_json(), indent=2) + "\n"
    if fmt == "sarif":  # the plan's rules and validate's it reports (TBL010), all registered
        ids = {r.id for r in all_rules("plan")}
        ids |= {d.rule for d in result.findings if d.rule in RULES}
        return format_sarif([FileReport(path, result.findings)], rules=ids)
    text: str = format_text(result)
    return printable(text, keep=LINES)  # names are the configuration's, not the terminal's


def _draw(result: Any, handle: IO[bytes], fmt: str) -> None:
    """Per unit (host or SparseCore) of each layout: its ids over the sample (bars) and its p99
    ids per step (dots), one panel per layout."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    reports = list(result.load.values())
    figure, axes = plt.subplots(len(reports), 1, figsize=(9, 3.2 * len(reports)), squeeze=False)
    for axis, report in zip(axes[:, 0], reports, strict=True):
        units = [u.index for u in report.units]
        axis.bar(units, [u.total_ids for u in report.units], color="#4c72b0", label="ids (sample)")
        axis.set_ylabel("ids over the sample")
        axis.set_title(f"{report.level} load, {report.strategy}: max/mean "
                       f"{report.imbalance.max_over_mean:.2f}")
        twin = axis.twinx()
        twin.plot(units, [u.ids.p99 for u in report.units], "o", color="#dd8452", markersize=3,
                  label="p99 ids per step")
        twin.set_ylabel("p99 ids per step")
        twin.set_ylim(bottom=0)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_xlabel(report.level)
    figure.tight_layout()
    try:
        with matplotlib.rc_context({"svg.hashsalt": "tpuemb"}):
            figure.savefig(handle, format=fmt, metadata=_PLOT_METADATA[fmt])
    finally:
        plt.close(figure)


def _check_outputs(config: str, ids: tuple[str, ...], ids_format: str | None,
                   output: str | None, plot: str | None) -> None:
    """Before any work: no output is an input (the configuration, every --ids path and every
    sample file inside an --ids folder) or another output; the plot's name and format."""
    inputs = [("CONFIG", config), *(("--ids", p) for p in ids)]
    inputs += [("--ids", name) for p in ids if Path(p).is_dir()
               for name in sample_files(p, ids_format)]
    outputs = [("-o", output)] if output else []
    if plot is not None:
        if plot == "-":
            check_plot(plot)
        outputs.append(("--plot", plot))
    check_outputs(outputs, inputs)
    if plot is not None:
        check_plot(plot)
        require_matplotlib()


@click.command(name="plan")
@keras_backend_option
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--ids", "ids", multiple=True, required=True, metavar="FILE|FOLDER",
              help="The sample of ids: a replay B.npz, Parquet files (one column per feature; "
                   "pip install 'tpuemb[plan]') or TFRecord files of tf.train.Example. "
                   "Repeatable; read in the order given; a folder: its sample files by name.")
@click.option("--ids-format", type=click.Choice(["npz", "parquet", "tfrecord"]),
              help="The sample's format (default: from the extension).")
@click.option("--topology", metavar="KIND-N",
              help="The slice as Cloud TPU names it, e.g. v5p-64 ("
                   f"{_type_units('TensorCores')}: 32 chips on 8 hosts; {_type_units('chips')}), "
                   "or KIND:CHIPS such as v5p:32. Legacy configurations take its host count.")
@click.option("--hosts", type=click.IntRange(min=1), help="Hosts (overrides num_hosts or the "
              "topology's).")
@click.option("--host-index", type=click.IntRange(min=0), metavar="N",
              help="Plan host N of a multi-host SparseCore slice: the sample is that host's "
                   "input (the global batch / hosts), its chips the local devices.")
@click.option("--host-memory", metavar="SIZE", help="Memory of each host, e.g. 64G (legacy "
              "tables; SparseCore initialize_tables_on_host). Unknown: no OOM finding.")
@click.option("--hbm", metavar="SIZE", help="HBM of each chip (default: the chip "
              "kind's; a TPU7x device has half).")
@click.option("--quantile", type=float, default=1.0, callback=_in_range,
              show_default=True, help="Quantile of the per-step maxima the suggested limits "
              "cover, in (0, 1] (1: the sample's maximum), before the headroom.")
@click.option("--headroom", type=float, default=1.2, show_default=True, callback=_in_range,
              help="Factor on the quantile for the suggested limits, in [1, 10].")
@click.option("--compare", multiple=True, metavar="AXIS",
              help="What-if columns: hosts=N[,M..], topology=KIND-N[,..], stacking. "
                   "Repeatable. Legacy: MOD and DIV_DEFAULT are always compared.")
@click.option("--fail-on", multiple=True, metavar="COND",
              help="Exit 1 when: oom, drops, imbalance>X (max/mean load). Repeatable or "
                   "comma-separated.")
@click.option("--format", "fmt", type=click.Choice(PLAN_FORMATS), default="text",
              show_default=True, help="Report format.")
@click.option("-o", "--output", metavar="FILE", help="Write the report here (atomically) "
              "instead of standard output.")
@click.option("--plot", metavar="FILE", help="Draw the load per host / SparseCore (.png, .svg, "
              ".pdf; needs matplotlib: pip install 'tpuemb[plot]').")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
def plan(config: str, ids: tuple[str, ...], ids_format: str | None,  # noqa: PLR0913
         topology: str | None, hosts: int | None, host_index: int | None,
         host_memory: str | None, hbm: str | None,
         quantile: float, headroom: float, compare: tuple[str, ...], fail_on: tuple[str, ...],
         fmt: str, output: str | None, plot: str | None, quiet: bool) -> None:
    # one parameter per option: click's calling convention
    """Memory, load and limits of CONFIG from a sample of its real ids (docs/plan.md).

    CONFIG: a TPUEmbeddingConfiguration (text, binary, JSON, or a .py/.toml spec) or a
    SparseCore spec (.py). Exit status: 0 the gate passed, 1 it failed (--fail-on), 2 bad
    input or options, 130 interrupted.
    """
    options = PlanOptions(
        topology=topology, hosts=hosts, host_memory_bytes=_size(host_memory, "--host-memory"),
        hbm_bytes=_size(hbm, "--hbm"), quantile=quantile, headroom=headroom,
        compare=parse_compare(compare), gate=parse_gate(fail_on), host_index=host_index)
    _check_outputs(config, ids, ids_format, output, plot)
    planner = open_plan(config, list(ids), options=options, fmt=ids_format)
    sample = planner.sample
    with _progress(planner.passes * sample.progress_total, sample.progress_unit, quiet) as tick:
        sample.on_progress = tick
        result = planner.run()
    result.findings = place_plan_findings(planner, result.findings, config)
    text = render(result, fmt, config)
    _write(text, output, result, plot)
    if result.failed:
        click.get_current_context().exit(1)


def _write(text: str, output: str | None, result: Any, plot: str | None) -> None:
    """The report and the plot: each written whole or not at all."""
    if output is None and plot is None:
        click.echo(text, nl=False)
        return
    with OutputSet() as outputs:
        if output is not None:
            outputs.write_bytes(output, text.encode("utf-8"))
        if plot is not None:
            with outputs.open(plot) as handle:
                _draw(result, handle, Path(plot).suffix.lower().lstrip("."))
    if output is None:
        click.echo(text, nl=False)
