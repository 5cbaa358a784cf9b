"""tpuemb's version: ``tpuemb --version``, the SARIF report's tool version and
``tpuemb_cfg.__version__`` (the same as ``pyproject.toml``'s)."""

__version__ = "0.1.0"
