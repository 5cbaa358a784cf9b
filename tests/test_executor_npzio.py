"""tpuemb_cfg.formats.npzio: reproducible, atomic .npz files and readable errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tpuemb_cfg.base.errors import InputError
from tpuemb_cfg.formats.npzio import atomic_write_npz, npz_bytes, read_npz


def test_round_trip_is_byte_reproducible(tmp_path: Path) -> None:
    arrays = {"b/x": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.array(7)}
    atomic_write_npz(tmp_path / "one.npz", arrays)
    atomic_write_npz(tmp_path / "two.npz", dict(reversed(list(arrays.items()))))
    assert (tmp_path / "one.npz").read_bytes() == (tmp_path / "two.npz").read_bytes()
    assert (tmp_path / "one.npz").read_bytes() == npz_bytes(arrays)
    back = read_npz(tmp_path / "one.npz")
    assert back["b/x"].tolist() == [[0, 1, 2], [3, 4, 5]] and back["b/x"].dtype == np.float32
    assert back["a"].shape == () and int(back["a"]) == 7
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_read_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        read_npz(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="cannot read as .npz"):
        read_npz(tmp_path / "junk.npz")
    np.save(tmp_path / "single.npy", np.zeros(2))
    with pytest.raises(InputError, match="not an .npz archive"):
        read_npz(tmp_path / "single.npy")
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InputError) as info:
        read_npz(tmp_path / "objects.npz")
    assert info.value.key == "x"
