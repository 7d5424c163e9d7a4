"""CQL-SAC from a dataset file with the Python API and Tianshou's own trainer, no command line:

    python examples/library_cql.py [DATASET]

DATASET is a D4RL-format file, a Tianshou buffer, a d3rlpy file, a D4RL name (`hopper-medium-v2`,
downloaded once) or a Minari id; without one, 20 000 random-policy Pendulum transitions are made here
first. What `examples/d4rl_cql.py` adds around these lines: presets, checkpoints and resume,
normalised scores, the conservatism check, TensorBoard curves and a summary line.
"""

import sys
from pathlib import Path

# offline_rl before Tianshou: where TensorFlow is installed, it keeps it out of TensorBoard's import
from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.data import dataset_info, dataset_stats, load_dataset
from offline_rl.runs.dataset_generation import CollectConfig, collect_dataset

import gymnasium as gym  # isort: skip
import torch  # isort: skip
from tianshou.data import Collector  # isort: skip
from tianshou.env import DummyVectorEnv  # isort: skip
from tianshou.trainer import OfflineTrainerParams  # isort: skip

TASK = "Pendulum-v1"
EPOCHS = 2  # CORL's budget is 200 epochs of 5000 updates
UPDATES_PER_EPOCH = 200

# 1. The data: any format offline_rl reads becomes one Tianshou ReplayBuffer with exact episode ends.
source = sys.argv[1] if len(sys.argv) > 1 else "pendulum-random.hdf5"
if len(sys.argv) == 1 and not Path(source).exists():
    collect_dataset(CollectConfig(task=TASK, output=source, size=20_000))  # D4RL's random recipe
buffer = load_dataset(source)
print(dataset_stats(buffer).summary())

# 2. The env the policy is evaluated on, and the algorithm shaped by its spaces (device="cuda" on a GPU).
task = dataset_info(buffer).get("task") or TASK
env = gym.make(task)
config = CQLSACConfig(cql_weight=5.0)  # every field is a flag of examples/d4rl_cql.py
algorithm = CQLSAC.build(env.observation_space, env.action_space, config)

# 3. Tianshou's offline trainer, evaluating on 5 episodes after every epoch.
test_envs = DummyVectorEnv([lambda: gym.make(task) for _ in range(5)])
best = algorithm.run_training(
    OfflineTrainerParams(
        buffer=buffer,
        test_collector=Collector(algorithm.policy, test_envs),
        max_epochs=EPOCHS,
        epoch_num_steps=UPDATES_PER_EPOCH,
        batch_size=256,
        test_step_num_episodes=5,
    )
)

# 4. The last evaluation is the score a paper reports; the policy is a Tianshou policy like any other.
final = Collector(algorithm.policy, test_envs).collect(n_episode=10, reset_before_collect=True)
returns = final.returns_stat
print(f"{int(algorithm.num_updates)} updates; last evaluation: return {returns.mean:.1f} ± {returns.std:.1f}")
print(f"(the best evaluation during training, {best.best_reward:.1f}, is an optimistic pick of many)")

# 5. The weights, for `CQLSAC.build(...).policy.load_state_dict(torch.load(...))` in another script.
torch.save(algorithm.policy.state_dict(), "cql_policy.pth")
print("policy weights: cql_policy.pth")
