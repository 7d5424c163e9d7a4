"""RL Unplugged Atari shards (gzip TFRecord of `tf.train.Example` transitions) into replay buffers.

Read without TensorFlow: `tfrecord` (framing and checksums), `example` (the proto), `records` (the
transition schema), `frames` (PNG decoding and frame deduplication), `chains` (episode order),
`shard_converter` (one shard, streaming), `parallel` (several), `sources` (names, URLs, folders); the
command line is `offline_rl.apps.rl_unplugged_conversion`.
`testing` writes and reads shards with TensorFlow itself, for the tests and the benchmark.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ShardError", "ShardSummary", "convert_shard"]


def __getattr__(name: str) -> Any:
    """The converter's names, imported on first use: writing buffers needs torch and Tianshou (seconds to
    import), and the command line's `--help`, flag errors and shard names need neither."""
    if name in __all__:
        from offline_rl.rl_unplugged import shard_converter

        return getattr(shard_converter, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
