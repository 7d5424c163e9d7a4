"""Our critic ensemble's forward and backward pass against the same layers as a TensorFlow graph, on CPU.

    python benchmarks/critic_pass_vs_tensorflow.py [--rounds 4] [--threads 2]

Why: TF-Agents' `CqlSacAgent` (`benchmarks/tf_agents_baseline.py`) runs a CQL-SAC update faster
than ours on some CPUs at the same arithmetic; this isolates the part where the time goes. Both
sides: two critics of 2×256 (23 inputs: 17 observation + 6 action columns), forward over
7936 rows (a batch of 256 with 1 + 3·10 actions each), the sum of the Q-values backward to every weight
and bias. Also each big product of that pass alone (7936×256 by 256×256: forward, input gradient,
weight gradient), ours through `offline_rl.algorithms.layers`' operators and TensorFlow's `tf.matmul`. Rounds
alternate. Needs TensorFlow (the `rlu` extra, or TF-Agents' venv).
"""

from __future__ import annotations

import offline_rl  # noqa: F401  first: it keeps TensorFlow out of the TensorBoard that Tianshou imports

# isort: split

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from offline_rl.algorithms.networks import EnsembleCritic
from offline_rl.core.resources import tune_cpu_allocator

BATCH, SCORED, OBS_DIM, ACT_DIM, WIDTH = 256, 31, 17, 6, 256
ROWS = BATCH * SCORED


def milliseconds(step: Callable[[], Any], repeats: int = 15) -> float:
    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats * 1e3


def torch_critic_pass() -> Callable[[], None]:
    critic = EnsembleCritic(OBS_DIM, ACT_DIM, [WIDTH, WIDTH], 2)
    obs = torch.randn(BATCH, OBS_DIM)
    actions = torch.rand(BATCH, SCORED, ACT_DIM) * 2 - 1

    def step() -> None:
        critic.zero_grad(set_to_none=True)
        critic(obs, actions).sum().backward()

    return step


def tensorflow_critic_pass(tf: Any) -> Callable[[], Any]:
    def layer(fan_in: int, fan_out: int) -> list[Any]:
        return [tf.Variable(tf.random.normal([fan_in, fan_out]) / fan_in**0.5), tf.Variable(tf.zeros([fan_out]))]

    critics = [layer(OBS_DIM + ACT_DIM, WIDTH) + layer(WIDTH, WIDTH) + layer(WIDTH, 1) for _ in range(2)]
    inputs = tf.constant(np.random.default_rng(0).normal(size=(ROWS, OBS_DIM + ACT_DIM)).astype(np.float32))
    variables = [variable for critic in critics for variable in critic]

    @tf.function
    def step() -> Any:
        with tf.GradientTape() as tape:
            total = 0.0
            for w1, b1, w2, b2, w3, b3 in critics:
                hidden = tf.nn.relu(tf.matmul(inputs, w1) + b1)
                hidden = tf.nn.relu(tf.matmul(hidden, w2) + b2)
                total += tf.reduce_sum(tf.matmul(hidden, w3) + b3)
        return tape.gradient(total, variables)

    return step


def products(tf: Any) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """(ours, TensorFlow's) for each big product of the pass, on the same numbers."""
    rng = np.random.default_rng(1)
    x, grad = (rng.normal(size=(ROWS, WIDTH)).astype(np.float32) for _ in range(2))
    weight = rng.normal(size=(WIDTH, WIDTH)).astype(np.float32)  # (out, in), torch's layout
    tx, tgrad, tweight, bias = torch.from_numpy(x), torch.from_numpy(grad), torch.from_numpy(weight), torch.zeros(WIDTH)
    vx, vgrad, vweight = tf.Variable(x), tf.Variable(grad), tf.Variable(weight.T.copy())
    linear = torch.ops.mkldnn._linear_pointwise
    return {
        "forward": (
            lambda: linear(tx, tweight, bias, "none", [], ""),
            tf.function(lambda: tf.matmul(vx, vweight), autograph=False),
        ),
        "input gradient": (
            lambda: linear(tgrad, tweight.t(), None, "none", [], ""),
            tf.function(lambda: tf.matmul(vgrad, vweight, transpose_b=True), autograph=False),
        ),
        "weight gradient": (
            lambda: torch.ops.aten.mkldnn_linear_backward_weights(tgrad.to_mkldnn(), tx.to_mkldnn(), tweight, False),
            tf.function(lambda: tf.matmul(vx, vgrad, transpose_a=True), autograph=False),
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError:
        raise SystemExit("TensorFlow is not installed: pip install -e '.[rlu]' (or run in TF-Agents' venv)") from None
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    torch.set_num_threads(args.threads)
    tune_cpu_allocator()
    ours, theirs = torch_critic_pass(), tensorflow_critic_pass(tf)
    pairs = products(tf)
    print(f"cpu ({args.threads} threads), torch {torch.__version__}, TensorFlow {tf.__version__}; milliseconds")
    for _ in range(args.rounds):
        line = f"critic pass: ours {milliseconds(ours):6.2f}, TensorFlow {milliseconds(theirs):6.2f}"
        for name, (mine, tensorflow) in pairs.items():
            line += f" | {name}: ours {milliseconds(mine, 30):5.2f}, TensorFlow {milliseconds(tensorflow, 30):5.2f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
