"""Spark's string options typed from a backend factory's signature (``typed_options``).

No Spark and no services: the factories are small local ones and the first-party backends'
classes, loaded from the registry but never called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from twopc import ConfigurationError
from twopc._contract.sink_options import typed_options
from twopc.plugins import registry

pytestmark = pytest.mark.unit


def factory(  # type: ignore[no-untyped-def]  # `untyped` has no annotation on purpose
    path: str,
    *,
    enabled: bool = False,
    count: int = 1,
    ratio: float = 1.0,
    options: dict[str, Any] | None = None,
    mapping: Mapping[str, Any] = {},
    columns: Sequence[str] = (),
    names: list[str] | None = None,
    pair: tuple[str, ...] = (),
    label: str | None = None,
    plain: str = "x",
    untyped="raw",  # no annotation: the value stays a string
) -> None:
    """A function factory covering every conversion."""


class ClassFactory:
    """A class factory: its ``__init__``'s parameters are the options."""

    def __init__(self, table: str, *, create: bool = False, size: int = 10) -> None:
        self.table = table


class HidingNew:
    """A ``__new__`` taking anything must not hide ``__init__``'s parameters."""

    def __new__(cls, *args: Any, **kwargs: Any) -> HidingNew:
        return super().__new__(cls)

    def __init__(self, name: str, *, flag: bool = True) -> None:
        self.name = name


class OpenEnded:
    """A factory that takes any keyword: unknown options pass through as strings."""

    def __init__(self, *args: Any, known: int = 0, **extra: Any) -> None:
        self.extra = extra


def _typed(options: Mapping[str, Any]) -> dict[str, Any]:
    return typed_options("local", factory, {"path": "/data", **options})


def _load(backend: str) -> Any:
    return registry().spec(backend).load()


# -- conversions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("false", False),
        ("TRUE", True),
        ("False", False),
        ("1", True),
        ("0", False),
        ("yes", True),
        ("no", False),
        ("on", True),
        ("off", False),
        (" true ", True),
    ],
)
def test_bool_words(text: str, expected: bool) -> None:
    assert _typed({"enabled": text})["enabled"] is expected


@pytest.mark.parametrize("text", ["maybe", "", "2", "t"])
def test_invalid_bool_names_the_option(text: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        _typed({"enabled": text})
    message = str(info.value)
    assert "'enabled'" in message
    assert "local backend" in message
    assert repr(text) in message
    assert "use true or false" in message


def test_int_and_float() -> None:
    typed = _typed({"count": "42", "ratio": "0.25"})
    assert typed["count"] == 42 and type(typed["count"]) is int
    assert typed["ratio"] == 0.25 and type(typed["ratio"]) is float


def test_float_takes_an_integer_text() -> None:
    assert _typed({"ratio": "3"})["ratio"] == 3.0


@pytest.mark.parametrize(("name", "text"), [("count", "1.5"), ("count", "ten"), ("ratio", "x")])
def test_invalid_number_names_the_option(name: str, text: str) -> None:
    with pytest.raises(ConfigurationError, match=rf"option '{name}'.*cannot take '{text}'"):
        _typed({name: text})


def test_json_object_for_a_dict() -> None:
    typed = _typed({"options": '{"a": 1, "b": {"c": [true, null]}}'})
    assert typed["options"] == {"a": 1, "b": {"c": [True, None]}}


def test_json_object_for_a_mapping() -> None:
    assert _typed({"mapping": '{"k": "v"}'})["mapping"] == {"k": "v"}


@pytest.mark.parametrize("text", ["{not json", "a=1", "[1, 2]", '"text"', "3"])
def test_dict_needs_a_json_object(text: str) -> None:
    with pytest.raises(ConfigurationError, match="option 'options'") as info:
        _typed({"options": text})
    assert repr(text) in str(info.value)


def test_json_array_for_a_dict_says_object_expected() -> None:
    with pytest.raises(ConfigurationError, match="expected a JSON object"):
        _typed({"options": '["a"]'})


@pytest.mark.parametrize("name", ["columns", "names", "pair"])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a,b", ["a", "b"]),
        (" a , b ,, c ", ["a", "b", "c"]),
        ("solo", ["solo"]),
        ('["a", "b"]', ["a", "b"]),
        ('  ["x,y", "z"]', ["x,y", "z"]),
        ("[]", []),
    ],
)
def test_lists_from_commas_or_a_json_array(name: str, text: str, expected: list[str]) -> None:
    assert _typed({name: text})[name] == expected


def test_empty_text_for_a_required_list_is_an_empty_list() -> None:
    assert _typed({"columns": ""})["columns"] == []


def test_invalid_json_array_for_a_list() -> None:
    with pytest.raises(ConfigurationError, match="option 'columns'"):
        _typed({"columns": '["a", '})


