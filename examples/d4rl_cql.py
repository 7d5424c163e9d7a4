"""Train CQL-SAC offline and evaluate it: `python examples/d4rl_cql.py --task HalfCheetah-v4`.

With no `--dataset`, a random-policy dataset is generated for the task (once, then cached). All
flags: `--help`; the logic lives in `offline_rl.cql_sac.experiment`.
"""

from offline_rl.cli import run_main
from offline_rl.cql_sac.experiment import main

if __name__ == "__main__":
    run_main(main)
