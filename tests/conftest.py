"""Suite-wide pytest configuration: the conformance kit's closing summary, and assertion
rewriting for the shared test helpers (registered here, before any test module imports
them: tests/chaos imports them too, and it is collected before tests/integration)."""

import pytest

pytest.register_assert_rewrite("tests.integration.jdbc_support")

pytest_plugins = ["twopc.testing.plugin", "pytester"]
