"""Train CQL-SAC offline and evaluate it: `python examples/d4rl_cql.py --task HalfCheetah-v4`.

With no `--dataset`, a random-policy dataset is generated for the task (once, then cached). Every
flag is a field of `D4RLCQLConfig`, `OfflineRunConfig` or `CQLSACConfig`; `--help` lists them with
their defaults, and `--config preset.yaml` sets any of them from a file.
"""

from offline_rl.apps.cli import run_main
from offline_rl.apps.d4rl_cql import main

if __name__ == "__main__":
    run_main(main)
