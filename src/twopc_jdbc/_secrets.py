"""The SQL sinks mask credentials with the core's :mod:`twopc.secrets`."""

from twopc.secrets import MASK, redact, scrub

__all__ = ["MASK", "redact", "scrub"]
