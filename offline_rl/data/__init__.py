"""Offline datasets as Tianshou replay buffers: D4RL, Minari, Tianshou HDF5, d3rlpy, RL Unplugged, local collection.

Every loader returns a `tianshou.data.ReplayBuffer` whose episode ends are exact: `terminated`
stops bootstrapping, `truncated` (a time-out or the end of the data) does not, and no transition's
`obs_next` belongs to another episode.
"""

from offline_rl.core.lazy import lazy_exports

# Each name is imported on first use from its module: most loaders need torch and Tianshou (seconds to
# import), and a command's `--help`, its flag errors and the modules here that need neither (collection
# journals, file locks) should not wait for them.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "DatasetStats": "offline_rl.data.stats",
        "FramePoolBuffer": "offline_rl.data.frame_pool",
        "FrameStackBuffer": "offline_rl.data.frame_stack",
        "FrameStackBufferBuilder": "offline_rl.data.frame_stack",
        "MissingTimeoutsWarning": "offline_rl.data.d4rl",
        "action_units_of": "offline_rl.data.action_units",
        "d4rl_path": "offline_rl.data.d4rl",
        "d4rl_url": "offline_rl.data.d4rl",
        "dataset_info": "offline_rl.data.transitions",
        "dataset_stats": "offline_rl.data.stats",
        "detect_format": "offline_rl.data.detect",
        "load_buffer": "offline_rl.data.buffers",
        "load_buffers": "offline_rl.data.buffers",
        "load_d3rlpy": "offline_rl.data.d3rlpy",
        "load_d4rl": "offline_rl.data.d4rl",
        "load_dataset": "offline_rl.data.detect",
        "load_minari": "offline_rl.data.minari",
        "load_minari_atari": "offline_rl.data.minari_atari",
        "save_buffer": "offline_rl.data.buffers",
        "set_action_units": "offline_rl.data.action_units",
    },
)

__all__ = [
    "DatasetStats",
    "FramePoolBuffer",
    "FrameStackBuffer",
    "FrameStackBufferBuilder",
    "MissingTimeoutsWarning",
    "action_units_of",
    "d4rl_path",
    "d4rl_url",
    "dataset_info",
    "dataset_stats",
    "detect_format",
    "load_buffer",
    "load_buffers",
    "load_d3rlpy",
    "load_d4rl",
    "load_dataset",
    "load_minari",
    "load_minari_atari",
    "save_buffer",
    "set_action_units",
]
