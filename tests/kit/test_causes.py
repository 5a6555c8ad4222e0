"""What the kit quotes of a failure: the exception and the plugin's frames
(``twopc.testing._causes``), from an exception in this process or a traceback another
process printed."""

from __future__ import annotations

import pytest

from tests.kit.broken_sinks import HoldsItsTargetSink, PartialRowGroupFailsSink
from twopc import TaskContext
from twopc.testing import forget_store
from twopc.testing._causes import describe, explain_output, plugin_code
from twopc.testing._memory import MemoryTransaction

pytestmark = pytest.mark.unit

CODE = plugin_code("tests.kit.broken_sinks:holds_its_target", [HoldsItsTargetSink])

_STDERR = """\
<frozen runpy>:128: RuntimeWarning: 'twopc.testing._runner' found in sys.modules
Process ForkProcess-1:
Traceback (most recent call last):
Process ForkProcess-2:
  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/process.py", line 314, in _bootstrap
    self.run()
  File "{plugin}", line 120, in pre_commit
    return Committable(...)
  File "/usr/lib/python3.11/json/encoder.py", line 180, in default
    raise TypeError(f'Object of type {{o.__class__.__name__}} '
TypeError: Object of type bytes is not JSON serializable
Traceback (most recent call last):
  File "/work/src/twopc/local.py", line 88, in run_phase1
    raise SinkError(
twopc.errors.SinkError: partition 0: the task's process exited with status 1 without reporting

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/work/src/twopc/_coordination/coordinator.py", line 381, in _run_batch
    raise BatchFailedError(
twopc.errors.BatchFailedError: sink 'kit', batch 0: phase 1 failed
"""


def test_a_printed_traceback_is_quoted_by_its_exceptions_and_the_plugins_frames() -> None:
    import tests.kit.broken_sinks as plugin

    explained = explain_output(_STDERR.format(plugin=plugin.__file__), CODE)
    assert explained.splitlines() == [
        "  TypeError: Object of type bytes is not JSON serializable",
        "    at tests/kit/broken_sinks.py:120 in pre_commit: return Committable(...)",
        "  twopc.errors.SinkError: partition 0: the task's process exited with status 1 "
        "without reporting",
        "  twopc.errors.BatchFailedError: sink 'kit', batch 0: phase 1 failed",
    ]


def test_output_without_a_traceback_is_quoted_by_its_last_lines() -> None:
    lines = "\n".join(f"line {i}" for i in range(20))
    assert explain_output(lines, CODE).splitlines() == [f"  line {i}" for i in range(12, 20)]
    assert explain_output("", CODE) == "(it printed nothing on stderr)"


def test_an_exception_is_quoted_with_the_plugins_frames_where_it_began() -> None:
    sink = PartialRowGroupFailsSink("causes-test")
    txn = MemoryTransaction(TaskContext("kit", "q", 0, 0), ids=list(range(20)))
    code = plugin_code("tests.kit.broken_sinks:partial_row_group_fails", [type(sink)])
    try:
        try:
            sink.pre_commit(txn)
        except ValueError as cause:
            raise RuntimeError("the task failed") from cause
    except RuntimeError as exc:
        described = describe(exc, code).splitlines()
    finally:
        forget_store("causes-test")
    assert described[0] == "RuntimeError: the task failed"
    # innermost last: where the root cause was raised, in the plugin's code
    assert described[-1].startswith("    at tests/kit/broken_sinks.py:")
    assert "in pre_commit: raise ValueError(" in described[-1]
