"""RL Unplugged Atari shards (gzip TFRecord of `tf.train.Example` transitions) into replay buffers.

Read without TensorFlow: `tfrecord` (framing and checksums), `example` (the proto), `records` (the
transition schema), `frames` (PNG decoding and frame deduplication), `chains` (episode order),
`shard_converter` (one shard, streaming), `parallel` (several), `sources` (names, URLs, folders); the
command line is `offline_rl.cli.convert_rl_unplugged`.
`testing` writes and reads shards with TensorFlow itself, for the tests and the benchmark.
"""

from offline_rl.core.lazy import lazy_exports

# imported on first use: writing buffers needs torch and Tianshou (seconds to import), and the command
# line's `--help`, flag errors and shard names need neither
__getattr__, __dir__ = lazy_exports(
    __name__,
    {name: "offline_rl.data.rl_unplugged.shard_converter" for name in ("ShardError", "ShardSummary", "convert_shard")},
)

__all__ = ["ShardError", "ShardSummary", "convert_shard"]
