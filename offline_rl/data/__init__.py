"""Offline datasets as Tianshou replay buffers: D4RL, Minari, Tianshou HDF5, d3rlpy, RL Unplugged, local collection.

Every loader returns a `tianshou.data.ReplayBuffer` whose episode ends are exact: `terminated`
stops bootstrapping, `truncated` (a time-out or the end of the data) does not, and no transition's
`obs_next` belongs to another episode.
"""

from offline_rl.data.action_units import action_units_of, set_action_units
from offline_rl.data.buffers import load_buffer, load_buffers, save_buffer
from offline_rl.data.d3rlpy import load_d3rlpy
from offline_rl.data.d4rl import MissingTimeoutsWarning, d4rl_path, d4rl_url, load_d4rl
from offline_rl.data.detect import detect_format, load_dataset
from offline_rl.data.frame_pool import FramePoolBuffer
from offline_rl.data.frame_stack import FrameStackBuffer, FrameStackBufferBuilder
from offline_rl.data.minari import load_minari
from offline_rl.data.stats import DatasetStats, dataset_stats
from offline_rl.data.transitions import dataset_info

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
    "save_buffer",
    "set_action_units",
]
