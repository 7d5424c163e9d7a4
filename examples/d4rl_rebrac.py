"""ReBRAC trained offline on a continuous-action dataset, and evaluated in gymnasium.

    python examples/d4rl_rebrac.py --task HalfCheetah-v4
    python examples/d4rl_rebrac.py --config configs/rebrac/hopper-medium-v2.yaml

The recipe of `d4rl_cql.py` (the same data flags, run folder, checkpoints, resume, `--watch` and
`--export-policy`) with ReBRAC in place of CQL-SAC: every flag is a `setting()` of
`D4RLReBRACConfig`, `OfflineRunConfig` or `ReBRACConfig`, and runs go to `<logdir>/<task>/rebrac/<seed>/<stamp>/`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offline_rl.cli.d4rl_rebrac import config_from_args
from offline_rl.cli.main import run_main
from offline_rl.examples.d4rl_cql import train_offline


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    config = config_from_args(argv)  # before torch loads: `--help` and a mistyped flag answer at once
    from offline_rl.algorithms.rebrac import ReBRAC  # heavy (torch, Tianshou): loaded only when used

    return train_offline(config, ReBRAC, algo_name="rebrac")


if __name__ == "__main__":
    run_main(main)
