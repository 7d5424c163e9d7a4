"""Where a captured CQL-SAC update spends its time on a GPU: the host, the graph, or which kernels.

    python benchmarks/cql_sac_profile.py [--critic-layers 2] [--updates 500] [--top 20]
        [--matmul-precision highest] [--critic-variant ensemble]

Same configuration as `cql_sac_throughput.py` (its `build_ours`, compiled and captured path).
Prints three figures per update and a kernel table:
- `update()`: the whole entry point as Tianshou's trainer calls it, synchronised at the end;
- `replay`: the recorded CUDA graph replayed alone (the device's time for one update);
- `host`: the Python cost of one `update()` call, timed without waiting for the device;
- the kernels of the same update run uncaptured under torch.profiler, by total device time;
- the same kernels by how much of the GPU they hold: each kernel's time × the share of the
  multiprocessors its thread blocks cover (its grid over the SM count, at most 1).
If `update()` is slower than `replay`, the host is the bottleneck; otherwise the kernels are. The
second table is about several runs sharing one GPU (issue #10's "4 runs ≥ 2× one"): one run alone
waits on its chain of kernels (`replay`), runs side by side compete for multiprocessors, so the sum
of "GPU-held" time bounds how many updates per second all runs together can do.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from cql_sac_throughput import BATCH, build_ours, synthetic_buffer
from critic_variants import VARIANTS, use_critic_variant
from tianshou.algorithm.algorithm_base import policy_within_training_step

from offline_rl.core.arithmetic import TORCH_MATMUL_PRECISIONS


def timed(run, repeats: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def host_seconds(run, repeats: int) -> float:
    """Mean wall time of the calls themselves; the device works through the queue meanwhile."""
    torch.cuda.synchronize()
    total = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        total += time.perf_counter() - start
    torch.cuda.synchronize()
    return total / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--critic-layers", type=int, default=2)
    parser.add_argument("--updates", type=int, default=500)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--matmul-precision", default="highest", choices=TORCH_MATMUL_PRECISIONS)
    parser.add_argument(
        "--critic-variant",
        default="ensemble",
        choices=sorted(VARIANTS),
        help="the critics computed another way (benchmarks/critic_variants.py; ensemble: as the library does)",
    )
    args = parser.parse_args()
    torch.set_float32_matmul_precision(args.matmul_precision)
    torch.manual_seed(0)
    buffer = synthetic_buffer()
    algorithm = build_ours("cuda", "compiled", args.critic_layers)
    use_critic_variant(algorithm, args.critic_variant)
    algorithm.process_buffer(buffer)

    def update() -> None:
        algorithm.update(buffer=buffer, sample_size=BATCH)

    with policy_within_training_step(algorithm.policy):
        for _ in range(10):
            update()
        whole = timed(update, args.updates)
        replay = timed(algorithm._captured._graph.replay, args.updates)
        host = host_seconds(update, args.updates)
        algorithm.capture = False  # the same compiled losses, run uncaptured so each kernel is seen
        for _ in range(5):
            update()
        torch.cuda.synchronize()
        steps = 20
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiler:
            for _ in range(steps):
                update()
            torch.cuda.synchronize()
    print(
        f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.critic_layers}×256 critics, "
        f"matmul precision {args.matmul_precision}, critics: {args.critic_variant}"
    )
    print(f"update(): {whole * 1e6:8.1f} µs  ({1 / whole:7.1f} updates/s)")
    print(f"replay:   {replay * 1e6:8.1f} µs  ({1 / replay:7.1f} updates/s)")
    print(f"host:     {host * 1e6:8.1f} µs per update() call")
    events = [event for event in profiler.key_averages() if event.device_time_total > 0]
    events.sort(key=lambda event: event.device_time_total, reverse=True)
    kernels = sum(event.device_time_total for event in events) / steps
    launches = sum(event.count for event in events) / steps
    print(f"uncaptured kernels: {launches:.0f} per update, {kernels:.1f} µs of device time per update")
    for event in events[: args.top]:
        share = event.device_time_total / steps
        print(f"{share:8.1f} µs {event.count / steps:5.1f}×  {event.key[:110]}")
    print_held_table(profiler, steps, args.top, whole)


TRAINER_EXTRA_S = 41e-6
"""What one run alone in Tianshou's offline trainer spends per update beyond `update()` (logging,
the progress bar), as timed at the d4rl_cql defaults in TF32. Runs sharing a GPU spend it on their own
CPU cores."""


def print_held_table(profiler: torch.profiler.profile, steps: int, top: int, whole: float) -> None:
    """Kernels by time × share of the multiprocessors their grid covers, from the profiler's trace.

    Also the ratio that issue #10's "4 runs together ≥ 2× one" comes to if four runs reach the held
    time's bound: one run alone in the trainer (`whole` + `TRAINER_EXTRA_S`) over the held time,
    which matched the measured 1.92–1.97× for the library's critics."""
    multiprocessors = torch.cuda.get_device_properties(0).multi_processor_count
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        profiler.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    held: dict[str, float] = defaultdict(float)
    duration: dict[str, float] = defaultdict(float)
    blocks: dict[str, int] = {}
    launches: dict[str, int] = defaultdict(int)
    for event in events:
        if event.get("cat") != "kernel":
            continue
        grid = event.get("args", {}).get("grid", [1, 1, 1])
        count = grid[0] * grid[1] * grid[2]
        name = event["name"]
        held[name] += event["dur"] * min(1.0, count / multiprocessors)
        duration[name] += event["dur"]
        blocks[name] = max(blocks.get(name, 0), count)  # the widest launch of the kernel
        launches[name] += 1
    if not held:
        print("GPU-held: the trace holds no kernels")
        return
    total_held = sum(held.values()) / steps
    total = sum(duration.values()) / steps
    print(
        f"GPU-held: {total_held:.1f} µs per update of {total:.1f} µs of kernels ({multiprocessors} SMs): "
        f"runs sharing this GPU can do at most ~{1e6 / total_held:.0f} updates/s together"
    )
    alone = whole + TRAINER_EXTRA_S
    print(
        f"one run alone in the trainer ~{alone * 1e6:.0f} µs per update: runs sharing the GPU at the bound "
        f"would do {alone * 1e6 / total_held:.2f}× one run alone"
    )
    for name in sorted(held, key=held.get, reverse=True)[:top]:
        print(
            f"{held[name] / steps:8.1f} µs held {duration[name] / steps:8.1f} µs {launches[name] / steps:5.1f}× "
            f"{blocks[name]:6d} blocks  {name[:90]}"
        )


if __name__ == "__main__":
    main()
