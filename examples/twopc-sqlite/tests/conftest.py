"""The conformance kit's pytest plugin: prints which guarantees the sink passed."""

pytest_plugins = ["twopc.testing.plugin"]
