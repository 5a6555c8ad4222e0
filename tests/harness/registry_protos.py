"""A Protobuf message class built at runtime, for the schema-registry tests (no ``protoc``).

The sink imports it by name (``value_schema="tests.harness.registry_protos:Order"``)
in each task, like a ``*_pb2`` module a user would generate. It is built from a
``FileDescriptorProto`` in a private descriptor pool, so importing this module twice (or
next to another test's descriptors) does not clash in the default pool.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_FIELD = descriptor_pb2.FieldDescriptorProto


def _order_file() -> descriptor_pb2.FileDescriptorProto:
    """``twopc/test/order.proto``: ``message Order {int64 id; string name; double amount}``."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="twopc/test/order.proto", package="twopc.test", syntax="proto3"
    )
    order = proto.message_type.add(name="Order")
    for number, (name, kind) in enumerate(
        [("id", _FIELD.TYPE_INT64), ("name", _FIELD.TYPE_STRING), ("amount", _FIELD.TYPE_DOUBLE)],
        start=1,
    ):
        order.field.add(name=name, number=number, type=kind, label=_FIELD.LABEL_OPTIONAL)
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_order_file())
Order = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("twopc.test.Order"))
