"""Simulated training runs around the executor: one worker or several, on synthetic data.

- ``accumulators``: TensorFlow's conditional accumulators (dense and sparse), every operation
  logged, blocking takes reported as ``WouldBlock``;
- ``staleness``: the optimizer wrappers that decide what happens to a stale gradient,
  ``DropStaleGradient`` and ``SyncReplicas``;
- ``synthetic``: the synthetic workload (seeded Zipf batches, teacher, loss, learning rates) and
  the single-worker ``SyntheticRun`` with checkpoints;
- ``multiworker``: ``MultiWorkerRun``, N workers feeding one chief executor through the
  accumulators, with seeded delays;
- ``schedules`` and ``spec``: learning-rate schedules and the ``SimulationSpec`` file that holds
  every option of a run;
- ``report``: the text of a run summary.

Nothing here draws progress or writes files: the runs return summaries and arrays, and
``tpuemb_cfg.commands.simulate`` shows and writes them. The public names are re-exported by
``tpuemb_cfg.simulate``.
"""
