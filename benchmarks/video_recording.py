"""Filming an episode: offline_rl's `EpisodeVideo` (`--save-video`) against gymnasium's own
`RecordVideo`, on the same env, seed and actions.

    python benchmarks/video_recording.py [--task HalfCheetah-v4] [--steps 1000]

Each films one episode of `--steps` random actions (the env's time limit set to it), in a process of
its own, and reports its wall time, how far the process's resident memory rose above where it was
before the episode (its peak, `ru_maxrss`, against its size then), and the size of the file. A first
row renders the same frames and keeps none, so that the cost of drawing them (the same for both) is
apart from the cost of keeping and encoding them. `RecordVideo` needs moviepy, which is not a
dependency of offline_rl (`pip install moviepy`); without it, its row says so. MuJoCo renders off
screen through EGL where there is no display, as `--save-video` does.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym


def make_filmed_env(task: str, steps: int) -> gym.Env:
    from offline_rl.envs.atari import is_atari_game, make_atari_env
    from offline_rl.envs.make import make_env

    env = (
        make_atari_env(task, render_mode="rgb_array")
        if is_atari_game(task)
        else make_env(task, render_mode="rgb_array")
    )
    return gym.wrappers.TimeLimit(env, steps)


def play(env: gym.Env, seed: int) -> int:
    """One episode with actions drawn from `seed`; its steps."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        done = terminated or truncated
    return steps


class RenderOnly(gym.Wrapper):
    """Draws every frame a filming wrapper would, and keeps none."""

    def reset(self, **kwargs: Any) -> Any:
        result = self.env.reset(**kwargs)
        self.env.render()
        return result

    def step(self, action: Any) -> Any:
        result = self.env.step(action)
        self.env.render()
        return result


def resident_mb() -> float:
    """This process's resident memory now (MB)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def measured(film: Callable[[gym.Env, Path], gym.Env], task: str, steps: int, seed: int) -> dict[str, float]:
    """Wall seconds, rise of resident memory (MB) and file size (MB) of filming one episode with `film`."""
    with tempfile.TemporaryDirectory() as folder:
        env = film(make_filmed_env(task, steps), Path(folder))
        before = resident_mb()
        start = time.perf_counter()
        played = play(env, seed)
        env.close()  # RecordVideo writes its file when the next episode starts or at close
        seconds = time.perf_counter() - start
        rise = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3 - before  # ru_maxrss: kB on Linux
        files = list(Path(folder).rglob("*.mp4"))
        size = sum(path.stat().st_size for path in files)
    return {"steps": played, "seconds": seconds, "rise_mb": max(rise, 0.0), "file_mb": size / 1e6, "files": len(files)}


def gymnasium_record_video(env: gym.Env, folder: Path) -> gym.Env:
    return gym.wrappers.RecordVideo(env, str(folder), episode_trigger=lambda _: True, disable_logger=True)


def offline_rl_episode_video(env: gym.Env, folder: Path) -> gym.Env:
    from offline_rl.runs.video import VideoFolder

    return VideoFolder(folder, "episode").wrap(env)


ROWS: dict[str, Callable[[gym.Env, Path], gym.Env]] = {
    "render only (no file)": lambda env, _: RenderOnly(env),
    "offline_rl EpisodeVideo": offline_rl_episode_video,
    "gymnasium RecordVideo": gymnasium_record_video,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="HalfCheetah-v4")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--row", choices=list(ROWS), help=argparse.SUPPRESS)  # one row, in this process
    args = parser.parse_args()
    if args.row:
        from offline_rl.runs.video import prepare_offscreen_rendering

        prepare_offscreen_rendering()
        try:
            print(json.dumps(measured(ROWS[args.row], args.task, args.steps, args.seed)))
        except gym.error.DependencyNotInstalled as error:
            print(json.dumps({"skipped": str(error)}))
        return
    print(f"{args.task}: one episode of {args.steps} steps, filmed; seed {args.seed}")
    for name in ROWS:
        command = [sys.executable, __file__, "--row", name, "--task", args.task, "--steps", str(args.steps)]
        done = subprocess.run([*command, "--seed", str(args.seed)], capture_output=True, text=True, check=True)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        if "skipped" in result:
            print(f"{name:26s} skipped: {result['skipped']}")
            continue
        frames = result["steps"] + 1
        print(
            f"{name:26s} {result['seconds']:7.1f} s ({1e3 * result['seconds'] / frames:5.1f} ms/frame), "
            f"resident memory +{result['rise_mb']:6.0f} MB, {int(result['files'])} file(s) of "
            f"{result['file_mb']:.2f} MB"
        )


if __name__ == "__main__":
    main()
