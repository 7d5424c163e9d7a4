"""RL Unplugged Atari shards (gzip TFRecord of `tf.train.Example` transitions) into replay buffers.

Read without TensorFlow: `tfrecord` (framing and checksums), `example` (the proto), `records` (the
transition schema), `frames` (PNG decoding and frame deduplication), `chains` (episode order),
`shard_converter` (one shard, streaming), `parallel` (several), `sources` (names, URLs, folders); the
command line is `offline_rl.apps.rl_unplugged_conversion`.
`testing` writes and reads shards with TensorFlow itself, for the tests and the benchmark.
"""

from offline_rl.rl_unplugged.shard_converter import ShardError, ShardSummary, convert_shard

__all__ = ["ShardError", "ShardSummary", "convert_shard"]
