"""RL Unplugged shard conversion: offline_rl's converter against the record-by-record TensorFlow loop.

    python benchmarks/rl_unplugged_convert.py [--transitions 100000] [--tf-records 5000] [--game Breakout]

Needs the `rlu` extra (TensorFlow writes the shard and runs the baseline). The shard is built the
way DeepMind's are: real Atari screens (random-policy episodes through gymnasium's
`AtariPreprocessing`, 84×84 grayscale), each transition a `tf.train.Example` with `o_t`/`o_tp1` as 4
PNGs each, written by `tf.io.TFRecordWriter` with GZIP, records shuffled across episodes. It is
cached under benchmarks/.cache/ and reused.

Baseline: what Tianshou's converter does — `tf.data.TFRecordDataset` one record at a time,
`tf.io.parse_single_example` with DeepMind's feature spec, `tf.io.decode_png` for each of the 8
frames, copied into preallocated `obs`/`obs_next` arrays — timed on the first `--tf-records` records
(its rate is steady; a whole shard takes it about an hour). Ours: `convert_shard` on the whole shard
in a fresh process, reporting its seconds and the process's peak RSS. Also printed: a 500k-record
shard's projected minutes for both, and the bytes per transition the converted buffer holds.
The last line is `speedup_vs_tf_record_loop: X.X`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from offline_rl.data.rl_unplugged.testing import (
    Episode,
    read_shard_with_tensorflow,
    serialize,
    shuffled_records,
    write_shard,
)

CACHE = Path(__file__).resolve().parent / ".cache"
SHARD_TRANSITIONS = 500_000


def atari_episodes(game: str, transitions: int, seed: int) -> list[Episode]:
    """Random-policy episodes of real screens, cut at 2000 steps, until `transitions` steps are collected."""
    import ale_py
    import gymnasium as gym

    from offline_rl.envs.atari import make_atari_env

    gym.register_envs(ale_py)
    env = make_atari_env(f"{game}NoFrameskip-v4", 1)
    rng = np.random.default_rng(seed)
    episodes: list[Episode] = []
    total = 0
    while total < transitions:
        obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
        frames, actions, rewards = [obs[-1]], [], []
        terminal = False
        while len(rewards) < min(2000, transitions - total):
            action = int(rng.integers(env.action_space.n))
            obs, reward, terminated, truncated, _ = env.step(action)
            frames.append(obs[-1])
            actions.append(action)
            rewards.append(reward)
            if terminated or truncated:
                terminal = bool(terminated)
                break
        actions.append(int(rng.integers(env.action_space.n)))
        episodes.append(
            Episode(len(episodes), np.stack(frames), np.array(actions), np.array(rewards, np.float32), terminal)
        )
        total += len(rewards)
    return episodes


def synthetic_shard(game: str, transitions: int) -> Path:
    path = CACHE / f"{game}-{transitions}-run_1-00000-of-00100"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        records = shuffled_records(atari_episodes(game, transitions, seed=0))
        tmp = path.with_suffix(".part")
        write_shard(tmp, (serialize(fields) for fields in records))
        tmp.rename(path)
        print(f"wrote {path} ({path.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - started:.0f} s")
    return path


def tf_record_loop(shard: Path, records: int, *, as_tianshou: bool, workdir: Path) -> float:
    """Records per second of the record-by-record TensorFlow conversion (first `records` records).

    Lean: parse, decode, copy into preallocated arrays. `as_tianshou` adds what Tianshou's converter
    also does per record (a `Batch` of the decoded record) and at the end (the arrays written to HDF5
    with gzip), so the lean figure is the harder one to beat.
    """
    import h5py
    from tianshou.data import Batch

    obs = np.empty((records, 4, 84, 84), dtype=np.uint8)
    obs_next = np.empty_like(obs)
    act = np.empty(records, dtype=np.int64)
    rew = np.empty(records, dtype=np.float32)
    done = np.empty(records, dtype=bool)
    reader = read_shard_with_tensorflow(shard)
    next(reader)  # TensorFlow's start-up (graph building, thread pools) is not per-record cost
    started = time.perf_counter()
    for i, record in zip(range(records), reader, strict=False):
        if as_tianshou:
            record = Batch(obs=record["o_t"], act=record["a_t"], rew=record["r_t"], done=1 - record["d_t"],
                           obs_next=record["o_tp1"])  # fmt: skip
            obs[i], act[i], rew[i], done[i], obs_next[i] = (
                record.obs,
                record.act,
                record.rew,
                record.done,
                record.obs_next,
            )
        else:
            obs[i], obs_next[i] = record["o_t"], record["o_tp1"]
            act[i], rew[i], done[i] = record["a_t"], record["r_t"], record["d_t"] == 0
    if as_tianshou:
        with h5py.File(workdir / "tianshou-style.hdf5", "w") as file:
            for key, values in (("observations", obs), ("actions", act), ("rewards", rew), ("terminals", done),
                                ("next_observations", obs_next)):  # fmt: skip
                file.create_dataset(key, data=values, compression="gzip")
        (workdir / "tianshou-style.hdf5").unlink()
    return records / (time.perf_counter() - started)


def ours_in_fresh_process(shard: Path, output: Path) -> dict[str, float]:
    # VmHWM is the child's own peak; getrusage would also count what it inherited before exec.
    code = (
        "import json, sys; from offline_rl.data.rl_unplugged.shard_converter import convert_shard; "
        "s = convert_shard(sys.argv[1], sys.argv[2]); "
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]; "
        "print(json.dumps({'seconds': s.seconds, 'transitions': s.transitions, "
        "'bytes_per_transition': s.bytes_per_transition, 'frames': s.frames, 'peak_rss_mib': int(hwm) / 1024}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(shard), str(output)], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=100_000)
    parser.add_argument("--tf-records", type=int, default=5_000)
    parser.add_argument("--game", default="Breakout")
    args = parser.parse_args()
    shard = synthetic_shard(args.game, args.transitions)
    size_mib = shard.stat().st_size / 2**20
    print(f"shard: {shard.name}, {args.transitions} transitions, {size_mib:.0f} MiB; cores: {os.cpu_count()}")

    output = CACHE / "converted.hdf5"
    ours = ours_in_fresh_process(shard, output)
    ours_rate = ours["transitions"] / ours["seconds"]
    output.unlink()
    print(
        f"offline_rl: {ours['seconds']:.1f} s for {ours['transitions']} records = {ours_rate:.0f} records/s; "
        f"peak RSS {ours['peak_rss_mib']:.0f} MiB; {ours['bytes_per_transition'] / 1024:.2f} KB/transition in RAM "
        f"({ours['frames']} distinct frames)"
    )
    records = min(args.tf_records, args.transitions - 1)
    tianshou_rate = tf_record_loop(shard, records, as_tianshou=True, workdir=CACHE)
    print(f"tianshou_converter_loop: {tianshou_rate:.0f} records/s (first {records} records, Batch + gzip HDF5)")
    tf_rate = tf_record_loop(shard, records, as_tianshou=False, workdir=CACHE)
    print(f"tf_record_loop: {tf_rate:.0f} records/s (first {records} records, parse + decode + copy)")
    rates = (("offline_rl", ours_rate), ("tf_record_loop", tf_rate), ("tianshou_converter_loop", tianshou_rate))
    for name, rate in rates:
        print(f"projected 500k-record shard, {name}: {SHARD_TRANSITIONS / rate / 60:.1f} min on one core")
    print(f"speedup_vs_tianshou_converter_loop: {ours_rate / tianshou_rate:.1f}")
    print(f"speedup_vs_tf_record_loop: {ours_rate / tf_rate:.1f}")


if __name__ == "__main__":
    main()
