"""IQL trained offline on a continuous-action dataset, and evaluated in gymnasium.

    python examples/d4rl_iql.py --task HalfCheetah-v4
    python examples/d4rl_iql.py --config configs/iql/hopper-medium-v2.yaml

The recipe of `d4rl_cql.py` (the same data flags, run folder, checkpoints, resume, `--watch` and
`--export-policy`) with IQL in place of CQL-SAC: every flag is a `setting()` of
`D4RLIQLConfig`, `OfflineRunConfig` or `IQLConfig`, and runs go to `<logdir>/<task>/iql/<seed>/<stamp>/`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offline_rl.cli.d4rl_iql import config_from_args
from offline_rl.cli.main import run_main
from offline_rl.examples.d4rl_cql import train_offline


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    config = config_from_args(argv)  # before torch loads: `--help` and a mistyped flag answer at once
    from offline_rl.algorithms.iql import IQL  # heavy (torch, Tianshou): loaded only when used

    return train_offline(config, IQL, algo_name="iql")


if __name__ == "__main__":
    run_main(main)
