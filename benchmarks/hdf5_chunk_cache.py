"""What turning HDF5's chunk cache off costs the files written here (`offline_rl.core.files.atomic_hdf5`).

    python benchmarks/hdf5_chunk_cache.py [--frames 20000] [--repeats 15]

With the cache on, h5py crashes the process when the disk fills up (h5py issue #914), so every
HDF5 file is written with it off. This times the two writes that could feel it, on frames of
random-action Pong and on uniform noise (nothing compresses): a collection part (LZF, chunks of
whole ~1 MB frames, as `collection_journal` writes) and a buffer (gzip, h5py's own chunks, as
`save_buffer` writes an Atari collection). Writes alternate between the two ways; prints the
minimum and median of each, in seconds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from offline_rl.envs.atari import make_discrete_env


def pong_frames(count: int, seed: int = 0) -> np.ndarray:
    env = make_discrete_env("PongNoFrameskip-v4", 1)
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    frames = []
    for _ in range(count):
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        frames.append(np.asarray(obs).reshape(-1, *np.asarray(obs).shape[-2:])[-1])
        if terminated or truncated:
            env.reset()
    env.close()
    return np.stack(frames).astype(np.uint8)


def write_seconds(path: Path, data: np.ndarray, cache_bytes: int | None, compression: str, chunks) -> float:
    started = time.perf_counter()
    with h5py.File(path, "w", rdcc_nbytes=cache_bytes) as file:
        file.create_dataset("frames", data=data, compression=compression, chunks=chunks)
    seconds = time.perf_counter() - started
    path.unlink()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    pong = pong_frames(args.frames)
    noise = np.random.default_rng(1).integers(0, 256, size=pong.shape, dtype=np.uint8)
    whole_frames = (max(1, 2**20 // pong[0].nbytes), *pong.shape[1:])
    writes = {"part (LZF, whole-frame chunks)": ("lzf", whole_frames), "buffer (gzip, h5py's chunks)": ("gzip", True)}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "frames.hdf5"
        for frames_name, frames in (("Pong", pong), ("noise", noise)):
            for write_name, (compression, chunks) in writes.items():
                seconds: dict[str, list[float]] = {"cache on (h5py's default)": [], "cache off": []}
                for _ in range(args.repeats):
                    for label, cache_bytes in (("cache on (h5py's default)", None), ("cache off", 0)):
                        seconds[label].append(write_seconds(path, frames, cache_bytes, compression, chunks))
                figures = ", ".join(
                    f"{label} min {min(times):.3f} s, median {statistics.median(times):.3f} s"
                    for label, times in seconds.items()
                )
                print(f"{len(frames)} {frames_name} frames, {write_name}: {figures}")


if __name__ == "__main__":
    main()
