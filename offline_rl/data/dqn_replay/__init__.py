"""DQN Replay checkpoints (Dopamine replays: the CQL paper's Atari data) into replay buffers.

Read without TensorFlow or Dopamine: `npy_stream` (the gzip-compressed arrays, a block at a time),
`slots` (which slots Dopamine samples, in playing order), `converter` (one checkpoint, streaming),
`sources` (games, file names, URLs, folders); the command line is `offline_rl.cli.convert_dqn_replay`.
`testing` writes checkpoints as Dopamine's replay does, for the tests and the benchmark.
"""

from offline_rl.core.lazy import lazy_exports

# imported on first use: writing buffers needs torch and Tianshou (seconds to import), and the command
# line's `--help`, flag errors and game names need neither
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CheckpointSummary": "offline_rl.data.dqn_replay.converter",
        "convert_checkpoint": "offline_rl.data.dqn_replay.converter",
        "sampled_slots": "offline_rl.data.dqn_replay.slots",
    },
)

__all__ = ["CheckpointSummary", "convert_checkpoint", "sampled_slots"]
