"""Entry points and engines: where a user's batch enters twopc and where phase 1 runs.

- ``writer``: :class:`BatchWriter` and its :class:`WriterOptions`, shared by every entry
  point that drives the coordinator itself;
- ``spark`` (``foreach_batch``), ``spark_engine`` (phase 1 as a Spark job),
  ``batch_write`` (``write_batch``), ``datasource`` (``format("twopc")``), ``registration``;
- ``checkpoint``: what twopc reads from a Spark checkpoint (query id, the batch's input).

The local engine is public: :mod:`twopc.local`.
"""
