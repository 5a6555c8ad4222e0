"""Coordination: two-phase commit of one batch, whatever engine runs its tasks.

- ``coordinator``: :class:`Coordinator`, a batch run by an engine (``foreach_batch``,
  ``write_batch``, the local engine);
- ``reported``: the same rules for a batch whose tasks ran before the driver is asked
  (``format("twopc")``);
- ``admission``: the one sequence of checks every batch passes before anything is written;
- ``deciding``: the durable decision and phase 2; ``recovery``: what a crash left;
- ``commit_log`` and ``records``: the log and what it holds (the only module that reads or
  writes the log's files is ``commit_log``);
- ``completeness``: the batch's committables taken from its reports, or why not;
- ``engine``, ``phase1``, ``reports``: the engine's contract, the task side, the report
  a task sends back; ``publishing``, ``liveness``, ``batch_metrics``: what a batch tells
  the outside; ``steps``: how far a long recovery is (a terminal shows it).

Nothing here imports Spark; entry points (``twopc._engines``) drive it.
"""
