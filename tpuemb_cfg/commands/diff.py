"""``tpuemb diff``: what a configuration change does on the TPU and to the checkpoint.

A thin command over ``tpuemb_cfg.review``: it reads OLD from a file or from git
(``--against REF``, as ``git show REF:PATH``), checks the output path before any work, draws a
progress line while a sample is read, renders the report (text, JSON, SARIF, GitHub
annotations, Markdown) and writes it atomically. Exit status: 0 (differences are reported, not
judged), 1 with ``--breaking`` when OLD's checkpoint does not restore under NEW, or when a
finding reaches ``--fail-on``; 2 bad input or options; 130 Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import click

from tpuemb_cfg.base.errors import InputError, UsageError, printable
from tpuemb_cfg.commands.flags import LINES
from tpuemb_cfg.commands.flags import object_path as object_path_option
from tpuemb_cfg.formats.atomic import OutputSet, check_outputs
from tpuemb_cfg.formats.limits import max_input_bytes
from tpuemb_cfg.model import SEVERITY_RANK
from tpuemb_cfg.review.diffing import DiffOptions, diff
from tpuemb_cfg.review.report import DIFF_FORMATS, render_many
from tpuemb_cfg.review.sides import SideOptions

#: Without a terminal, a progress line at most this often (seconds).
LINE_EVERY = 10.0
#: ``git show`` is given this long to print OLD.
GIT_SECONDS = 60.0
TF_VERSIONS = ("2.20", "2.21")
KERAS_BACKENDS = ("jax", "tensorflow")


def _pair(option: str, value: str | None, allowed: tuple[str, ...] | None = None
          ) -> tuple[str | None, str | None]:
    """``X`` (both sides) or ``X,Y`` (OLD, NEW)."""
    if value is None:
        return None, None
    parts = [p.strip() for p in value.split(",")]
    if len(parts) > 2 or not all(parts):
        raise UsageError(f"{option} {value!r}: expected one value (both sides) or two, OLD,NEW")
    if allowed is not None:
        for part in parts:
            if part not in allowed:
                raise UsageError(f"{option} {value!r}: {part!r} is not one of "
                                 f"{', '.join(allowed)}")
    return (parts[0], parts[-1])


def _git(args: list[str], cwd: str) -> bytes:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True,
                              timeout=GIT_SECONDS, check=False)
    except FileNotFoundError:
        raise UsageError("--against needs git, which was not found on PATH") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"git {' '.join(args)} did not finish within {GIT_SECONDS:.0f} s") \
            from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise InputError(f"git {' '.join(args)}: {said[-1] if said else 'failed'}")
    return done.stdout


@contextlib.contextmanager
def _from_git(ref: str, path: str) -> Iterator[tuple[str | None, str]]:
    """``path`` as it is at ``ref`` (``git show REF:./NAME`` in its folder), in a private
    temporary folder under its own name (a spec keeps its extension), with the label
    ``REF:PATH`` (None for a file ``ref`` does not have); the folder is removed afterwards."""
    if ref.startswith("-"):
        raise UsageError(f"--against {ref!r}: a git revision does not start with '-'")
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if not os.path.isdir(folder):
        raise InputError("its folder does not exist", path=path)
    try:
        _git(["rev-parse", "--git-dir"], folder)
    except InputError as exc:
        raise InputError(f"--against {ref}: the file is not in a git repository ({exc.message})",
                         path=path) from None
    _git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], folder)
    name = os.path.basename(path)
    listed = _git(["ls-tree", "--name-only", "--end-of-options", ref, "--", name], folder)
    if not listed.strip():  # a file the change adds: nothing to compare it with
        yield None, f"{ref}:{path}"
        return
    # the size first: a huge blob is refused before it is read
    size_text = _git(["cat-file", "-s", f"{ref}:./{name}"], folder).decode().strip()
    limit = max_input_bytes()
    if size_text.isdigit() and int(size_text) > limit:
        raise InputError(f"{ref}:{path}: {int(size_text):,} bytes, more than the "
                         f"{limit:,}-byte input limit (TPUEMB_MAX_INPUT raises it)")
    data = _git(["show", f"{ref}:./{name}"], folder)
    private = tempfile.mkdtemp(prefix="tpuemb-diff-")
    try:
        target = os.path.join(private, name)
        with open(target, "xb") as handle:
            handle.write(data)
        yield target, f"{ref}:{path}"
    finally:
        shutil.rmtree(private, ignore_errors=True)


@contextlib.contextmanager
def _sample_line(quiet: bool) -> Iterator[Any]:
    """A hook giving each planner's sample a progress line (stderr, at most every
    LINE_EVERY seconds, the first at once)."""
    if quiet:
        yield None
        return

    def hook(planner: Any, name: str) -> None:
        sample = planner.sample
        total = planner.passes * sample.progress_total
        done = [0]
        last = [0.0]

        def tick(n: int) -> None:
            done[0] += n
            now = time.monotonic()
            if now - last[0] >= LINE_EVERY or done[0] >= total:
                last[0] = now
                click.echo(f"diff: reading the sample for {printable(name)}: "
                           f"{100 * done[0] / max(total, 1):.0f}% ({done[0]:,} of {total:,} "
                           f"{sample.progress_unit})", err=True)

        sample.on_progress = tick

    yield hook


@click.command(name="diff")
@click.argument("files", nargs=-1, required=True, metavar="OLD NEW | NEW... --against REF")
@click.option("--against", metavar="REF", help="Read OLD from git at this revision (HEAD, "
              "main, a commit): each file given is a NEW, compared with itself there.")
@click.option("--ids", "ids", multiple=True, metavar="FILE|FOLDER",
              help="A sample of real ids (tpuemb plan's formats): load, imbalance and drops at "
                   "the limits, OLD vs NEW on the same sample. Repeatable.")
@click.option("--topology", metavar="KIND-N[,KIND-M]", help="The slice both sides run on "
              "(a Cloud TPU accelerator type, KIND-N), or OLD's and NEW's, comma-separated. "
              "Legacy: its host count.")
@click.option("--keras-backend", metavar="B[,B]", help="keras-rs specs' Keras backend: jax or "
              "tensorflow, for both sides or OLD,NEW (tensorflow,jax: a move to JAX).")
@click.option("--tf-version", metavar="V[,V]", help="The TensorFlow release whose stacking "
              "lays out TensorFlow specs: 2.20 or 2.21 (default), for both sides or OLD,NEW "
              "(2.20,2.21: an upgrade).")
@click.option("--breaking", is_flag=True, help="Report only what breaks the restore of OLD's "
              "checkpoint under NEW (CKPT findings) and exit 1 when something does.")
@click.option("--object-path", default="embedding", show_default=True, metavar="PATH",
              help="Where the embedding object sits in the checkpoint (its attribute path, e.g. "
                   "model/embedding_layer): TensorFlow's adapter rewrites keys under it.")
@click.option("--after-build", is_flag=True, help="The restore runs after the embedding is "
              "built (its variables exist): TensorFlow's reshard is bypassed.")
@click.option("--fail-on", type=click.Choice(["error", "warning", "info"]), default=None,
              help="Exit 1 when a finding of this severity or above is reported.")
@click.option("-f", "--format", "fmt", type=click.Choice(DIFF_FORMATS), default="text",
              show_default=True, help="Report format (markdown: a pull-request comment).")
@click.option("-o", "--output", metavar="FILE", help="Write the report here (atomically) "
              "instead of standard output.")
@click.option("--quiet", "-q", is_flag=True, help="No progress line while a sample is read.")
def diff_command(files: tuple[str, ...], against: str | None, ids: tuple[str, ...],  # noqa: PLR0913
                 topology: str | None, keras_backend: str | None, tf_version: str | None,
                 breaking: bool, object_path: str, after_build: bool, fail_on: str | None,
                 fmt: str, output: str | None, quiet: bool) -> None:
    # one parameter per option: click's calling convention
    """What changes from OLD to NEW: the configurations, the TPU, the checkpoint.

    OLD and NEW: any configuration tpuemb reads (text, binary or JSON TPUEmbeddingConfiguration,
    Python/TOML specs, SparseCore specs of TensorFlow, keras-rs and jax-tpu-embedding), not
    necessarily of the same kind. With --against REF, every file given is a NEW compared with
    itself as git has it at REF (a pre-commit hook passes the files it matched).

    Exit status: 0 differences reported, 1 with --breaking when OLD's checkpoint does not
    restore under NEW (or a finding reaches --fail-on), 2 bad input or options, 130
    interrupted.
    """
    if against is None and len(files) != 2:
        raise UsageError(f"expected OLD and NEW, got {len(files)} file(s); or NEW... "
                         "--against REF")
    old_topo, new_topo = _pair("--topology", topology)
    old_keras, new_keras = _pair("--keras-backend", keras_backend, KERAS_BACKENDS)
    old_tf, new_tf = _pair("--tf-version", tf_version, TF_VERSIONS)
    # (OLD, NEW) pairs as given: with --against, each file against itself at REF
    pairs = [(files[0], files[1])] if against is None else [(f, f) for f in files]
    inputs = [("NEW", new) for _, new in pairs]
    inputs += [("OLD", old) for old, _ in pairs] if against is None else []
    inputs += [("--ids", p) for p in ids]
    check_outputs([("-o", output)] if output else [], inputs)
    for label, path in inputs:
        if label != "--ids" and not os.path.isfile(path):
            raise InputError("no such file" if not os.path.exists(path) else
                             f"not a file (expected a configuration as {label})", path=path)
    # absolute before any spec runs: a spec that changes folder cannot move what is read next
    # or the report's output
    output = os.path.abspath(output) if output is not None else None
    options = DiffOptions(
        old=SideOptions(old_topo, old_keras, old_tf),
        new=SideOptions(new_topo, new_keras, new_tf),
        ids=[os.path.abspath(p) for p in ids] or None,
        object_path=object_path_option(object_path) or "embedding", after_build=after_build)
    absolute = [(os.path.abspath(old), os.path.abspath(new)) for old, new in pairs]
    results = []
    with contextlib.ExitStack() as stack:
        hook = stack.enter_context(_sample_line(quiet))
        for (old, new), (old_abs, new_abs) in zip(pairs, absolute, strict=True):
            label = old
            if against is not None:
                found, label = stack.enter_context(_from_git(against, old))
                if found is None:
                    click.echo(f"diff: {printable(new)} is not in {printable(against)} (a new "
                               "file): nothing to compare", err=True)
                    continue
                old_abs = found
            results.append(diff(old_abs, new_abs, options, old_label=label, new_label=new,
                                on_sample=hook))
    if breaking:
        results = [_breaking_only(r) for r in results]
    if not results:
        return
    text = render_many(fmt, results)
    if fmt in ("text", "markdown"):
        text = printable(text, keep=LINES)
    if output is None:
        click.echo(text, nl=False)
    else:
        with OutputSet() as outputs:
            outputs.write_bytes(output, text.encode("utf-8"))
    failed = breaking and any(r.breaking for r in results)
    if fail_on is not None:
        rank = SEVERITY_RANK[fail_on]
        failed = failed or any(SEVERITY_RANK[d.severity] >= rank
                               for r in results for d in r.findings)
    if failed:
        click.get_current_context().exit(1)


def _breaking_only(result: Any) -> Any:
    """The diff with only its checkpoint findings and changes (``--breaking``)."""
    from dataclasses import replace

    return replace(result, changes=(),
                   findings=tuple(d for d in result.findings if d.rule.startswith("CKPT")))


__all__ = ["diff_command"]
