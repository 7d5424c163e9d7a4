"""DQN Replay checkpoint conversion: offline_rl's streaming converter against loading whole arrays.

    python benchmarks/dqn_replay_convert.py [--slots 100000] [--game Pong] [--fraction 0.01] [--tile-to 1000000]
        [--checkpoints 6 [--workers W] [--mirror-mb-per-s 5]]

The checkpoint is built as Dopamine builds one: real Atari screens (random-policy games through
gymnasium's `AtariPreprocessing`, 84x84 grayscale) added step by step to a Dopamine-style replay
(zero padding before each episode, wrapped around once so its oldest slot is mid-array) and saved
as Dopamine saves it (`np.save` inside `gzip.GzipFile`). It is cached under benchmarks/.cache/.
`--tile-to N` then times a checkpoint of N slots (a real one has 1M) made of that one's slots
repeated, written at gzip level 1 (minutes, not the hour of playing N steps; it is removed after).

Baseline: what d4rl-atari (d3rlpy's `get_atari`/`get_atari_transitions`) does with a checkpoint:
`np.load` of each gzip-compressed array, whole, before anything is picked from it. Ours:
`convert_checkpoint` to a buffer file, whole and with `--fraction`. Each runs in a fresh process
that reports its seconds and how far its peak RSS rose above
what the imports had taken (both after the imports). A real checkpoint holds 1M slots (7 GB of frames
inflated), so the peak is what decides whether a machine can convert one at all; both scale with
the slots read. The last line is `peak_rss_ratio_vs_whole_arrays: X.X`.

`--checkpoints N` also times the converter command over N checkpoints (the cached one linked under N
numbers) with `--workers 1` and with `--workers W` (default: one per core), as a run's 51 are
converted; it prints `parallel_speedup: X.X` (conversion seconds, from the command's total line).
With `--mirror-mb-per-s R` it then serves them from a local mirror whose connections share one link
of R MB/s, and times getting every buffer from nothing on disk two ways: downloading each file in turn
and then converting, and the converter as it is, which
downloads in checkpoint order while its workers convert the checkpoints already fetched; it prints
`download_overlap_speedup: X.X`.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

import numpy as np

from offline_rl.core.resources import available_cores
from offline_rl.data.dqn_replay.testing import DopamineReplay

CACHE = Path(__file__).resolve().parent / ".cache"
CHECKPOINT = 0


def build_checkpoint(folder: Path, game: str, slots: int, seed: int = 0) -> None:
    """Random-policy games of `game` into a replay of `slots` slots, played until it has wrapped once."""
    import ale_py
    import gymnasium as gym

    from offline_rl.envs.atari import make_atari_env

    gym.register_envs(ale_py)
    env = make_atari_env(f"{game}NoFrameskip-v4", 1)
    rng = np.random.default_rng(seed)
    replay = DopamineReplay(slots)
    target = slots + slots // 3
    while int(replay.add_count) < target:
        obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
        frame = obs[-1]
        for _ in range(2000):
            action = int(rng.integers(env.action_space.n))
            obs, reward, terminated, truncated, _ = env.step(action)
            ends = bool(terminated or truncated) or int(replay.add_count) + 1 >= target
            replay.add(frame, action, float(np.clip(reward, -1, 1)), bool(terminated))
            frame = obs[-1]
            if ends:
                break
    env.close()
    replay.save(folder, CHECKPOINT)


def tiled_checkpoint(source: Path, folder: Path, slots: int) -> None:
    """A checkpoint of `slots` slots: the source's arrays repeated, its add count past a full replay."""
    import gzip

    from offline_rl.data.dqn_replay.npy_stream import read_npy
    from offline_rl.data.dqn_replay.sources import array_file

    folder.mkdir(parents=True, exist_ok=True)

    def save(name: str, array: np.ndarray) -> None:
        with open(folder / array_file(name, CHECKPOINT), "wb") as file, gzip.GzipFile(fileobj=file, mode="wb") as out:
            np.save(out, array, allow_pickle=False)

    for name in ("action", "reward", "terminal"):
        save(name, np.resize(read_npy(source / array_file(name, CHECKPOINT)), slots))
    save("add_count", np.array(slots + slots // 3))
    frames = read_npy(source / array_file("observation", CHECKPOINT))
    path = folder / array_file("observation", CHECKPOINT)
    with open(path, "wb") as file, gzip.GzipFile(fileobj=file, mode="wb", compresslevel=1) as out:
        header = {"descr": np.lib.format.dtype_to_descr(frames.dtype), "fortran_order": False}
        np.lib.format.write_array_header_1_0(out, {**header, "shape": (slots, *frames.shape[1:])})
        written = 0
        while written < slots:
            part = frames[: slots - written]
            out.write(part.tobytes())
            written += len(part)


MEASURE = r"""
import gzip, json, resource, sys, time
from pathlib import Path
import numpy as np
from offline_rl.data.dqn_replay import convert_checkpoint
from offline_rl.data.dqn_replay.sources import array_file
folder, mode, fraction, output = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3]), Path(sys.argv[4])
def peak():  # VmHWM, not ru_maxrss: that one keeps the parent's peak across fork and exec
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
before, started = peak(), time.perf_counter()
if mode == "whole-arrays":
    arrays = {}
    for name in ("observation", "action", "reward", "terminal"):
        with gzip.open(folder / array_file(name, 0), "rb") as file:
            arrays[name] = np.load(file, allow_pickle=False)
    transitions = len(arrays["action"])
else:
    transitions = convert_checkpoint(folder, 0, output, fraction=fraction).transitions
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "peak_rss": peak() - before, "transitions": transitions}))
"""


def measure(folder: Path, mode: str, fraction: float, output: Path) -> dict:
    output.unlink(missing_ok=True)  # replacing a 7 GB buffer would time its deletion too
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(folder), mode, str(fraction), str(output)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def linked_checkpoints(source: Path, checkpoints: int) -> Iterator[Path]:
    """A replay folder laid out as the bucket's (`.../Pong/1/replay_logs`) holding `checkpoints` copies
    of the source checkpoint, as hard links (N checkpoints for the disk of one); removed after."""
    from offline_rl.data.dqn_replay.sources import checkpoint_files

    root = CACHE / "dqn-replay-parallel"
    shutil.rmtree(root, ignore_errors=True)
    folder = root / "mirror" / "Pong" / "1" / "replay_logs"
    folder.mkdir(parents=True)
    try:
        for checkpoint in range(checkpoints):
            for name, linked in zip(checkpoint_files(CHECKPOINT), checkpoint_files(checkpoint), strict=True):
                (folder / linked).hardlink_to(source / name)
        yield folder
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_converter(flags: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """The converter command's own seconds (from its total line: downloads and conversion) and the
    command's wall seconds, imports included."""
    command = [sys.executable, str(Path(__file__).resolve().parents[1] / "converters" / "dqn_replay_atari.py"), *flags]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    total = done.stdout.strip().splitlines()[-1]
    seconds = re.search(r", ([\d.]+) s, ", total)
    assert total.startswith("converted ") and seconds, total
    return float(seconds.group(1)), wall


def time_workers(folder: Path, workers: int) -> tuple[float, float]:
    """The converter command over the checkpoints in `folder`, on disk."""
    output = folder.parents[3] / "buffers"
    shutil.rmtree(output, ignore_errors=True)
    return run_converter(["--replay-dir", str(folder), "--output", str(output), "--workers", str(workers)])


class ThrottledMirror(http.server.SimpleHTTPRequestHandler):
    """A mirror whose connections share one link of `bytes_per_s`: each chunk sent books its time on a
    common clock, so parallel downloads are no faster together than one alone. What overlapping
    downloads with conversion gains is then the overlap alone, not extra bandwidth."""

    bytes_per_s = 10e6
    _clock_lock = threading.Lock()
    _link_free_at = 0.0

    def log_message(self, *_: object) -> None:
        pass

    def copyfile(self, source: BinaryIO, outputfile: BinaryIO) -> None:
        while chunk := source.read(1 << 16):
            with ThrottledMirror._clock_lock:
                start = max(time.monotonic(), ThrottledMirror._link_free_at)
                ThrottledMirror._link_free_at = start + len(chunk) / self.bytes_per_s
                sent_at = ThrottledMirror._link_free_at
            time.sleep(max(0.0, sent_at - time.monotonic()))
            outputfile.write(chunk)


def time_downloads(folder: Path, checkpoints: int, workers: int, bytes_per_s: float) -> tuple[float, float]:
    """Seconds from nothing on disk to every buffer written, fetching from a mirror on a link of
    `bytes_per_s`: (downloads first, one file at a time, then the converter on disk) and (the
    converter downloading while it converts)."""
    from offline_rl.core.progress import Meter
    from offline_rl.data.download import download_file
    from offline_rl.data.dqn_replay.sources import checkpoint_files

    handler = partial(ThrottledMirror, directory=str(folder.parents[2]))
    ThrottledMirror.bytes_per_s = bytes_per_s
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    mirror = f"http://127.0.0.1:{server.server_address[1]}"
    root = folder.parents[3]
    try:
        local = root / "first" / "Pong" / "1" / "replay_logs"
        local.mkdir(parents=True)
        quiet = Meter(grow=lambda _: None, advance=lambda _: None)
        started = time.perf_counter()
        for checkpoint in range(checkpoints):
            for name in checkpoint_files(checkpoint):
                download_file(f"{mirror}/Pong/1/replay_logs/{quote(name)}", local / name, meter=quiet)
        fetched = time.perf_counter() - started
        parallel = ["--workers", str(workers)]
        _, converting = run_converter(["--replay-dir", str(local), "--output", str(root / "first-buffers"), *parallel])
        folders = ["--dataset-dir", str(root / "datasets"), "--buffer-dir", str(root / "overlapped-buffers")]
        picked = ["--task", "Pong", "--checkpoint", *map(str, range(checkpoints))]
        _, overlapped = run_converter([*picked, *parallel, *folders], env={"DQN_REPLAY_MIRROR": mirror})
    finally:
        server.shutdown()
        server.server_close()
    print(f"  downloads first: {fetched:.1f} s fetching one file at a time, then {converting:.1f} s converting")
    return fetched + converting, overlapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=100_000)
    parser.add_argument("--game", default="Pong")
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--tile-to", type=int, default=0, help="also time a checkpoint of this many slots")
    parser.add_argument("--checkpoints", type=int, default=0, help="also time the command over this many")
    parser.add_argument("--workers", type=int, default=0, help="with --checkpoints (0: one per core)")
    parser.add_argument(
        "--mirror-mb-per-s", type=float, default=0.0, help="with --checkpoints, also time downloads on a link this fast"
    )
    args = parser.parse_args()
    folder = CACHE / f"dqn-replay-{args.game}-{args.slots}"
    if not (folder / "add_count_ckpt.0.gz").exists():
        print(f"building a {args.slots}-slot {args.game} checkpoint in {folder} ...", flush=True)
        build_checkpoint(folder, args.game, args.slots)
    compressed = sum(p.stat().st_size for p in folder.glob(f"*_ckpt.{CHECKPOINT}.gz"))
    print(f"checkpoint: {args.slots} slots, {compressed / 2**20:.0f} MiB compressed")
    output = CACHE / "dqn-replay-converted.hdf5"
    rows = [
        ("whole arrays (np.load, as d4rl-atari)", measure(folder, "whole-arrays", 1.0, output)),
        ("offline_rl convert_checkpoint", measure(folder, "convert", 1.0, output)),
        (
            f"offline_rl convert_checkpoint --fraction {args.fraction:g}",
            measure(folder, "convert", args.fraction, output),
        ),
    ]
    output.unlink(missing_ok=True)
    print(f"{'what':<52} {'seconds':>8} {'added peak RSS MiB':>19} {'transitions':>12}")
    for label, row in rows:
        print(f"{label:<52} {row['seconds']:>8.1f} {row['peak_rss'] / 2**20:>19.0f} {row['transitions']:>12}")
    scale = 1_000_000 / args.slots
    print(
        f"a 1M-slot checkpoint, projected: whole arrays {rows[0][1]['peak_rss'] * scale / 2**30:.1f} GiB peak, "
        f"{rows[0][1]['seconds'] * scale:.0f} s; converted {rows[1][1]['seconds'] * scale:.0f} s"
    )
    if args.tile_to:
        tiled = CACHE / f"dqn-replay-tiled-{args.tile_to}"
        tiled_checkpoint(folder, tiled, args.tile_to)
        try:
            for fraction in (1.0, args.fraction):
                row = measure(tiled, "convert", fraction, output)
                print(
                    f"{args.tile_to}-slot checkpoint, convert_checkpoint --fraction {fraction:g}: "
                    f"{row['seconds']:.1f} s, added peak RSS {row['peak_rss'] / 2**20:.0f} MiB, "
                    f"{row['transitions']} transitions"
                )
        finally:
            output.unlink(missing_ok=True)
            for path in tiled.iterdir():
                path.unlink()
            tiled.rmdir()
    if args.checkpoints:
        workers = args.workers or available_cores()
        with linked_checkpoints(folder, args.checkpoints) as replay:
            times = {count: time_workers(replay, count) for count in dict.fromkeys((1, workers))}
            for count, (seconds, wall) in times.items():
                print(
                    f"{args.checkpoints} checkpoints, --workers {count}: {seconds:.1f} s converting, "
                    f"{wall:.1f} s for the command, {args.checkpoints * args.slots / seconds:.0f} slots/s"
                )
            cores = available_cores()
            print(f"parallel_speedup: {times[1][0] / times[workers][0]:.2f} ({workers} workers, {cores} cores)")
            if args.mirror_mb_per_s:
                print(f"{args.checkpoints} checkpoints from a mirror on a {args.mirror_mb_per_s:g} MB/s link:")
                first, overlapped = time_downloads(replay, args.checkpoints, workers, args.mirror_mb_per_s * 1e6)
                print(f"  downloads first, then converting: {first:.1f} s (both commands' wall time)")
                print(f"  downloads in order while the workers convert (--workers {workers}): {overlapped:.1f} s")
                print(f"download_overlap_speedup: {first / overlapped:.2f}")
    print(f"peak_rss_ratio_vs_whole_arrays: {rows[0][1]['peak_rss'] / max(rows[1][1]['peak_rss'], 1):.1f}")


if __name__ == "__main__":
    main()
