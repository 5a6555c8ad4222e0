"""The randomized chaos campaign: ``scripts/chaos`` (``python -m tests.chaos``).

One run is one seed. The seed draws a scenario (backend and mode, engine, what to kill,
when, and the input sizes); the run starts a query on a fresh namespace of the target,
kills something, restarts the query until every batch is committed, then reads the target
back: every record exactly once, no prepared transaction, staged file or open Kafka
transaction left, the service back up. See docs/chaos.md.

Modules: :mod:`.scenario` (seed -> scenario), :mod:`.runner` (one run),
:mod:`.warm_spark` and :mod:`.spark_host` (long-lived Spark drivers for the Spark attempts)
and :mod:`.campaign` (the command line, summary and JSON). What the campaign shares with the
crash tests is in ``tests/harness``: ``sink_recipe`` and ``recipe_local_query`` (the query
that is killed), ``recipe_spark_query`` (its Spark version), ``targets`` (namespaces and
checks per backend), ``procs`` (processes and kills).

It lives with the tests, not in the shipped package: it drives this repository's
``scripts/services`` and reads targets with the test suite's helpers.
"""
