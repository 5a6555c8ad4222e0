"""Keeping credentials out of every message that leaves twopc or a sink.

A password reaches a sink in a connection URL, in its query (``?password=``) or in
options; drivers may echo a connection string, and an exception raised by a driver travels
on as the ``__cause__`` or ``__context__`` of the sink's own error, so that its text ends
up in tracebacks and logs too. :func:`redact` masks a message; :func:`scrub` masks an
exception and every exception chained to it, in place, so the error keeps its type and
traceback but no longer carries the secret. The command line masks what it prints with
them; plugins use them on what their drivers raise::

    from twopc.secrets import scrub

    try:
        connection = driver.connect(dsn)
    except driver.Error as exc:
        raise scrub(exc, [password])
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import quote, quote_plus

from twopc.errors import TwoPCError

__all__ = ["MASK", "redact", "scrub"]

MASK = "***"

# scheme://user:password@ -> scheme://user:***@ (the password runs to the last '@' of the
# whitespace-free token, so unencoded '/', '?', '#' and '@' in it are covered too)
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@?#]*):\S*@")
# password=secret, password = 'sec ret', passwd=..., sslpassword=... (libpq conninfo)
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>\b\w*(?:password|passwd)\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^\s,;)]+)",
    re.IGNORECASE,
)
# 'password': 'secret' in the repr of a dict of options
_MAPPING_PASSWORD = re.compile(
    r"(?P<head>['\"]\w*(?:password|passwd)['\"]\s*:\s*)(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")",
    re.IGNORECASE,
)


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret (as given and percent-encoded) and every password of a
    connection URL, conninfo string or options mapping replaced by ``***``."""
    forms = {
        form
        for secret in secrets
        if secret
        for form in (secret, quote(secret, safe=""), quote_plus(secret, safe=""), repr(secret))
    }
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, MASK)
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _KEYWORD_PASSWORD.sub(lambda m: f"{m['head']}{MASK}", text)
    return _MAPPING_PASSWORD.sub(lambda m: f"{m['head']}'{MASK}'", text)


def scrub(exc: BaseException, secrets: Iterable[str]) -> BaseException:
    """Mask the messages of ``exc`` and of every exception chained to it (``__cause__``,
    ``__context__``), in place; returns ``exc``."""
    secrets = tuple(s for s in secrets if s)
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        _scrub_one(current, secrets)
        pending.extend((current.__cause__, current.__context__))
    return exc


def _scrub_one(exc: BaseException, secrets: tuple[str, ...]) -> None:
    if isinstance(exc, TwoPCError):
        cleaned = redact(exc.cause_message, secrets)
        if cleaned != exc.cause_message:
            exc.cause_message = cleaned
            exc.at()  # renders the message again from its parts
        return
    args = tuple(redact(a, secrets) if isinstance(a, str) else a for a in exc.args)
    if args != exc.args:
        exc.args = args
    if isinstance(exc, OSError) and isinstance(exc.strerror, str):
        exc.strerror = redact(exc.strerror, secrets)
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        notes[:] = [redact(n, secrets) if isinstance(n, str) else n for n in notes]
