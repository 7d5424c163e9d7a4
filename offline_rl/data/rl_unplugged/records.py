"""RL Unplugged's Atari transition record, checked as TensorFlow's `parse_single_example` checks it.

DeepMind's reader (rl_unplugged/atari.py) parses every record with fixed-length features: `o_t` and
`o_tp1` are 4 PNG strings each (oldest frame first), `a_t`, `a_tp1` and `episode_id` one int64 each,
`r_t`, `d_t` and `episode_return` one float32 each. `d_t` is a discount: 0 at a true terminal.
`episode_id` is reinterpreted as uint64 (`tf.bitcast`), as DeepMind's reader does.
"""

from __future__ import annotations

from typing import NamedTuple

from offline_rl.data.rl_unplugged.example import ExampleError, Feature, FeatureKind, parse_example

STACK = 4
_SPEC: dict[str, tuple[FeatureKind, int]] = {
    "o_t": ("bytes", STACK),
    "o_tp1": ("bytes", STACK),
    "a_t": ("int64", 1),
    "a_tp1": ("int64", 1),
    "r_t": ("float", 1),
    "d_t": ("float", 1),
    "episode_id": ("int64", 1),
    "episode_return": ("float", 1),
}
_KIND_NAMES = {"bytes": "bytes (PNG strings)", "float": "float32", "int64": "int64"}
_UINT64_WRAP = 1 << 64


class RecordError(ValueError):
    """A record that does not hold one RL Unplugged transition."""


class RluTransition(NamedTuple):
    o_t: tuple[bytes, ...]
    o_tp1: tuple[bytes, ...]
    a_t: int
    a_tp1: int
    r_t: float
    d_t: float
    episode_id: int
    episode_return: float


def _values(features: dict[str, Feature], name: str) -> tuple:
    kind, count = _SPEC[name]
    feature = features.get(name)
    if feature is None:
        raise RecordError(f"missing feature '{name}'")
    if feature.kind != kind:
        found = "no value" if feature.kind is None else f"a {_KIND_NAMES[feature.kind]} list"
        raise RecordError(f"feature '{name}' holds {found}, expected {_KIND_NAMES[kind]}")
    if len(feature.values) != count:
        raise RecordError(f"feature '{name}' holds {len(feature.values)} values, expected {count}")
    return feature.values


def parse_transition(data: bytes) -> RluTransition:
    """The transition one serialized `tf.train.Example` holds; `RecordError` says what is wrong."""
    try:
        features = parse_example(data)
    except ExampleError as error:
        raise RecordError(f"not a tf.train.Example ({error})") from None
    episode_id = _values(features, "episode_id")[0]
    return RluTransition(
        o_t=_values(features, "o_t"),  # type: ignore[arg-type]
        o_tp1=_values(features, "o_tp1"),  # type: ignore[arg-type]
        a_t=_values(features, "a_t")[0],  # type: ignore[arg-type]
        a_tp1=_values(features, "a_tp1")[0],  # type: ignore[arg-type]
        r_t=_values(features, "r_t")[0],  # type: ignore[arg-type]
        d_t=_values(features, "d_t")[0],  # type: ignore[arg-type]
        episode_id=episode_id + _UINT64_WRAP if episode_id < 0 else episode_id,
        episode_return=_values(features, "episode_return")[0],  # type: ignore[arg-type]
    )
