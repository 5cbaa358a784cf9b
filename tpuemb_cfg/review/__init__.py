"""``tpuemb diff``: what a configuration change does (``diffing.diff`` -> ``ConfigDiff``).

``sides`` loads each configuration once; ``semantic`` compares what they say; ``tpu`` what they
do on the TPU (stacks, limits, memory, findings, load); ``checkpoints`` whether OLD's checkpoint
restores under NEW; ``report`` renders the result. The layer sits above the session and the
planner, below the commands.
"""
