"""How Atari data sets spell their games, and how a user's `--task` is matched to that spelling.

RL Unplugged and DQN Replay name a game's folder `Breakout`, `MsPacman`, `UpNDown`; users type the
gymnasium ids they play (`BreakoutNoFrameskip-v4`, `ALE/Breakout-v5`) or the bare name in any case.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from offline_rl.errors import OfflineRLError

_TASK_DECORATION = re.compile(r"^(ALE/)?(?P<game>[A-Za-z]+?)(NoFrameskip|Deterministic)?(-v\d+)?$")


def game_in(task: str, games: Sequence[str]) -> str | None:
    """The spelling in `games` of the game `task` names (`Breakout`, `breakout`,
    `BreakoutNoFrameskip-v4`, `ALE/Breakout-v5`), or None when it names none of them."""
    by_lower = {game.lower(): game for game in games}
    return by_lower.get(bare_game(task).lower())


def bare_game(task: str) -> str:
    """`task` without gymnasium's decoration (`ALE/`, `NoFrameskip`, `-v4`): `Breakout` of all of them."""
    match = _TASK_DECORATION.match(task.strip())
    return match.group("game") if match else task.strip()


def game_of(task: str, games: Sequence[str], data_set: str) -> str:
    """`game_in`, or the one-line `--task` error listing the games `data_set` has."""
    game = game_in(task, games)
    if game is None:
        by_lower = {name.lower(): name for name in games}
        # 0.8: typos (Pongg, Seaqest, Breakuot) and not another real game (Asteroids is not Asterix)
        close = difflib.get_close_matches(bare_game(task).lower(), by_lower, n=1, cutoff=0.8)
        if close:
            raise OfflineRLError(f"--task {task}: not {data_set} game; did you mean {by_lower[close[0]]}?")
        raise OfflineRLError(f"--task {task}: not {data_set} game; expected one of {', '.join(games)}")
    return game
