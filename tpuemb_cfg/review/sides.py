"""One side of a ``tpuemb diff``: a configuration loaded once, with what both comparisons read.

:func:`load_side` takes what ``tpuemb validate`` takes (a legacy configuration file or message,
a Python/TOML spec, a SparseCore spec of TensorFlow, keras-rs or jax-tpu-embedding, or a
``SparseCoreConfig``) and returns a :class:`Side`: its kind, the legacy message or the SparseCore
configuration and its stacking (as the side's reference and versions stack it), under the
name the report shows (``label``: ``HEAD:model.py`` for a file read from git, which the command
writes to a private file first: :meth:`Side.shown` maps that file's name back to the label).

A side is read with the options of its run: ``topology`` (a Cloud TPU slice, ``v6e-32``: the
SparseCore slice, or a legacy configuration's host count), ``keras_backend`` (a keras-rs spec's
Keras backend) and ``tf_version`` (the TensorFlow release whose stacker lays out a TensorFlow or
keras-rs-on-TensorFlow spec).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from tpuemb_cfg.base.errors import InputError, UsageError
from tpuemb_cfg.planner.memory import with_hosts
from tpuemb_cfg.session import prepare, source_kind
from tpuemb_cfg.sparsecore.summary import layouts_of
from tpuemb_cfg.sparsecore.topology import parse_topology

if TYPE_CHECKING:
    from tpuemb_cfg.executor.prepared import Prepared
    from tpuemb_cfg.proto.sparse_core_layout_pb2 import SparseCoreTableLayouts
    from tpuemb_cfg.proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
    from tpuemb_cfg.sparsecore.config import SparseCoreConfig
    from tpuemb_cfg.sparsecore.stacking import Stacking

__all__ = ["Side", "SideOptions", "load_side"]


@dataclass(frozen=True)
class SideOptions:
    """How one side is read: ``topology`` (``"v6e-32"``), ``keras_backend`` (``"jax"`` /
    ``"tensorflow"``), ``tf_version`` (``"2.20"`` / ``"2.21"``); None: the configuration's own."""

    topology: str | None = None
    keras_backend: str | None = None
    tf_version: str | None = None

    def __post_init__(self) -> None:
        for name in ("topology", "keras_backend", "tf_version"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"SideOptions {name}: expected a string or None, got "
                                f"{type(value).__name__}")
        if self.keras_backend not in (None, "jax", "tensorflow"):
            raise UsageError(f"keras_backend {self.keras_backend!r}: expected jax or tensorflow")


@dataclass(frozen=True)
class Side:
    """A loaded configuration. ``kind``: ``legacy`` or ``sparsecore``; ``path``: the file read
    (None for an object); ``label``: the name reports show; ``source``: what was loaded (a path
    or the object, for the validator and the planner); ``prepared`` (legacy, None when the
    executor cannot plan it), ``message`` (legacy), ``config`` and ``stacking`` (SparseCore;
    ``stacking`` None when the tables cannot be stacked, ``stacking_error`` says why;
    ``layouts``: TensorFlow's ``SparseCoreTableLayouts`` of the stacking, what a checkpoint
    stores and TensorFlow compares at a restore)."""

    kind: str
    label: str
    path: str | None
    source: Any
    options: SideOptions
    message: TPUEmbeddingConfiguration | None = None
    prepared: Prepared | None = None
    config: SparseCoreConfig | None = None
    stacking: Stacking | None = None
    layouts: SparseCoreTableLayouts | None = None
    stacking_error: str | None = None

    def shown(self, path: str | None) -> str | None:
        """``path`` as reports show it: this side's label for its own file."""
        if path is None:
            return self.label if self.path is None else None
        if self.path is not None and os.path.abspath(path) == os.path.abspath(self.path):
            return self.label
        return path


def _layouts(config: SparseCoreConfig, tf_version: str | None
             ) -> tuple[SparseCoreTableLayouts, Stacking]:
    """The side's layouts and stacks as its reference builds them (``summary.layouts_of``:
    TensorFlow's stacker of ``tf_version``, or jax-tpu-embedding's)."""
    if tf_version is None:
        return layouts_of(config)
    try:
        return layouts_of(config, tf_version=tf_version)
    except ValueError as exc:
        if "version" in str(exc).lower():
            raise UsageError(f"--tf-version {tf_version!r}: {exc}") from None
        raise


def load_side(source: Any, options: SideOptions = SideOptions(), *,
              label: str | None = None) -> Side:
    """``source`` loaded as one side of a diff (the module docstring). Raises ``InputError``
    (unreadable or invalid input: its file and line) or ``UsageError`` (a bad option)."""
    path = os.fspath(source) if isinstance(source, str | os.PathLike) else None
    shown = label or path or type(source).__name__
    if source_kind(source) == "sparsecore":
        return _sparsecore_side(source, path, shown, options)
    return _legacy_side(source, path, shown, options)


def _sparsecore_side(source: Any, path: str | None, label: str,
                     options: SideOptions) -> Side:
    if path is not None:
        from tpuemb_cfg.embedding.sparsecore import load_sparsecore_spec

        config = load_sparsecore_spec(path, keras_backend=options.keras_backend,
                                      legacy=False).config
    else:
        config = source
    if options.topology is not None:
        try:
            topology = parse_topology(options.topology)
        except ValueError as exc:
            raise UsageError(f"--topology {options.topology!r}: {exc}") from None
        config = replace(config, topology=topology)
    error = None
    stacking = layouts = None
    try:
        layouts, stacking = _layouts(config, options.tf_version)
    except (ValueError, ArithmeticError, KeyError) as exc:
        error = " ".join(str(exc).split())
        if options.topology is not None:  # the slice asked for cannot hold the tables
            raise UsageError(f"--topology {options.topology!r}: {label} cannot be stacked on "
                             f"it: {error}") from None
    return Side("sparsecore", label, path, config if path is None else path, options,
                config=config, stacking=stacking, layouts=layouts, stacking_error=error)


def _legacy_side(source: Any, path: str | None, label: str, options: SideOptions) -> Side:
    if options.tf_version not in (None, "2.20", "2.21"):
        raise UsageError(f"--tf-version {options.tf_version!r}: expected 2.20 or 2.21")
    prepared = None
    try:
        prepared = prepare(source, check=False)
        message = prepared.config
    except InputError:
        if path is not None and path.endswith((".py", ".toml")):
            raise  # a spec that does not compile has no message to compare
        # what the executor cannot plan is still compared (its findings say why): read the
        # message alone; an unreadable file raises here
        from tpuemb_cfg.formats.io import as_config, read_source

        message = read_source(path).message if path is not None else as_config(source)
    if options.topology is not None:
        try:
            hosts = parse_topology(options.topology).hosts
        except ValueError as exc:
            raise UsageError(f"--topology {options.topology!r}: {exc}") from None
        message = with_hosts(message, hosts)
    return Side("legacy", label, path, source, options, message=message, prepared=prepared)
