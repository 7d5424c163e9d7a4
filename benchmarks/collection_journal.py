"""What keeping a collection on disk as it goes costs (`--collect-checkpoint-every`), and reading it back.

    python benchmarks/collection_journal.py [--transitions 100000] [--part 50000] [--frames pong|noise]

Plays Pong with uniform random actions into a `FrameStackBufferBuilder` (one env, as each of
`atari_qrdqn.py --watch`'s envs records), timing the play; then writes the rows part by part with
`CollectionJournal.keep`, as the collection does every `--part` transitions, and reads every part
back into an empty builder as a continued collection does. The parts are LZF-compressed, so their
content matters: `--frames noise` replaces the frames with uniform noise, the worst case (nothing
compresses). Prints seconds per part, the share of the play time, bytes per transition on disk and
the restore time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from offline_rl.data.frame_stack import FrameStackBufferBuilder
from offline_rl.envs.atari import make_discrete_env
from offline_rl.runs.collection_journal import CollectionJournal


class PongPlayer:
    """Random-action Pong recorded into a builder, a chunk at a time."""

    def __init__(self, capacity: int, seed: int = 0) -> None:
        self.env = make_discrete_env("PongNoFrameskip-v4", 4)
        self.rng = np.random.default_rng(seed)
        self.builder = FrameStackBufferBuilder(max_frames=capacity + 2048)
        self.obs, _ = self.env.reset(seed=seed)

    def play(self, steps: int) -> None:
        for _ in range(steps):
            action = int(self.rng.integers(self.env.action_space.n))
            next_obs, reward, terminated, truncated, _ = self.env.step(action)
            self.builder.add(self.obs, action, float(reward), terminated, truncated, next_obs)
            self.obs = self.env.reset()[0] if terminated or truncated else next_obs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=100_000)
    parser.add_argument("--part", type=int, default=50_000, help="transitions per part (the default interval)")
    parser.add_argument("--frames", choices=("pong", "noise"), default="pong")
    parser.add_argument("--dir", default=None, help="where to write the parts (default: a temporary folder)")
    args = parser.parse_args()
    player, noise = PongPlayer(args.transitions), np.random.default_rng(1)
    play_s, keep_s = 0.0, []
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        directory = Path(folder) / "data.hdf5.parts"
        journal = CollectionJournal.open(directory, {}, [FrameStackBufferBuilder()])
        while len(player.builder) < args.transitions:
            frames_before = player.builder.position()[1]
            begun = time.perf_counter()
            player.play(min(args.part, args.transitions - len(player.builder)))
            play_s += time.perf_counter() - begun
            if args.frames == "noise":
                new = player.builder._frames[frames_before : player.builder.position()[1]]
                new[:] = noise.integers(0, 256, size=new.shape, dtype=np.uint8)
            begun = time.perf_counter()
            journal.keep([player.builder], [])
            keep_s.append(time.perf_counter() - begun)
        size = sum(path.stat().st_size for path in directory.iterdir())
        restored = FrameStackBufferBuilder(max_frames=args.transitions + 2048)  # as the collection sizes it
        begun = time.perf_counter()
        CollectionJournal.open(directory, {}, [restored])
        restore_s = time.perf_counter() - begun
    assert len(restored) == args.transitions
    rate = args.transitions / play_s
    print(f"play: {args.transitions} Pong transitions in {play_s:.1f} s ({rate:.0f} steps/s, 1 env, random actions)")
    print(
        f"keep ({args.frames} frames): {len(keep_s)} parts of {args.part}, {np.mean(keep_s):.2f} s each, "
        f"{sum(keep_s):.2f} s in all ({100 * sum(keep_s) / play_s:.1f}% of the play), "
        f"{size / args.transitions:.0f} bytes/transition on disk"
    )
    print(f"restore: {restore_s:.2f} s ({args.transitions / restore_s:.0f} transitions/s)")


if __name__ == "__main__":
    main()
