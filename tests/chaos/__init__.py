"""The randomized chaos campaign: ``scripts/chaos`` (``python -m tests.chaos``).

One run is one seed. The seed draws a scenario (backend and mode, engine, what to kill,
when, and the input sizes); the run starts a query on a fresh namespace of the target,
kills something, restarts the query until every batch is committed, then reads the target
back: every record exactly once, no prepared transaction, staged file or open Kafka
transaction left, the service back up. See docs/chaos.md.

Modules: :mod:`.scenario` (seed -> scenario), :mod:`.sinks` and :mod:`.query` (the query
that is killed), :mod:`.spark_query` (its Spark version), :mod:`.targets` (namespaces and
checks per backend), :mod:`.procs` (processes and kills), :mod:`.runner` (one run) and
:mod:`.campaign` (the command line, summary and JSON).

It lives with the tests, not in the shipped package: it drives this repository's
``scripts/services`` and reads targets with the test suite's helpers.
"""