@pytest.mark.parametrize("text", ["null", "NULL", "None", "", "  "])
@pytest.mark.parametrize("name", ["options", "names", "label"])
def test_null_or_empty_for_an_optional_is_none(name: str, text: str) -> None:
    assert _typed({name: text})[name] is None


def test_null_for_a_required_str_stays_a_string() -> None:
    assert _typed({"plain": "null"})["plain"] == "null"
    assert typed_options("local", factory, {"path": ""}) == {"path": ""}


def test_strings_and_unannotated_stay_strings() -> None:
    typed = _typed({"plain": "42", "label": "true", "untyped": "1"})
    assert typed == {"path": "/data", "plain": "42", "label": "true", "untyped": "1"}


def test_typed_values_pass_through_unchanged() -> None:
    options = {"a": 1}
    columns = ("a", "b")
    typed = _typed(
        {"enabled": True, "count": 7, "ratio": 2, "options": options, "columns": columns}
    )
    assert typed["enabled"] is True
    assert typed["count"] == 7
    assert typed["ratio"] == 2 and type(typed["ratio"]) is int
    assert typed["options"] is options
    assert typed["columns"] is columns
    assert _typed({"label": None})["label"] is None


def test_only_given_options_are_returned() -> None:
    assert typed_options("local", factory, {"path": "/d"}) == {"path": "/d"}


def test_input_is_not_modified() -> None:
    options = {"path": "/d", "COUNT": "3"}
    assert typed_options("local", factory, options) == {"path": "/d", "count": 3}
    assert options == {"path": "/d", "COUNT": "3"}


# -- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["count", "COUNT", "Count", "cOuNt"])
def test_keys_match_case_insensitively(key: str) -> None:
    typed = _typed({key: "5"})
    assert typed["count"] == 5
    assert key == "count" or key not in typed


def test_unknown_option_lists_the_known_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        _typed({"colour": "red"})
    message = str(info.value)
    assert "the local backend has no option 'colour'" in message
    known = message.split("its options are: ", 1)[1]
    assert known.split(", ") == sorted(
        [
            "path",
            "enabled",
            "count",
            "ratio",
            "options",
            "mapping",
            "columns",
            "names",
            "pair",
            "label",
            "plain",
            "untyped",
        ]
    )


def test_missing_required_option() -> None:
    with pytest.raises(ConfigurationError, match=r"local backend needs the option\(s\) 'path'"):
        typed_options("local", factory, {"count": "1"})


def test_class_factory_uses_init() -> None:
    typed = typed_options("cls", ClassFactory, {"TABLE": "t", "create": "yes", "size": "3"})
    assert typed == {"table": "t", "create": True, "size": 3}
    with pytest.raises(ConfigurationError, match=r"its options are: create, size, table$"):
        typed_options("cls", ClassFactory, {"table": "t", "self": "x"})


def test_new_taking_anything_does_not_hide_init() -> None:
    assert typed_options("hiding", HidingNew, {"name": "n", "flag": "off"}) == {
        "name": "n",
        "flag": False,
    }
    with pytest.raises(ConfigurationError, match="has no option 'other'"):
        typed_options("hiding", HidingNew, {"name": "n", "other": "1"})
    with pytest.raises(ConfigurationError, match="needs the option"):
        typed_options("hiding", HidingNew, {})


def test_var_keyword_factory_takes_unknown_options_as_strings() -> None:
    typed = typed_options("open", OpenEnded, {"known": "4", "Anything": "1", "flag": "true"})
    assert typed == {"known": 4, "Anything": "1", "flag": "true"}


def test_var_keyword_function_needs_nothing() -> None:
    def anything(**options: Any) -> None:
        pass

    assert typed_options("fn", anything, {}) == {}
    assert typed_options("fn", anything, {"x": "1"}) == {"x": "1"}


# -- the first-party backends ----------------------------------------------------------------


def test_files_options(tmp_path: Any) -> None:
    typed = typed_options(
        "files",
        _load("files"),
        {
            "path": str(tmp_path),
            "format": "csv",
            "partition_by": "day,country",
            "target_file_size": "1048576",
            "storage_options": '{"auto_mkdir": true}',
            "write_options": "null",
        },
    )
    assert typed == {
        "path": str(tmp_path),
        "format": "csv",
        "partition_by": ["day", "country"],
        "target_file_size": 1048576,
        "storage_options": {"auto_mkdir": True},
        "write_options": None,
    }


def test_files_options_build_a_sink(tmp_path: Any) -> None:
    options = {"path": str(tmp_path), "PARTITION_BY": '["day"]', "target_file_size": "2097152"}
    sink = registry().create_sink("files", **typed_options("files", _load("files"), options))
    assert sink.partition_by == ("day",)  # type: ignore[attr-defined]
    assert sink.target_file_size == 2097152  # type: ignore[attr-defined]


