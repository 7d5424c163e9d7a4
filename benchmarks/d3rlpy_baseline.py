"""d3rlpy's `CQL` and `DiscreteCQL`, driven the way d3rlpy's own `fit` loop drives them, as extra
columns of `cql_sac_throughput.py` and `discrete_cql_throughput.py`.

d3rlpy is not a dependency of offline_rl, and d3rlpy 2.8.1 pins gymnasium 1.0.0, older than what
offline_rl installs, so its columns are measured in a virtual environment of their own:

    python3.11 -m venv /tmp/d3venv && . /tmp/d3venv/bin/activate
    pip install torch==2.13.0 && pip install -e . d3rlpy==2.8.1

This module imports d3rlpy only when a column is asked for.

One timed update is what each step of d3rlpy's `fit` does: `dataset.sample_transition_batch` on the
host, then `algo.update(batch)`, which copies the batch to the device, runs the losses, backward passes
and optimiser steps, and returns the losses as Python floats. With `compiled`, d3rlpy's own
`compile_graph=True` (torch.compile and CUDA graphs; d3rlpy applies it on CUDA only).

Set up to do the arithmetic of the other columns: continuous CQL with two critics and an actor of
`hidden_sizes` (d3rlpy's default is 2×256), N sampled actions per group, batch as given, the
temperature α fixed (`temp_learning_rate=0`) and the Lagrange multiplier off (`alpha_learning_rate=0`,
`initial_alpha=1`, so the conservative term is `conservative_weight` × the gap, offset by a constant);
discrete CQL on a quantile head (`QRQFunctionFactory`) with d3rlpy's Nature CNN encoder, as ours
(or an MLP for the CartPole configuration).

Installed with `pip install --no-deps` beside gymnasium 1.4 (as a GPU machine without network gets its
packages, from wheels), d3rlpy 2.8.1 also runs: it imports scikit-learn, hence scipy, at start-up, so
such a machine needs those wheels too (45 MB with d3rlpy's own, scipy 35 MB of it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from peer_column import CQLSetup, PeerColumn, requested_modes

from offline_rl.data.frame_stack import FrameStackBuffer

MODES = ("eager", "compiled")


def quiet_d3rlpy() -> None:
    """d3rlpy reports each algorithm it builds through structlog at info level, lines that would
    interleave with the benchmark's table: keep warnings and errors only."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def d3rlpy_version() -> str:
    import d3rlpy

    return f"d3rlpy {d3rlpy.__version__}"


def d3rlpy_device(device: str) -> str:
    """d3rlpy names devices `cpu:0` and `cuda:0`."""
    return device if ":" in device else f"{device}:0"


class D3rlpyColumn(PeerColumn):
    """A d3rlpy algorithm and its dataset, updated as its `fit` loop updates it."""

    def __init__(self, algo: Any, batch_size: int) -> None:
        super().__init__()
        self.algo = algo
        self.batch_size = batch_size
        self._dataset: Any = None

    def process_buffer(self, buffer: Any) -> None:
        """d3rlpy's dataset of the buffer's episodes, and the algorithm built for it. Terminals and
        time-outs stay apart, as d3rlpy's `MDPDataset` keeps them. A frame-stacked buffer gives its
        single frames and d3rlpy stacks them at sampling time with its `FrameStackTransitionPicker`,
        the way d3rlpy loads Atari data."""
        import d3rlpy

        size = len(buffer)  # a Tianshou buffer's arrays may be longer than what it holds

        def column(values: Any) -> np.ndarray:
            return np.asarray(values)[:size]

        picker = None
        if isinstance(buffer, FrameStackBuffer):
            observations = buffer.frames[buffer.frame_index][:, None]  # (N, 1, 84, 84): the newest frame of each
            picker = d3rlpy.dataset.FrameStackTransitionPicker(buffer.frame_stack)
        else:
            observations = column(buffer.obs)
        act = column(buffer.act)
        discrete = act.ndim == 1
        self._dataset = d3rlpy.dataset.MDPDataset(
            observations=observations,
            actions=act.astype(np.int64) if discrete else act,
            rewards=column(buffer.rew).astype(np.float32),
            terminals=column(buffer.terminated).astype(np.float32),
            timeouts=column(buffer.truncated).astype(np.float32),
            transition_picker=picker,
            action_space=d3rlpy.constants.ActionSpace.DISCRETE if discrete else d3rlpy.constants.ActionSpace.CONTINUOUS,
            action_size=int(act.max()) + 1 if discrete else None,
        )
        self.algo.build_with_dataset(self._dataset)

    def update(self, buffer: Any = None, sample_size: int | None = None) -> dict[str, float]:
        return self.algo.update(self._dataset.sample_transition_batch(sample_size or self.batch_size))


def d3rlpy_cql(setup: CQLSetup, *, device: str, mode: str = "eager") -> D3rlpyColumn:
    """d3rlpy's continuous `CQL` in the benchmark's shared configuration."""
    import d3rlpy

    encoder = d3rlpy.models.VectorEncoderFactory(hidden_units=list(setup.hidden_sizes))
    config = d3rlpy.algos.CQLConfig(
        batch_size=setup.batch_size,
        actor_learning_rate=1e-4,
        critic_learning_rate=3e-4,
        actor_encoder_factory=encoder,
        critic_encoder_factory=encoder,
        n_critics=2,
        initial_temperature=setup.alpha,
        temp_learning_rate=0.0,
        initial_alpha=1.0,
        alpha_learning_rate=0.0,
        conservative_weight=setup.cql_weight,
        n_action_samples=setup.n_actions,
        compile_graph=mode == "compiled",
    )
    return D3rlpyColumn(config.create(device=d3rlpy_device(device)), setup.batch_size)


def d3rlpy_discrete_cql(
    *,
    num_quantiles: int,
    cql_weight: float,
    lr: float,
    target_update_interval: int,
    batch_size: int,
    device: str,
    mode: str = "eager",
    hidden_sizes: tuple[int, ...] | None = None,
) -> D3rlpyColumn:
    """d3rlpy's `DiscreteCQL` (double DQN targets, one-step returns: d3rlpy's own) on a quantile head,
    over d3rlpy's Nature CNN with frames scaled to [0, 1] by its `PixelObservationScaler`, as ours,
    or over an MLP of `hidden_sizes`."""
    import d3rlpy

    pixels = hidden_sizes is None
    config = d3rlpy.algos.DiscreteCQLConfig(
        batch_size=batch_size,
        learning_rate=lr,
        alpha=cql_weight,
        target_update_interval=target_update_interval,
        encoder_factory=(
            d3rlpy.models.PixelEncoderFactory() if pixels else d3rlpy.models.VectorEncoderFactory(list(hidden_sizes))
        ),
        q_func_factory=d3rlpy.models.QRQFunctionFactory(n_quantiles=num_quantiles),
        observation_scaler=d3rlpy.preprocessing.PixelObservationScaler() if pixels else None,
        compile_graph=mode == "compiled",
    )
    return D3rlpyColumn(config.create(device=d3rlpy_device(device)), batch_size)


def modes_from(flag: str | None, device: str) -> list[str]:
    """d3rlpy's columns run only where it is installed: it is not a dependency. `compiled` is
    d3rlpy's CUDA-only `compile_graph`."""
    default = "eager,compiled" if device == "cuda" else "eager"
    modes = requested_modes(
        flag, module="d3rlpy", option="--d3rlpy", modes=MODES, default=default, cuda_only=("compiled",), device=device
    )
    if modes:
        quiet_d3rlpy()
    return modes
