"""Shards in RL Unplugged's exact format, written and read by TensorFlow itself (needs the `rlu` extra).

The tests and the benchmark cannot download real shards here, so they build them the way DeepMind's
files are built: every transition a `tf.train.Example` with DeepMind's feature names and types,
frames PNG-encoded, written by `tf.io.TFRecordWriter` with GZIP compression, records shuffled across
episodes. `read_shard_with_tensorflow` is DeepMind's own parsing (`parse_single_example` with their
feature spec, `decode_png(channels=1)`): the reference the TensorFlow-free reader must match.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

STACK = 4


@dataclass(frozen=True)
class Episode:
    """`frames[t]` is the screen after t steps (T + 1 frames for T steps); actions has T + 1 entries."""

    episode_id: int
    frames: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminal: bool

    @property
    def steps(self) -> int:
        return len(self.rewards)

    def stack(self, t: int) -> np.ndarray:
        """The (4, H, W) observation at step t; black frames before the first, as Dopamine's replay pads."""
        blank = np.zeros_like(self.frames[0])
        return np.stack([self.frames[i] if i >= 0 else blank for i in range(t - STACK + 1, t + 1)])


def encode_png(frame: np.ndarray, level: int = 3) -> bytes:
    ok, encoded = cv2.imencode(".png", frame, [cv2.IMWRITE_PNG_COMPRESSION, level])
    assert ok
    return encoded.tobytes()


def transition_fields(episode: Episode, t: int, png_cache: dict[bytes, bytes] | None = None) -> dict[str, Any]:
    """The features of step t of `episode`, with frames as PNG strings (oldest first)."""
    cache = {} if png_cache is None else png_cache

    def pngs(stack: np.ndarray) -> list[bytes]:
        out = []
        for frame in stack:
            key = frame.tobytes()
            if key not in cache:
                cache[key] = encode_png(frame)
            out.append(cache[key])
        return out

    last = t == episode.steps - 1
    return {
        "o_t": pngs(episode.stack(t)),
        "o_tp1": pngs(episode.stack(t + 1)),
        "a_t": int(episode.actions[t]),
        "a_tp1": int(episode.actions[t + 1]),
        "r_t": float(episode.rewards[t]),
        "d_t": 0.0 if (last and episode.terminal) else 1.0,
        "episode_id": int(episode.episode_id),
        "episode_return": float(np.clip(episode.rewards, -1, 1).sum()),
    }


def serialize(fields: dict[str, Any]) -> bytes:
    """One `tf.train.Example` in DeepMind's layout, serialized by TensorFlow's protobuf classes."""
    import tensorflow as tf  # heavy (TensorFlow): loaded only when used

    def feature(name: str, value: Any) -> tf.train.Feature:
        if name in ("o_t", "o_tp1"):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=value))
        if name in ("a_t", "a_tp1", "episode_id"):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(float_list=tf.train.FloatList(value=[value]))

    features = {name: feature(name, value) for name, value in fields.items()}
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_shard(path: str | os.PathLike[str], payloads: Iterable[bytes]) -> int:
    """Write serialized records with TensorFlow's GZIP TFRecordWriter; returns how many."""
    import tensorflow as tf  # heavy (TensorFlow): loaded only when used

    count = 0
    with tf.io.TFRecordWriter(str(path), options=tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
        for payload in payloads:
            writer.write(payload)
            count += 1
    return count


def shuffled_records(episodes: list[Episode], seed: int = 0) -> list[dict[str, Any]]:
    """Every transition of `episodes`, interleaved in a random order as in a real shard."""
    cache: dict[bytes, bytes] = {}
    fields = [transition_fields(e, t, cache) for e in episodes for t in range(e.steps)]
    order = np.random.default_rng(seed).permutation(len(fields))
    return [fields[i] for i in order]


def random_episode(rng: np.random.Generator, episode_id: int, steps: int, terminal: bool, shape=(84, 84)) -> Episode:
    """An episode of random-looking but compressible frames (a moving bar over noise-free bands)."""
    frames = np.empty((steps + 1, *shape), dtype=np.uint8)
    base = rng.integers(0, 200, size=(shape[0], 1), dtype=np.uint8)
    for t in range(steps + 1):
        frame = np.repeat(base, shape[1], axis=1)
        column = (3 * t + episode_id) % shape[1]
        frame[:, column : column + 4] = 255
        frame[(t * 7) % shape[0], :] = rng.integers(0, 256, dtype=np.uint8)
        frames[t] = frame
    return Episode(
        episode_id=episode_id,
        frames=frames,
        actions=rng.integers(0, 6, size=steps + 1),
        rewards=rng.choice(np.array([-1.0, 0.0, 0.0, 1.0], dtype=np.float32), size=steps),
        terminal=terminal,
    )


def read_shard_with_tensorflow(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """DeepMind's parsing of every record: (4, H, W) uint8 stacks and the scalar features as numpy values."""
    import tensorflow as tf  # heavy (TensorFlow): loaded only when used

    spec = {
        "o_t": tf.io.FixedLenFeature([STACK], tf.string),
        "o_tp1": tf.io.FixedLenFeature([STACK], tf.string),
        "a_t": tf.io.FixedLenFeature([], tf.int64),
        "a_tp1": tf.io.FixedLenFeature([], tf.int64),
        "r_t": tf.io.FixedLenFeature([], tf.float32),
        "d_t": tf.io.FixedLenFeature([], tf.float32),
        "episode_id": tf.io.FixedLenFeature([], tf.int64),
        "episode_return": tf.io.FixedLenFeature([], tf.float32),
    }
    for serialized in tf.data.TFRecordDataset(str(path), compression_type="GZIP"):
        data = tf.io.parse_single_example(serialized, spec)
        record = {key: data[key].numpy() for key in spec if key not in ("o_t", "o_tp1")}
        record["episode_id"] = np.uint64(tf.bitcast(data["episode_id"], tf.uint64).numpy())
        for key in ("o_t", "o_tp1"):
            record[key] = np.stack([tf.io.decode_png(data[key][i], channels=1).numpy()[..., 0] for i in range(STACK)])
        yield record
