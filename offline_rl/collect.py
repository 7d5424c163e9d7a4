"""`python -m offline_rl.collect`: write a D4RL-format dataset by rolling out a behaviour policy.

The flags are the fields of `offline_rl.runs.recipes.RecipeCollectConfig`: a collection
(`offline_rl.runs.dataset_generation`), or with `--recipe` one of D4RL's locomotion datasets made the D4RL
way (`offline_rl.runs.recipes`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from offline_rl.cli.flags import parse_config
from offline_rl.cli.main import run_main
from offline_rl.runs.dataset_generation import collect_dataset
from offline_rl.runs.recipes import RecipeCollectConfig, make_recipe


def config_from_args(argv: Sequence[str] | None) -> RecipeCollectConfig:
    return parse_config(
        RecipeCollectConfig(), argv, prog="python -m offline_rl.collect", description=__doc__.splitlines()[0]
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = config_from_args(argv)
    # after the flags: reading the result back needs Tianshou (seconds to import); --help does not
    from offline_rl.data.d4rl import read_d4rl_file  # heavy (Tianshou, torch): loaded only when used
    from offline_rl.data.minari import load_minari  # heavy (Tianshou, torch): loaded only when used
    from offline_rl.data.stats import dataset_stats  # heavy (Tianshou): loaded only when used

    started = time.monotonic()
    path = make_recipe(config) if config.recipe else collect_dataset(config)
    seconds = time.monotonic() - started
    buffer = load_minari(path) if config.output_format == "minari" else read_d4rl_file(path)
    stats = dataset_stats(buffer)
    print(stats.summary())
    print(
        f"wrote {path}: {stats.transitions} transitions, {stats.episodes} episodes, mean return "
        f"{stats.return_mean:.2f}, in {seconds:.0f} s"
    )
    return 0


if __name__ == "__main__":
    run_main(main)
