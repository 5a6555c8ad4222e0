"""The private half of the sink contract: what the public contract modules (``protocol``,
``errors``, ``plugins``, ``retrying``) are built on and the core reads a sink through.

- ``boundary``: the one place a sink's exceptions become twopc errors naming the sink,
  batch and partition;
- ``paths``: the commit path a sink's roles give (on the driver, or in the task);
- ``signature`` and ``sink_options``: a backend's options checked and typed from its
  ``create_sink`` signature;
- ``retry``: the one retry policy every bounded loop uses.

Nothing here knows a batch, an engine or Spark.
"""
