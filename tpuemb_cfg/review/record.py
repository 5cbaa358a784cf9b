"""The records ``tpuemb diff`` returns: one :class:`Change` per difference, placed at a
:data:`Location`. Both live with the DIFF rules (``rules.diff``), which turn each change into a
finding of the one registry; this module is their name in the review layer."""

from __future__ import annotations

from tpuemb_cfg.rules.diff import Change, Location

__all__ = ["Change", "Location"]
