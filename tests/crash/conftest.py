"""The crash tests' fixtures: ``case`` and ``backend`` (every backend and mode, a fresh
target per test), defined in ``tests/harness``; the services, the SparkSession and the
rest come from ``tests/conftest.py``."""

from tests.harness.backend_cases import case  # noqa: F401
from tests.harness.backend_runs import backend  # noqa: F401
