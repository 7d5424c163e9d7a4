"""Aggregate gradient updates per second of S seeds trained as one batched update (`--num-seeds S`,
`offline_rl.algorithms.seeds`), against one run alone, in one process.

    python benchmarks/seed_batch_throughput.py [--device cpu|cuda] [--seeds 1 2 4 8 16] [--algorithm cql_sac]

Each algorithm at its program's defaults (`CQLSACConfig()` for `d4rl_cql.py`: 3×256 critics, batch 256,
N = 10, α and α′ tuned as configured there; the others' CORL defaults), on the synthetic dataset of
`cql_sac_throughput.py` (obs 17, act 6, 100k transitions), driven through `update(buffer, batch_size)`
as Tianshou's offline trainer drives it (the batch's stacked copy for S seeds). On CUDA both run captured
and compiled, in the programs' default precision (TF32; `--matmul-precision highest`: float32). A row
per S: the aggregate updates/s (S × the batch's rate), its ratio to one run alone, and on CUDA the peak
memory the batch allocated. "One run alone" is a plain single run (no batch), timed in alternating
rounds with the batches so that machine noise hits all alike; the figure is the median over rounds.
On a CPU, S seeds trained one after another give exactly one run's rate: the ratio is against that.
Four runs through MPS, the other way to fill a GPU, are `concurrent_runs.py --runs 1 4 --mps`.
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch
from cql_sac_throughput import spaces, synthetic_buffer
from timing import updates_per_second

from offline_rl.algorithms.bc import BC, BCConfig
from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.algorithms.iql import IQL, IQLConfig
from offline_rl.algorithms.rebrac import ReBRAC, ReBRACConfig
from offline_rl.algorithms.seeds import SeedBatch
from offline_rl.algorithms.td3_bc import TD3BC, TD3BCConfig
from offline_rl.core.resources import tune_cpu_allocator

ALGORITHMS: dict[str, tuple[Callable[[str], Any], int]] = {
    "cql_sac": (lambda device: CQLSAC.build(*spaces(), CQLSACConfig(), device=device), 256),
    "td3_bc": (lambda device: TD3BC.build(*spaces(), TD3BCConfig(), device=device), 256),
    "iql": (lambda device: IQL.build(*spaces(), IQLConfig(), device=device), 256),
    "rebrac": (lambda device: ReBRAC.build(*spaces(), ReBRACConfig(), device=device), 1024),
    "bc": (lambda device: BC.build(*spaces(), BCConfig(), device=device), 256),
}


def built(name: str, seeds: int, device: str, buffer: Any) -> Any:
    """The algorithm trained as `seeds` seeds (its batch's stacked copy), or alone for 0."""
    build = ALGORITHMS[name][0]
    members = []
    for seed in range(max(seeds, 1)):
        torch.manual_seed(seed)
        members.append(build(device))
    algorithm = SeedBatch(members).stacked if seeds else members[0]
    algorithm.statistics_interval = 100
    algorithm.plan(10**6)
    algorithm.process_buffer(buffer)
    return algorithm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--algorithm", choices=list(ALGORITHMS), default="cql_sac")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice)")
    parser.add_argument("--matmul-precision", default="high", help="on CUDA: high (TF32, the default) or highest")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda":
        torch.set_float32_matmul_precision(args.matmul_precision)
    tune_cpu_allocator()
    buffer = synthetic_buffer()
    batch = ALGORITHMS[args.algorithm][1]
    columns = {0: built(args.algorithm, 0, args.device, buffer)}
    memory: dict[int, float] = {}
    for seeds in args.seeds:
        if args.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        columns[seeds] = built(args.algorithm, seeds, args.device, buffer)
        updates_per_second(columns[seeds], buffer, batch, 5, args.device, warmup=5)  # the capture, the compile
        if args.device == "cuda":
            memory[seeds] = (torch.cuda.max_memory_allocated() - before) / 2**20
    rates: dict[int, list[float]] = {seeds: [] for seeds in columns}
    for _ in range(args.rounds):
        for seeds, algorithm in columns.items():
            rates[seeds].append(updates_per_second(algorithm, buffer, batch, args.updates, args.device, warmup=5))
    precision = f", matmul precision {args.matmul_precision}" if args.device == "cuda" else ""
    print(
        f"{args.algorithm}, batch {batch}, device {args.device}{precision}, torch threads {torch.get_num_threads()}, "
        f"{args.updates} updates x {args.rounds} rounds"
    )
    alone = statistics.median(rates[0])
    print(f"one run alone      : {alone:9.1f} updates/s")
    for seeds in args.seeds:
        aggregate = seeds * statistics.median(rates[seeds])
        extra = f", peak {memory[seeds]:.0f} MiB" if seeds in memory else ""
        print(f"{seeds:3d} seeds batched : {aggregate:9.1f} updates/s in all ({aggregate / alone:.2f}x one run{extra})")
    for seeds in args.seeds:
        print(f"seeds_{seeds}_ratio: {seeds * statistics.median(rates[seeds]) / alone:.2f}")


if __name__ == "__main__":
    main()
