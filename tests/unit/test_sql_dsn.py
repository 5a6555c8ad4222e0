"""Connection URLs of the SQL sinks: passwords with URL delimiters, malformed URLs, and
connection settings given twice. No message ever shows the password or a piece of it;
connecting with such passwords is tested against the real servers in
``tests/integration/test_sql_bad_input.py``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

import twopc
from tests.harness.sink_errors import exception_texts
from twopc_jdbc.mysql import MySQLSink
from twopc_jdbc.postgres import PostgresSink

pytestmark = pytest.mark.unit

ENCODE = (
    "special characters in the user name or password (/ ? # @ : %) must be percent-encoded, "
    "e.g. urllib.parse.quote(password, safe='')"
)
AT_AFTER_HOST = (
    "has an '@' after its host part: the user name or password probably contains '/' or "
    f"'?', which end the address part early; {ENCODE} (an '@' in the database name or a "
    "parameter is written %40)"
)
HASH = (
    "contains '#', which ends a URL's address part (connection URLs have no fragment); if "
    f"the password contains '#', write it as %23: {ENCODE}"
)
PORT = "it must be a number from 1 to 65535"
SINKS = [("postgres", PostgresSink, "postgresql"), ("mysql", MySQLSink, "mysql")]


def pieces(secret: str) -> list[str]:
    """Every piece of 4 characters of ``secret``: none may appear in a message."""
    return [secret[i : i + 4] for i in range(len(secret) - 3)]


def assert_hidden(secret: str, *texts: str) -> None:
    for text in texts:
        for piece in pieces(secret):
            assert piece not in text, f"{piece!r} of the password in: {text}"


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize(
    ("url", "password", "problem"),
    [
        ("{s}://etl:Zq9#Xv7k@db.example:5432/shop", "Zq9#Xv7k", HASH),
        ("{s}://etl:hunter2#x@db.example:5432/shop", "hunter2#x", HASH),
        ("{s}://etl:hunter2/x@db.example/shop", "hunter2/x", AT_AFTER_HOST),
        ("{s}://etl:Wk4/Jp8q@db.example/shop", "Wk4/Jp8q", AT_AFTER_HOST),
        ("{s}://etl:Wk4?Jp8q@db.example/shop", "Wk4?Jp8q", AT_AFTER_HOST),
        ("{s}://etl:p@ss:w?rd@127.0.0.1:15432/twopc", "p@ss:w?rd", AT_AFTER_HOST),
        ("{s}://etl:Qx7:9876/zz@db/shop", "Qx7:9876/zz", AT_AFTER_HOST),
        ("{s}://etl:Qx79876?a=b@db/shop", "Qx79876?a=b", AT_AFTER_HOST),
    ],
)
def test_an_unencoded_delimiter_in_the_password_is_refused_without_showing_it(
    caplog: pytest.LogCaptureFixture,
    sink: tuple[str, type[Any], str],
    url: str,
    password: str,
    problem: str,
) -> None:
    backend, kind, scheme = sink
    caplog.set_level("DEBUG")
    dsn = url.format(s=scheme)
    for create in (lambda: twopc.create_sink(backend, dsn=dsn, table="t"),
                   lambda: kind(dsn, table="t")):  # fmt: skip
        with pytest.raises(twopc.ConfigurationError) as caught:
            create()
        assert str(caught.value) == f"the {backend} backend's option dsn {problem}"
        assert_hidden(password, *exception_texts(caught.value), caplog.text)


@pytest.mark.parametrize(("backend", "kind", "scheme"), SINKS)
@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (
            "{s}://u:p@[::1/db",
            "has a malformed host part: '[' without its ']' (an IPv6 address is written in "
            f"brackets, e.g. [::1]:5432); {ENCODE}",
        ),
        (
            "{s}://u:Tq8pWz@::1:5432/db",
            "has a malformed host part (an IPv6 address is written in brackets, e.g. "
            f"[::1]:5432); {ENCODE}",
        ),
        ("{s}://u:Tq8pWz@[::1]x/db", f"has a malformed host part: text after ']'; {ENCODE}"),
        (
            "{s}://u:Tq8pWz@db:99999/db",
            f"has a bad port: it must be a number from 1 to 65535; {ENCODE}",
        ),
        (
            "{s}://u:Tq8pWz@db:54x/db",
            f"has a bad port: it must be a number from 1 to 65535; {ENCODE}",
        ),
        (
            "{s}://u:Tq8pWz@db/db?sslmode",
            f"has a query parameter that is not key=value (write ?key=value&key=value); {ENCODE}",
        ),
        ("{s}://u:Tq8pWz@db/db?a=1&a=2", "sets the query parameter 'a' twice; give it once"),
    ],
)
def test_a_malformed_url_names_the_option_and_the_part(
    backend: str, kind: type[Any], scheme: str, url: str, problem: str
) -> None:
    with pytest.raises(twopc.ConfigurationError) as caught:
        kind(url.format(s=scheme), table="t")
    assert str(caught.value) == f"the {backend} backend's option dsn {problem}"
    assert not isinstance(caught.value.__cause__, ValueError)
    assert_hidden("Tq8pWz", *exception_texts(caught.value))


@pytest.mark.parametrize(("backend", "kind", "scheme"), SINKS)
def test_scheme_and_non_url(backend: str, kind: type[Any], scheme: str) -> None:
    expected = " or ".join(f"{s}://" for s in kind.url_schemes)
    with pytest.raises(twopc.ConfigurationError) as caught:
        kind("http://u:Tq8pWz@db/x", table="t")
    assert str(caught.value) == (
        f"the {backend} backend's option dsn has the scheme 'http'; it must start with {expected}"
    )
    with pytest.raises(twopc.ConfigurationError) as caught:
        kind("u:Tq8pWz@db/x", table="t")
    assert str(caught.value) == (
        f"the {backend} backend's option dsn is not a connection URL: write "
        f"{kind.url_schemes[0]}://user:password@host:port/database (it must start with "
        f"{expected})"
    )
    assert_hidden("Tq8pWz", *exception_texts(caught.value))
    with pytest.raises(twopc.ConfigurationError) as caught:
        kind(5, table="t")
    assert str(caught.value) == (
        f"the {backend} backend's option dsn must be a connection URL (a string), not int"
    )


EVERY_DELIMITER = "Hx#/?@:%9 ;&=+k"


@pytest.mark.parametrize(("backend", "kind", "scheme"), SINKS)
@pytest.mark.parametrize(
    ("written", "password"),
    [
        (quote(EVERY_DELIMITER, safe=""), EVERY_DELIMITER),
        ("p@ss@w0rd", "p@ss@w0rd"),  # the last '@' before the host ends the password
        ("p:ss:w0rd", "p:ss:w0rd"),  # the first ':' ends the user name
        ("100%sure", "100%sure"),  # not a percent escape: kept as written
        ("tw%6Fpc", "twopc"),
    ],
)
def test_passwords_are_decoded_exactly(
    backend: str, kind: type[Any], scheme: str, written: str, password: str
) -> None:
    sink = kind(f"{scheme}://etl:{written}@[::1]:6543/shop?application_name=x%40y", table="t")
    settings = sink.settings
    assert (settings.user, settings.password, settings.host, settings.port, settings.database) == (
        "etl",
        password,
        "::1",
        6543,
        "shop",
    )
    assert settings.options == {"application_name": "x@y"}
    assert repr(sink) == (
        f"{kind.__name__}('etl@::1:6543/shop', table='t', mode='append', "
        "transaction_mode='transaction')"
    )
    assert_hidden(password, repr(sink), sink.describe(), repr(settings))


@pytest.mark.parametrize(
    ("kind", "scheme", "key"),
    [(PostgresSink, "postgresql", "password"), (MySQLSink, "mysql", "passwd")],
)
def test_password_and_other_fields_from_the_query_or_connect_options(
    kind: type[Any], scheme: str, key: str
) -> None:
    sink = kind(f"{scheme}://etl@db/shop?{key}=Mv3%23q", table="t", connect_options={"port": "7"})
    assert (sink.settings.password, sink.settings.port) == ("Mv3#q", 7)
    assert key not in sink.settings.options and "port" not in sink.settings.options
    assert sink.settings.describe() == "etl@db:7/shop"


@pytest.mark.parametrize(("backend", "kind", "scheme"), SINKS)
def test_a_setting_given_twice_with_different_values_is_refused(
    backend: str, kind: type[Any], scheme: str
) -> None:
    with pytest.raises(twopc.ConfigurationError) as caught:
        kind(f"{scheme}://etl:Vb7Nq2x@db/shop", table="t", connect_options={"password": "Kd8Zr4w"})
    assert str(caught.value).startswith(
        f"the {backend} backend's option connect_options and the dsn set the password ("
    )
    assert str(caught.value).endswith(") to different values; give it once")
    assert_hidden("Vb7Nq2x", *exception_texts(caught.value))
    assert_hidden("Kd8Zr4w", *exception_texts(caught.value))
    # the same value twice is no contradiction
    same = kind(
        f"{scheme}://etl:Vb7Nq2x@db/shop", table="t", connect_options={"password": "Vb7Nq2x"}
    )
    assert same.settings.password == "Vb7Nq2x"
    with pytest.raises(twopc.ConfigurationError) as caught:
        kind(f"{scheme}://etl@db/shop?sslmode=require", table="t",
             connect_options={"sslmode": "disable"})  # fmt: skip
    assert str(caught.value) == (
        f"the {backend} backend's option connect_options and the dsn's query both set "
        "'sslmode', to different values; give it once"
    )
    with pytest.raises(twopc.ConfigurationError) as caught:
        kind(f"{scheme}://etl@db:5432/shop", table="t", connect_options={"port": 5433})
    assert "set the port (port) to different values" in str(caught.value)