@pytest.mark.parametrize("key", ["partition_by", "PARTITION_BY", "Partition_By"])
def test_files_keys_any_case(key: str) -> None:
    typed = typed_options("files", _load("files"), {"path": "/p", key: "a"})
    assert typed == {"path": "/p", "partition_by": ["a"]}


def test_files_without_path() -> None:
    with pytest.raises(ConfigurationError, match=r"files backend needs the option\(s\) 'path'"):
        typed_options("files", _load("files"), {"format": "parquet"})


def test_files_invalid_storage_options() -> None:
    for text in ("[1]", "{oops"):
        with pytest.raises(ConfigurationError, match="files backend's option 'storage_options'"):
            typed_options("files", _load("files"), {"path": "/p", "storage_options": text})


def test_files_unknown_option() -> None:
    with pytest.raises(ConfigurationError) as info:
        typed_options("files", _load("files"), {"path": "/p", "compression": "zstd"})
    assert str(info.value) == (
        "the files backend has no option 'compression'; its options are: batch_log, "
        "batch_log_scheme, check_schemas, commit_by, format, json_non_finite, partition_by, "
        "path, spark_options, storage_options, target_file_size, write_options, write_path"
    )


def test_postgres_options() -> None:
    typed = typed_options(
        "postgres",
        _load("postgres"),
        {
            "table": "orders",
            "key_columns": "id, region",
            "create_table": "true",
            "lock_timeout_seconds": "2.5",
            "connect_options": '{"sslmode": "require"}',
            "transaction_mode": "two_phase",
            "dsn": "",
            "order_column": "null",
        },
    )
    assert typed == {
        "table": "orders",
        "key_columns": ["id", "region"],
        "create_table": True,
        "lock_timeout_seconds": 2.5,
        "connect_options": {"sslmode": "require"},
        "transaction_mode": "two_phase",
        "dsn": None,
        "order_column": None,
    }


def test_postgres_class_new_does_not_hide_init() -> None:
    postgres = _load("postgres")
    assert any("__new__" in vars(c) for c in postgres.__mro__ if c is not object)
    with pytest.raises(ConfigurationError, match=r"needs the option\(s\) 'table'"):
        typed_options("postgres", postgres, {"create_table": "false"})


def test_postgres_camel_case_key_is_not_snake_case() -> None:
    with pytest.raises(ConfigurationError) as info:
        typed_options("postgres", _load("postgres"), {"table": "t", "keyColumns": "id"})
    message = str(info.value)
    assert "the postgres backend has no option 'keyColumns'" in message
    known = message.split("its options are: ", 1)[1].split(", ")
    assert "key_columns" in known
    assert "create_table" in known
    assert "table" in known
    assert known == sorted(known)


def test_postgres_invalid_bool() -> None:
    with pytest.raises(ConfigurationError, match=r"'create_table'.*cannot take 'sure'"):
        typed_options("postgres", _load("postgres"), {"table": "t", "create_table": "sure"})


def test_postgres_lower_cased_keys() -> None:
    typed = typed_options(
        "postgres", _load("postgres"), {"TABLE": "t", "LOCK_TIMEOUT_SECONDS": "1"}
    )
    assert typed == {"table": "t", "lock_timeout_seconds": 1.0}


def test_kafka_options() -> None:
    typed = typed_options(
        "kafka",
        _load("kafka"),
        {
            "bootstrap_servers": "broker:9092",
            "topic": "orders",
            "mode": "atomic",
            "transaction_timeout_ms": "30000",
            "producer_config": '{"linger.ms": 5, "acks": "all"}',
            "key_column": "null",
            "operation_timeout_seconds": "7",
        },
    )
    assert typed == {
        "bootstrap_servers": "broker:9092",
        "topic": "orders",
        "mode": "atomic",
        "transaction_timeout_ms": 30000,
        "producer_config": {"linger.ms": 5, "acks": "all"},
        "key_column": None,
        "operation_timeout_seconds": 7.0,
    }


def test_kafka_key_column_given() -> None:
    typed = typed_options("kafka", _load("kafka"), {"bootstrap_servers": "b", "key_column": "id"})
    assert typed["key_column"] == "id"


def test_kafka_needs_bootstrap_servers() -> None:
    with pytest.raises(ConfigurationError, match="'bootstrap_servers'"):
        typed_options("kafka", _load("kafka"), {"topic": "t"})


def test_kafka_invalid_values() -> None:
    kafka = _load("kafka")
    with pytest.raises(ConfigurationError, match="'transaction_timeout_ms'"):
        typed_options("kafka", kafka, {"bootstrap_servers": "b", "transaction_timeout_ms": "1m"})
    with pytest.raises(ConfigurationError, match="'producer_config'"):
        typed_options("kafka", kafka, {"bootstrap_servers": "b", "producer_config": "[]"})
