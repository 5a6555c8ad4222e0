"""Postgres and MySQL/MariaDB transactions for twopc. The sinks are not implemented yet; the
plugin registers the ``postgres`` and ``mysql`` backends so ``twopc plugins`` shows them."""

__all__: list[str] = []
