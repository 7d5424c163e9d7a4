"""What saving the online trainer's replay beside each checkpoint costs, and restoring it on resume.

    python benchmarks/online_replay_checkpoint.py [--transitions 200000] [--envs 10] [--dir /tmp]

An Atari-shaped replay as `examples/atari_qrdqn.py` keeps it (one 84×84 uint8 frame stored per
step, stacks of 4 rebuilt at sampling, `--training-num` envs) is filled with random frames (the
file is not compressed, so their content does not change the figures), saved with
`save_replay` and restored into an empty replay with `restore_replay`. Prints seconds, MB/s, the
file's bytes per transition and the process's peak resident memory; a full 1M-transition replay
scales from these (7 GB of frames).
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
from tianshou.data import Batch

from offline_rl.data.online_replay import NullCheckedVectorReplayBuffer, restore_replay, save_replay


def atari_replay(transitions: int, envs: int) -> NullCheckedVectorReplayBuffer:
    return NullCheckedVectorReplayBuffer(
        transitions, buffer_num=envs, ignore_obs_next=True, save_only_last_obs=True, stack_num=4
    )


def fill(replay: NullCheckedVectorReplayBuffer, transitions: int, envs: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 255, size=(4096, envs, 1, 84, 84), dtype=np.uint8)  # reused: filling is not timed
    for step in range(transitions // envs):
        ends = rng.random(envs) < 1 / 2000  # Pong-length episodes
        replay.add(
            Batch(
                obs=frames[step % len(frames)],
                act=rng.integers(0, 6, size=envs),
                rew=np.zeros(envs),
                terminated=ends,
                truncated=np.zeros(envs, dtype=bool),
                info=Batch(),
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=200_000)
    parser.add_argument("--envs", type=int, default=10)
    parser.add_argument("--dir", default=None, help="where to write the file (default: a temporary folder)")
    args = parser.parse_args()
    replay = atari_replay(args.transitions, args.envs)
    fill(replay, args.transitions, args.envs)
    frames_mb = args.transitions * 84 * 84 / 1e6
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = Path(folder) / "replay.hdf5"
        start = time.perf_counter()
        save_replay(replay, path)
        saved_s = time.perf_counter() - start
        size = path.stat().st_size
        del replay
        restored = atari_replay(args.transitions, args.envs)
        start = time.perf_counter()
        reason = restore_replay(restored, path)
        restored_s = time.perf_counter() - start
    assert reason is None and len(restored) == args.transitions, reason
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"replay: {args.transitions} transitions in {args.envs} envs, {frames_mb:.0f} MB of frames")
    per_transition = size / args.transitions
    print(f"save:    {saved_s:.2f} s ({frames_mb / saved_s:.0f} MB/s), file {per_transition:.0f} bytes/transition")
    print(f"restore: {restored_s:.2f} s ({args.transitions / restored_s:.0f} transitions/s)")
    print(f"peak resident memory: {peak_gb:.2f} GB")


if __name__ == "__main__":
    main()
