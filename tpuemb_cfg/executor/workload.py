"""The shape of a synthetic workload: which ids it draws and how long its sequences are.

A synthetic run (``sim.synthetic``) draws, every step, each feature's bags (``executor.bags``:
how many ids a bag holds), then, for a sequence feature, how many of its positions each sample
fills, then the ids. Two of those choices are the user's (``tpuemb simulate --ids``,
``--sequence-lengths``; ``SyntheticRun(ids=, sequence_lengths=)``), and the memory estimate
(``executor.memory``) needs both: they decide how many ids a step looks up and how many of them
are distinct. They are described here, below the executor, so that the estimate can read them;
``sim.kernels`` draws the numbers.

**Ids** (:class:`IdDistribution`, grammar ``zipf[:S]`` or ``uniform``):

- ``zipf:S`` (default ``zipf:1.1``): rank r (0-based) has probability proportional to about
  ``(r + 1)^-S``: the continuous power law of exponent S on [1, V + 1) is inverted,
  ``x = (1 + u ((V + 1)^a - 1))^(1/a)`` with ``a = 1 - S`` (for S = 1, ``x = (V + 1)^u``),
  ``rank = min(floor(x) - 1, V - 1)``, and ranks are scattered over the table by a fixed
  bijection. S > 0; the larger S, the fewer distinct ids.
- ``uniform``: every row equally likely, ``id = min(floor(u V), V - 1)``; the dummy data of
  Model Garden's DLRM and of keras-rs' examples.

**Sequence lengths** (:class:`SequenceLengths`, for features whose input shape has positions,
``[batch, L, ...]``: a compiled spec's sequence features, or a plain configuration's
multi-dimensional ``input_shape``): each sample fills its first ``l`` of the P positions
(P = the product of the dimensions after the batch) and leaves the rest empty (bags with no id:
activation 0, as TensorFlow's padding of a ragged sequence gives). Grammar:

- ``full`` (the default): ``l = P`` for every sample;
- ``fixed:N``: ``l = min(N, P)``;
- ``uniform`` / ``uniform:LO`` / ``uniform:LO:HI``: ``l`` uniform on LO..HI (defaults 1 and P;
  HI is capped at P);
- ``geometric:MEAN``: ``l = min(G, P)`` with G geometric on 1, 2, ... of mean MEAN (a long
  tail cut at P, as a model truncates its history to its context length).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tpuemb_cfg.base.errors import UsageError
from tpuemb_cfg.base.errors import parameter as arg
from tpuemb_cfg.base.numerics import pow64

__all__ = [
    "DEFAULT_IDS",
    "DEFAULT_SEQUENCE_LENGTHS",
    "IdDistribution",
    "SequenceLengths",
    "parse_ids",
    "parse_sequence_lengths",
]

#: The default exponent of ``zipf``.
ZIPF_DEFAULT = 1.1
_ZIPF_LIMIT = 100.0
_BUCKETS = 512


@dataclass(frozen=True)
class IdDistribution:
    """How synthetic ids fall over a table's rows: ``kind`` ``zipf`` (with ``exponent``) or
    ``uniform`` (see the module docstring)."""

    kind: str = "zipf"
    exponent: float = ZIPF_DEFAULT

    def __str__(self) -> str:
        return f"zipf:{self.exponent:g}" if self.kind == "zipf" else self.kind

    @property
    def default(self) -> bool:
        return self == DEFAULT_IDS

    def expected_unique(self, vocabulary: int, draws: float) -> float:
        """The expected number of distinct ids among ``draws`` ids over ``vocabulary`` rows:
        ``sum over rows r of 1 - (1 - p_r)^draws``.

        Zipf: the rank probabilities come from the continuous power law the sampler inverts,
        ``p_r = F(r + 2) - F(r + 1)`` with ``F(x) = (x^a - 1) / ((V + 1)^a - 1)`` (``a = 1 - S``;
        ``ln x / ln(V + 1)`` for S = 1), summed in geometric buckets of ranks (the probability
        changes slowly within one), so the cost does not grow with the vocabulary. Uniform:
        ``V (1 - (1 - 1/V)^draws)``.
        """
        if vocabulary <= 0 or draws <= 0:
            return 0.0
        if self.kind == "uniform":
            total = -vocabulary * math.expm1(draws * math.log1p(-1.0 / vocabulary)) if (
                vocabulary > 1) else 1.0
            return min(total, float(vocabulary), draws)
        edges = np.unique(np.rint(float(vocabulary) ** np.linspace(0.0, 1.0, _BUCKETS + 1)))
        edges = np.concatenate(([0.0], edges))
        cdf = self._cdf(edges + 1.0, vocabulary)
        counts = np.diff(edges)
        p = np.minimum(np.diff(cdf) / counts, 1.0 - 1e-16)  # mean probability within a bucket
        total = float(np.sum(counts * -np.expm1(draws * np.log1p(-p))))
        return min(total, float(vocabulary), draws)

    def _cdf(self, x: np.ndarray, vocabulary: int) -> np.ndarray:
        a = 1.0 - self.exponent
        cdf: np.ndarray
        if a == 0.0:
            cdf = np.log(x) / math.log(vocabulary + 1.0)
        else:
            cdf = (x**a - 1.0) / ((vocabulary + 1.0) ** a - 1.0)
        return cdf

    def zipf_base(self, vocabulary: int) -> float:
        """``1 - (V + 1)^(1 - S)``, the sampler's constant (``numerics.pow64``: the same bits on
        every machine); for S = 1, ``ln``-free: the sampler then raises V + 1 to ``u``."""
        return 1.0 - pow64(vocabulary + 1.0, 1.0 - self.exponent)


DEFAULT_IDS = IdDistribution()


@dataclass(frozen=True)
class SequenceLengths:
    """How many positions of a sequence feature each sample fills (module docstring): ``kind``
    ``full``, ``fixed`` (``low``), ``uniform`` (``low`` to ``high``; None: the positions) or
    ``geometric`` (``mean``)."""

    kind: str = "full"
    low: int = 1
    high: int | None = None
    mean: float = 0.0

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.low}"
        if self.kind == "uniform":
            return ("uniform" if self.low == 1 and self.high is None
                    else f"uniform:{self.low}" if self.high is None
                    else f"uniform:{self.low}:{self.high}")
        if self.kind == "geometric":
            return f"geometric:{self.mean:g}"
        return self.kind

    @property
    def default(self) -> bool:
        return self.kind == "full"

    def draw(self, rng: np.random.Generator, samples: int, positions: int) -> np.ndarray | None:
        """The length of each of ``samples`` sequences of ``positions`` positions (int64), drawn
        from ``rng``; None for ``full`` (nothing is drawn)."""
        if self.kind == "full":
            return None
        if self.kind == "fixed":
            return np.full(samples, min(self.low, positions), dtype=np.int64)
        if self.kind == "uniform":
            high = positions if self.high is None else min(self.high, positions)
            low = min(self.low, high)
            return rng.integers(low, high + 1, samples)
        return np.minimum(rng.geometric(1.0 / self.mean, samples), positions).astype(np.int64)

    def expected_fraction(self, positions: int) -> float:
        """The mean share of the ``positions`` positions a sample fills."""
        if positions <= 0:
            return 0.0
        if self.kind == "full":
            return 1.0
        if self.kind == "fixed":
            return min(self.low, positions) / positions
        if self.kind == "uniform":
            high = positions if self.high is None else min(self.high, positions)
            low = min(self.low, high)
            return (low + high) / 2.0 / positions
        p = 1.0 / self.mean  # E[min(G, P)] = (1 - (1 - p)^P) / p
        return -math.expm1(positions * math.log1p(-p)) / p / positions if p < 1.0 else (
            1.0 / positions)


DEFAULT_SEQUENCE_LENGTHS = SequenceLengths()


def parse_ids(text: str | IdDistribution | None, option: str = arg("ids")) -> IdDistribution:
    """An :class:`IdDistribution` from ``zipf``, ``zipf:S`` or ``uniform`` (None: the default);
    ``UsageError`` naming ``option`` and the grammar otherwise."""
    if text is None:
        return DEFAULT_IDS
    if isinstance(text, IdDistribution):
        return text
    value = str(text).strip().lower()
    if value == "uniform":
        return IdDistribution("uniform", 0.0)
    kind, _, parameter = value.partition(":")
    if kind == "zipf":
        if not parameter:
            return DEFAULT_IDS
        try:
            exponent = float(parameter)
        except ValueError:
            exponent = math.nan
        if not 0.0 < exponent <= _ZIPF_LIMIT:
            raise UsageError(f"{option} {text}: the Zipf exponent must be a number above 0 and "
                             f"at most {_ZIPF_LIMIT:g} (1.1 is the default: a few popular ids and "
                             "a long tail), e.g. zipf:1.1 or zipf:0.8")
        return IdDistribution("zipf", exponent)
    raise UsageError(f"{option} {text}: unknown id distribution; expected zipf, zipf:S (S > 0, "
                     "e.g. zipf:1.1) or uniform")


def parse_sequence_lengths(text: str | SequenceLengths | None,
                           option: str = arg("sequence_lengths")) -> SequenceLengths:
    """A :class:`SequenceLengths` from ``full``, ``fixed:N``, ``uniform[:LO[:HI]]`` or
    ``geometric:MEAN`` (None: ``full``); ``UsageError`` naming ``option`` otherwise."""
    if text is None:
        return DEFAULT_SEQUENCE_LENGTHS
    if isinstance(text, SequenceLengths):
        return text
    value = str(text).strip().lower()
    kind, _, rest = value.partition(":")
    parts = rest.split(":") if rest else []
    grammar = "expected full, fixed:N, uniform, uniform:LO, uniform:LO:HI or geometric:MEAN"

    def whole(part: str, what: str) -> int:
        if not part.isdigit():
            raise UsageError(f"{option} {text}: {what} {part!r} is not a whole number of "
                             f"positions (0 or more); {grammar}")
        return int(part)

    if kind == "full" and not parts:
        return DEFAULT_SEQUENCE_LENGTHS
    if kind == "fixed" and len(parts) == 1:
        return SequenceLengths("fixed", low=whole(parts[0], "N"))
    if kind == "uniform" and len(parts) <= 2:
        low = whole(parts[0], "LO") if parts else 1
        high = whole(parts[1], "HI") if len(parts) == 2 else None
        if high is not None and high < low:
            raise UsageError(f"{option} {text}: HI ({high}) is below LO ({low}); {grammar}")
        return SequenceLengths("uniform", low=low, high=high)
    if kind == "geometric" and len(parts) == 1:
        try:
            mean = float(parts[0])
        except ValueError:
            mean = math.nan
        if not 1.0 <= mean < math.inf:
            raise UsageError(f"{option} {text}: the mean length must be a number of at least 1 "
                             "(a sequence fills at least one position), e.g. geometric:50")
        return SequenceLengths("geometric", mean=mean)
    raise UsageError(f"{option} {text}: unknown sequence lengths; {grammar}")
