"""TF-Agents' `CqlSacAgent`, set up as its CQL-SAC example sets it up
(`tf_agents/examples/cql_sac/kumar20/cql_sac_train_eval.py` in TF-Agents 0.19), as a column of
`cql_sac_throughput.py`.

TF-Agents is not a dependency of offline_rl, and TF-Agents 0.19 needs TensorFlow 2.15, which needs
numpy < 2: it is measured in a virtual environment of its own (docs/pages/benchmarks.md names it).
This module imports TensorFlow only when the column is asked for.

What follows the example: `ActorDistributionNetwork` with a `TanhNormalProjectionNetwork`,
`CriticNetwork` on the joined observation and action with Glorot-uniform kernels (two copies inside
the agent, and their targets), Adam optimisers, τ = 5e-3, γ = 0.99, squared TD errors, and
`agent.train` run as a `tf.function` (`common.function`, as the example's learner runs it). Where it
departs, always in TF-Agents' favour or to match the other columns: the networks are the benchmark's
width and depth, α starts at the benchmark's value and its optimiser's rate is 0 (TF-Agents always
tunes α), the CQL weight is fixed (`use_lagrange_cql_alpha=False`), and batches are gathered inside the
same `tf.function` from the dataset held as tensors (the example streams them from a Reverb server).

The arithmetic is TF-Agents', not the other columns': its conservative term scores N policy actions
at s and N uniform ones (2N, where CQL's reference code, CORL, d3rlpy and ours also score N actions
from π(·|s′), 3N), and the dataset action twice, so its critics see (2N + 2)·B rows per update
against ours (3N + 1)·B. `cql_sac_throughput.py --tf-agents-samples 15` gives it 8192 rows to our
7936 at N = 10: about the same arithmetic.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from peer_column import CQLSetup, PeerColumn, requested_modes

MODES = ("function",)


def tf_agents_version() -> str:
    import tensorflow as tf
    import tf_agents

    return f"TF-Agents {tf_agents.__version__} (TensorFlow {tf.__version__})"


def tensorboard_with_tensorflow(tf: Any) -> None:
    """Give TensorBoard's TF-2 API TensorFlow itself, after `import offline_rl` gave TensorBoard its
    TensorFlow-free stub (`offline_rl.core.import_order`) and Tianshou's import loaded that stub.
    TF-Agents writes a scalar summary at every update, through TensorBoard's `summary_v2`, which
    resolves `tensorboard.compat.tf2` on first use and fails on the stub; its lazy module takes its
    attributes from its own namespace first, so filling that namespace points it at TensorFlow."""
    import tensorboard.compat

    api = tf.compat.v2
    tensorboard.compat.tf2.__dict__.update({name: getattr(api, name) for name in dir(api) if not name.startswith("__")})


class TFAgentsCQL(PeerColumn):
    """TF-Agents' `CqlSacAgent` and a `tf.function` that trains it on a batch it draws itself."""

    def __init__(self, setup: CQLSetup, *, threads: int) -> None:
        import tensorflow as tf

        tensorboard_with_tensorflow(tf)
        from tf_agents.agents.cql import cql_sac_agent
        from tf_agents.agents.ddpg import critic_network
        from tf_agents.agents.sac import tanh_normal_projection_network
        from tf_agents.networks import actor_distribution_network
        from tf_agents.specs import tensor_spec
        from tf_agents.trajectories import time_step

        tf.config.set_visible_devices([], "GPU")  # the CPU column: TensorFlow leaves the GPU to torch
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        super().__init__()
        self.batch_size = setup.batch_size
        observation_spec = tensor_spec.TensorSpec([setup.obs_dim], tf.float32, "observation")
        action_spec = tensor_spec.BoundedTensorSpec([setup.act_dim], tf.float32, -1.0, 1.0, "action")
        actor = actor_distribution_network.ActorDistributionNetwork(
            observation_spec,
            action_spec,
            fc_layer_params=setup.hidden_sizes,
            continuous_projection_net=tanh_normal_projection_network.TanhNormalProjectionNetwork,
        )
        critic = critic_network.CriticNetwork(
            (observation_spec, action_spec),
            joint_fc_layer_params=setup.hidden_sizes,
            kernel_initializer="glorot_uniform",
            last_kernel_initializer="glorot_uniform",
        )
        self.agent = cql_sac_agent.CqlSacAgent(
            time_step.time_step_spec(observation_spec),
            action_spec,
            actor_network=actor,
            critic_network=critic,
            actor_optimizer=tf.keras.optimizers.Adam(learning_rate=1e-4),
            critic_optimizer=tf.keras.optimizers.Adam(learning_rate=3e-4),
            alpha_optimizer=tf.keras.optimizers.Adam(learning_rate=0.0),
            initial_log_alpha=math.log(setup.alpha),
            cql_alpha=setup.cql_weight,
            num_cql_samples=setup.n_actions,
            include_critic_entropy_term=False,
            use_lagrange_cql_alpha=False,
            target_update_tau=5e-3,
            target_update_period=1,
            td_errors_loss_fn=tf.math.squared_difference,
            gamma=0.99,
        )
        self.agent.initialize()
        self._step: Any = None

    def process_buffer(self, buffer: Any) -> None:
        """The transitions as tensors, and one `tf.function` that draws a batch of them as TF-Agents'
        two-step trajectories and trains on it."""
        import tensorflow as tf
        from tf_agents.trajectories import StepType, trajectory

        size = len(buffer)

        def column(values: Any, dtype: Any = np.float32) -> Any:
            return tf.constant(np.asarray(values)[:size].astype(dtype))

        obs, obs_next, act = column(buffer.obs), column(buffer.obs_next), column(buffer.act)
        rew = column(buffer.rew)
        discount = 1.0 - column(buffer.terminated)
        agent, batch_size = self.agent, self.batch_size

        @tf.function
        def step() -> Any:
            rows = tf.random.uniform([batch_size], maxval=size, dtype=tf.int32)

            def pair(first: Any, second: Any) -> Any:
                return tf.stack([first, second], axis=1)  # (B, 2, ...): the step and the next

            mid = tf.fill([batch_size, 2], tf.constant(StepType.MID, tf.int32))
            experience = trajectory.Trajectory(
                step_type=mid,
                observation=pair(tf.gather(obs, rows), tf.gather(obs_next, rows)),
                action=pair(tf.gather(act, rows), tf.gather(act, rows)),
                policy_info=(),
                next_step_type=mid,
                reward=pair(tf.gather(rew, rows), tf.zeros([batch_size])),
                discount=pair(tf.gather(discount, rows), tf.ones([batch_size])),
            )
            return agent.train(experience).loss

        self._step = step

    def update(self, buffer: Any = None, sample_size: int | None = None) -> Any:
        return self._step()


def modes_from(flag: str | None) -> list[str]:
    """TF-Agents' column runs only where it is installed: it is not a dependency."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up notices, before it loads
    return requested_modes(flag, module="tf_agents", option="--tf-agents", modes=MODES, default="function")
