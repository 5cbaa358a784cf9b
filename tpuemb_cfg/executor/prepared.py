"""A configuration ready to simulate: the record every simulation entry point runs.

``tpuemb_cfg.session.prepare`` builds it (parse, validate, plan); the executor, replay and the
synthetic and multi-worker runs take it as it is. The module imports nothing heavy (no protobuf,
no NumPy): ``tpuemb validate`` shares the CLI process and must never load NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..model import Diagnostic
    from ..proto.tpu_embedding_configuration_pb2 import TPUEmbeddingConfiguration
    from .plan import Plan

__all__ = ["Prepared"]


@dataclass(frozen=True)
class Prepared:
    """A configuration ready to simulate.

    ``config``: tpuemb's ``TPUEmbeddingConfiguration`` message; ``plan``: the executor's
    :class:`~tpuemb_cfg.executor.plan.Plan` of it (combiners included); ``path``: the file it was
    read from (``None`` for bytes and messages); ``diagnostics``: every validator finding (empty
    when prepared with ``check=False``, which skips validation); ``combiners_source``: where the
    combiners came from: ``"spec"`` (a compiled spec's tables), ``"given"`` (the ``combiners``
    argument) or ``"default"`` (none recorded: ``mean`` for every feature).
    """

    config: TPUEmbeddingConfiguration
    plan: Plan
    path: str | None
    diagnostics: tuple[Diagnostic, ...]
    combiners_source: str = "default"

    @property
    def combiner_note(self) -> str | None:
        """For combiners nobody chose, the sentence that says which ones are used."""
        if self.combiners_source != "default" or not self.plan.features:
            return None
        name = self.path or "the configuration"
        return (
            f"{name} records no combiners (TPUEmbeddingConfiguration has no field for them): "
            "every feature uses mean, TensorFlow's default; pass --combiner (combiners=) or "
            "simulate the spec (.py/.toml) it was compiled from"
        )
