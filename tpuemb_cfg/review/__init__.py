"""``tpuemb diff``: what a configuration change does (``diffing.diff`` -> ``ConfigDiff``).

``sides`` loads each configuration once; ``facts`` normalises what it says (any kind, with its
lines) and ``semantic`` compares two; ``tpu`` compares what they do on the TPU (stacks, limits,
memory, findings, load); ``checkpoints`` whether OLD's checkpoint restores under NEW;
``report`` renders the result. The layer sits above the session and the planner, below the
commands.
"""
