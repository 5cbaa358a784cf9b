"""``tpuemb diff``: what a configuration change does, for code review (docs/architecture.md).

``facts`` reads any configuration into one normalised description, ``semantic`` compares two
of them; ``record`` holds the records the layer returns.
"""
