"""Register TensorFlow-named copies of the schema in the default descriptor pool.

The suite needs no TensorFlow, but it must show that TensorFlow's message objects are accepted and
that both schemas live in one process. TensorFlow registers its files as
``tensorflow/core/protobuf/tpu/*.proto`` in package ``tensorflow.tpu`` (and
``xla/service/hlo.proto`` in package ``xla``); this module registers the same messages under
those names and returns the message classes, which is what importing TensorFlow would give.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tpuemb_cfg.proto import hlo_pb2, optimization_parameters_pb2, tpu_embedding_configuration_pb2

RENAMES = {
    "tpuemb_cfg/proto/hlo.proto": ("xla/service/hlo.proto", "xla"),
    "tpuemb_cfg/proto/optimization_parameters.proto": (
        "tensorflow/core/protobuf/tpu/optimization_parameters.proto", "tensorflow.tpu"),
    "tpuemb_cfg/proto/tpu_embedding_configuration.proto": (
        "tensorflow/core/protobuf/tpu/tpu_embedding_configuration.proto", "tensorflow.tpu"),
}
PACKAGES = {"tpuemb_cfg.proto.xla": "xla", "tpuemb_cfg.proto": "tensorflow.tpu"}


def _rename_type(name: str) -> str:
    for ours, theirs in PACKAGES.items():  # longest package first
        if name.startswith("." + ours + "."):
            return "." + theirs + name[len(ours) + 1:]
    return name


def _fix_messages(messages: Any) -> None:
    for message in messages:
        for field in message.field:
            if field.type_name:
                field.type_name = _rename_type(field.type_name)
        _fix_messages(message.nested_type)


def register(pool: descriptor_pool.DescriptorPool | None = None) -> dict[str, Any]:
    """Add the TensorFlow-named files to ``pool`` (default pool); return message classes by name."""
    pool = pool or descriptor_pool.Default()
    classes: dict[str, Any] = {}
    for module in (hlo_pb2, optimization_parameters_pb2, tpu_embedding_configuration_pb2):
        proto = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        proto.name, proto.package = RENAMES[proto.name]
        proto.dependency[:] = [RENAMES.get(d, (d,))[0] for d in proto.dependency]
        _fix_messages(proto.message_type)
        try:
            file = pool.FindFileByName(proto.name)
        except KeyError:
            file = pool.Add(proto) or pool.FindFileByName(proto.name)
        for name, desc in file.message_types_by_name.items():
            classes[name] = message_factory.GetMessageClass(desc)
    return classes
