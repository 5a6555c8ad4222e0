"""Suite-wide pytest configuration: the conformance kit's closing summary."""

pytest_plugins = ["twopc.testing.plugin", "pytester"]
