"""Parse serialized `tf.train.Example` protos without TensorFlow or generated protobuf code.

The schema is tiny and frozen (example.proto / feature.proto):

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }      // map entry: key = 1, value = 2
    Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed]; }
    Int64List { repeated int64 value = 1 [packed]; }

so the wire format is decoded by hand. Where TensorFlow's own (fast) Example parser departs from
generic protobuf rules, this follows TensorFlow, and the tests compare the two case by case: fields
in any order, packed and unpacked numbers, a repeated map key replaced by its last entry, `features`
given twice merged, unknown fields skipped in `Example` and `Feature` but refused in `Features`, map
entries and value lists, and only the first value list of a `Feature` read.
"""

from __future__ import annotations

import struct
from typing import Literal, NamedTuple

FeatureKind = Literal["bytes", "float", "int64"]

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_UINT64_SIGN = 1 << 63
_UINT64_WRAP = 1 << 64


class ExampleError(ValueError):
    """The bytes are not a well-formed `tf.train.Example`."""


class Feature(NamedTuple):
    """One feature's values; `kind` is None for a feature with no list set (TensorFlow: an empty feature)."""

    kind: FeatureKind | None
    values: tuple[bytes, ...] | tuple[float, ...] | tuple[int, ...]


_NO_VALUES = Feature(None, ())


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            # A tenth byte carries bits past the 64th, which protobuf's decoders (TensorFlow's among them)
            # drop: an int64 is its low 64 bits, never a number outside int64.
            return result & (_UINT64_WRAP - 1), pos
        shift += 7
        if shift > 63:
            raise ExampleError("a varint is longer than 10 bytes")


def _span(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(start, stop) of the length-delimited payload whose length varint is at `pos`."""
    size = buf[pos]
    if size < 0x80:
        start = pos + 1
    else:
        size, start = _varint(buf, pos)
    stop = start + size
    if stop > end:
        raise ExampleError("a length-delimited field runs past its message")
    return start, stop


def _skip(buf: bytes, pos: int, wire_type: int, end: int) -> int:
    if wire_type == _VARINT:
        return _varint(buf, pos)[1]
    if wire_type == _FIXED64:
        return pos + 8
    if wire_type == _FIXED32:
        return pos + 4
    if wire_type == _LENGTH:
        return _span(buf, pos, end)[1]
    raise ExampleError(f"unsupported wire type {wire_type}")


def _signed(value: int) -> int:
    return value - _UINT64_WRAP if value >= _UINT64_SIGN else value


# Tags (field number << 3 | wire type) as single bytes, for the fields this schema has.
_TAG_1_LENGTH, _TAG_2_LENGTH, _TAG_3_LENGTH = 0x0A, 0x12, 0x1A
_TAG_1_VARINT, _TAG_1_FIXED32 = 0x08, 0x0D


def _bytes_list(buf: bytes, pos: int, end: int) -> tuple[bytes, ...]:
    values = []
    while pos < end:
        if buf[pos] != _TAG_1_LENGTH:
            raise ExampleError(f"a bytes list holds an unexpected field (tag {buf[pos]})")
        start, pos = _span(buf, pos + 1, end)
        values.append(buf[start:pos])
    return tuple(values)


def _float_list(buf: bytes, pos: int, end: int) -> tuple[float, ...]:
    values: list[float] = []
    while pos < end:
        tag = buf[pos]
        if tag == _TAG_1_LENGTH:
            start, pos = _span(buf, pos + 1, end)
            if (pos - start) % 4:
                raise ExampleError("a packed float list's length is not a multiple of 4")
            values.extend(struct.unpack_from(f"<{(pos - start) // 4}f", buf, start))
        elif tag == _TAG_1_FIXED32:
            if pos + 5 > end:
                raise ExampleError("a float runs past its list")
            values.append(struct.unpack_from("<f", buf, pos + 1)[0])
            pos += 5
        else:
            raise ExampleError(f"a float list holds an unexpected field (tag {tag})")
    return tuple(values)


def _int64_list(buf: bytes, pos: int, end: int) -> tuple[int, ...]:
    values: list[int] = []
    while pos < end:
        tag = buf[pos]
        if tag == _TAG_1_LENGTH:
            start, pos = _span(buf, pos + 1, end)
            while start < pos:
                byte = buf[start]
                if byte < 0x80:
                    values.append(byte)
                    start += 1
                else:
                    value, start = _varint(buf, start)
                    values.append(_signed(value))
            if start != pos:
                raise ExampleError("a packed int64 list ends inside a value")
        elif tag == _TAG_1_VARINT:
            value, pos = _varint(buf, pos + 1)
            values.append(_signed(value))
        else:
            raise ExampleError(f"an int64 list holds an unexpected field (tag {tag})")
    if pos != end:
        raise ExampleError("an int64 runs past its list")
    return tuple(values)


_LIST_READERS = {
    _TAG_1_LENGTH: ("bytes", _bytes_list),
    _TAG_2_LENGTH: ("float", _float_list),
    _TAG_3_LENGTH: ("int64", _int64_list),
}


def _parse_feature(buf: bytes, pos: int, end: int) -> Feature:
    feature = _NO_VALUES
    while pos < end:
        reader = _LIST_READERS.get(buf[pos])
        if reader is not None:
            start, pos = _span(buf, pos + 1, end)
            if feature.kind is None:  # TensorFlow reads the first list and ignores any later one
                kind, read = reader
                feature = Feature(kind, read(buf, start, pos))  # type: ignore[arg-type]
        else:
            key, pos = _varint(buf, pos)
            pos = _skip(buf, pos, key & 7, end)
    if pos != end:
        raise ExampleError("a field runs past its feature")
    return feature


def _parse_map_entry(buf: bytes, pos: int, end: int) -> tuple[str, Feature]:
    name = ""
    feature = _NO_VALUES
    while pos < end:
        tag = buf[pos]
        if tag == _TAG_1_LENGTH:
            start, pos = _span(buf, pos + 1, end)
            try:
                name = buf[start:pos].decode("utf-8")
            except UnicodeDecodeError:
                raise ExampleError("a feature name is not valid UTF-8") from None
        elif tag == _TAG_2_LENGTH:
            start, pos = _span(buf, pos + 1, end)
            feature = _parse_feature(buf, start, pos)
        else:
            raise ExampleError(f"a feature map entry holds an unexpected field (tag {tag})")
    return name, feature


def parse_example(buf: bytes) -> dict[str, Feature]:
    """The features of one serialized `tf.train.Example`, by name."""
    features: dict[str, Feature] = {}
    end = len(buf)
    pos = 0
    try:
        while pos < end:
            if buf[pos] == _TAG_1_LENGTH:
                start, pos = _span(buf, pos + 1, end)
                while start < pos:
                    if buf[start] != _TAG_1_LENGTH:
                        raise ExampleError(f"the feature map holds an unexpected field (tag {buf[start]})")
                    entry_start, start = _span(buf, start + 1, pos)
                    name, feature = _parse_map_entry(buf, entry_start, start)
                    features[name] = feature
            else:
                key, pos = _varint(buf, pos)
                pos = _skip(buf, pos, key & 7, end)
        if pos != end:
            raise ExampleError("the message ends inside a field")
    except (IndexError, struct.error):
        raise ExampleError("the message ends inside a field") from None
    return features
