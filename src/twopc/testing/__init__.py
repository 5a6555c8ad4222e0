"""The conformance kit: prove a twopc sink exactly-once by subclassing one suite.

Install with ``pip install "twopc[testing]"`` and write a test module::

    # conftest.py
    pytest_plugins = ["twopc.testing.plugin"]   # the closing summary of guarantees

    # test_conformance.py
    from twopc.testing import SinkConformanceSuite

    class TestMySink(SinkConformanceSuite):
        sink_factory = "my_plugin.testing:make_sink"   # make_sink(target) -> Sink

        def read_committed(self, target):
            return [...]   # the ids a reader of the target sees now

The suite checks the protocol without Spark, real ``foreachBatch`` queries, and a SIGKILL
at every crash point followed by a restart. Tests that need a capability the sink does
not declare are skipped with that reason. Minor releases of twopc may add checks.
"""

from twopc.testing._runner import batch_ids, default_batch
from twopc.testing._suite import GUARANTEES, SinkConformanceSuite, crash_points, guarantee

__all__ = [
    "GUARANTEES",
    "SinkConformanceSuite",
    "batch_ids",
    "crash_points",
    "default_batch",
    "guarantee",
]
