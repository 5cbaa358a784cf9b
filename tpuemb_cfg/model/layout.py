"""Which host holds which row (spec section 8): the one statement of the host layout.

On a TPU pod the rows of every table live on the hosts: with V = ``vocabulary_size``, N hosts,
q = floor(V / N) and r = V mod N, each of the first r hosts holds q + 1 rows and the others q,
placed by ``sharding_strategy``:

- **MOD** (round robin): host(i) = i mod N, local row = floor(i / N);
- **DIV_DEFAULT** (contiguous ranges): host h holds the ids from its first row
  ``h * (q + 1)`` (h <= r) or ``r * (q + 1) + (h - r) * q`` (h > r) on; local row = i minus it.

:func:`host_of` is the owner of each id (the report's ids per host); :class:`TableLayout` is the
whole mapping for one table, as the sharded storage lays tables out: the owner and local row of ids,
a host's global ids (what ``state.initial_table_rows`` draws for it), the split of a sorted
block of ids into one block per host (what travels per step), and the split of a range of ids
(what streams into an ``.npz`` file, one block of rows at a time). The same formulas hold when
N exceeds V (``--shards`` experiments): the hosts past V then hold no rows.

NumPy is imported when a function runs, not with the module (the layer of derived facts loads
no NumPy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = ["HostRows", "TableLayout", "host_of"]


def host_of(ids: np.ndarray, vocabulary: int, num_hosts: int, mod: bool) -> np.ndarray:
    """The host holding each id (int64 ids; spec section 8): ``i mod N`` for MOD; for
    DIV_DEFAULT, with q = V // N and r = V % N, the first r hosts hold q + 1 contiguous rows
    and the others q (N > V: one row per host, the hosts past V none)."""
    import numpy as np

    hosts = max(int(num_hosts), 1)
    if mod:
        return ids % hosts
    q, r = divmod(int(vocabulary), hosts)
    boundary = r * (q + 1)
    if q == 0:
        return ids.copy()
    if r == 0:  # equal shares (q + 1 would overflow int64 when V is 2^63 - 1 on one host)
        even: np.ndarray = ids // q
        return even
    out: np.ndarray = np.where(ids < boundary, ids // (q + 1), r + (ids - boundary) // q)
    return out


@dataclass(frozen=True)
class HostRows:
    """The part of a block of ids one host holds.

    ``positions``: where they are in the block (a slice for contiguous runs, else indices);
    ``local``: their local row numbers on the host, int64, in the block's order.
    """

    host: int
    positions: slice | np.ndarray
    local: np.ndarray

    @property
    def count(self) -> int:
        return int(self.local.shape[0])


@dataclass(frozen=True)
class TableLayout:
    """The rows of a ``vocabulary``-row table over ``hosts`` hosts, MOD or DIV_DEFAULT."""

    vocabulary: int
    hosts: int
    mod: bool

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.vocabulary < 1:
            raise ValueError(f"a layout needs >= 1 host and >= 1 row, got {self.hosts} and "
                             f"{self.vocabulary}")

    @property
    def _qr(self) -> tuple[int, int]:
        return divmod(self.vocabulary, self.hosts)

    def rows_of(self, host: int) -> int:
        """How many rows ``host`` holds: q + 1 for the first r hosts, q for the others."""
        q, r = self._qr
        return q + (1 if host < r else 0)

    def first_row(self, host: int) -> int:
        """DIV_DEFAULT: the first id ``host`` holds (its rows are ``first .. first + rows - 1``)."""
        q, r = self._qr
        return host * (q + 1) if host <= r else r * (q + 1) + (host - r) * q

    def host_of(self, ids: np.ndarray) -> np.ndarray:
        """The host holding each id (int64; :func:`host_of`)."""
        import numpy as np

        return host_of(np.asarray(ids, dtype=np.int64), self.vocabulary, self.hosts, self.mod)

    def local_of(self, ids: np.ndarray, host: int) -> np.ndarray:
        """The local row numbers on ``host`` of ``ids`` (all held by ``host``)."""
        import numpy as np

        ids = np.asarray(ids, dtype=np.int64)
        return ids // self.hosts if self.mod else ids - self.first_row(host)

    def global_of(self, host: int, local: np.ndarray) -> np.ndarray:
        """The ids of ``host``'s local rows ``local`` (int64)."""
        import numpy as np

        local = np.asarray(local, dtype=np.int64)
        return local * self.hosts + host if self.mod else local + self.first_row(host)

    def global_ids(self, host: int) -> np.ndarray:
        """Every id ``host`` holds, in local-row order (int64)."""
        import numpy as np

        count = self.rows_of(host)
        if self.mod:
            return np.arange(count, dtype=np.int64) * self.hosts + host
        return np.arange(count, dtype=np.int64) + self.first_row(host)

    def split(self, rows: np.ndarray) -> list[HostRows]:
        """One ``HostRows`` per host (hosts holding none included) for sorted distinct ``rows``."""
        import numpy as np

        rows = np.asarray(rows, dtype=np.int64)
        if not self.mod:
            # Sorted ids: every host's ids are one contiguous run.
            starts = [self.first_row(h) for h in range(self.hosts)]
            cuts = np.searchsorted(rows, starts + [self.vocabulary])
            return [
                HostRows(h, slice(int(cuts[h]), int(cuts[h + 1])),
                         rows[cuts[h]:cuts[h + 1]] - starts[h])
                for h in range(self.hosts)
            ]
        owner = rows % self.hosts
        out = []
        for h in range(self.hosts):
            positions = np.flatnonzero(owner == h)
            out.append(HostRows(h, positions, rows[positions] // self.hosts))
        return out

    def split_range(self, start: int, stop: int) -> list[tuple[int, slice, slice]]:
        """The ids ``start .. stop - 1`` as ``(host, local rows, positions in the range)`` for
        every host holding some of them; each ``local`` and ``positions`` is a plain slice (a
        host's share of a range is evenly spaced: step N for MOD, 1 for DIV_DEFAULT)."""
        out: list[tuple[int, slice, slice]] = []
        if self.mod:
            for h in range(self.hosts):
                first = start + (h - start) % self.hosts  # the first id >= start with id % N == h
                if first >= stop:
                    continue
                count = (stop - 1 - first) // self.hosts + 1
                local = first // self.hosts
                out.append((h, slice(local, local + count),
                            slice(first - start, stop - start, self.hosts)))
            return out
        for h in range(self.hosts):
            lo = self.first_row(h)
            hi = lo + self.rows_of(h)
            a, b = max(lo, start), min(hi, stop)
            if a < b:
                out.append((h, slice(a - lo, b - lo), slice(a - start, b - start)))
        return out
