"""Where RL Unplugged Atari shards live: names, the public HTTP mirror, local directories.

Shards are `gs://rl_unplugged/atari/<Game>/run_<r>-<sssss>-of-00100`, readable anonymously at
https://storage.googleapis.com/rl_unplugged/atari/... (the same mirror Tianshou's converter uses).
Downloads go to `~/.rl_unplugged/datasets/<Game>/` and buffers to `~/.rl_unplugged/buffers/<Game>/`,
one folder per game as the bucket itself is laid out, so a shard copied from elsewhere is found by name.
"""

from __future__ import annotations

import os
from pathlib import Path

from offline_rl.core.errors import OfflineRLError
from offline_rl.envs.atari import game_in, game_of

MIRROR = "https://storage.googleapis.com/rl_unplugged/atari"
SHARDS_PER_RUN = 100
DOWNLOAD_HINT = "or pass it with --shard-file"
"""How a download error ends: where a shard copied by other means goes instead."""
RUNS = range(1, 6)

# The 45 games of DeepMind's rl_unplugged/atari.py: 9 tuning games and 36 testing games.
GAMES = (
    "BeamRider", "DemonAttack", "DoubleDunk", "IceHockey", "MsPacman", "Pooyan", "RoadRunner", "Robotank",
    "Zaxxon", "Alien", "Amidar", "Assault", "Asterix", "Atlantis", "BankHeist", "BattleZone", "Boxing",
    "Breakout", "Carnival", "Centipede", "ChopperCommand", "CrazyClimber", "Enduro", "FishingDerby",
    "Freeway", "Frostbite", "Gopher", "Gravitar", "Hero", "Jamesbond", "Kangaroo", "Krull", "KungFuMaster",
    "NameThisGame", "Phoenix", "Pong", "Qbert", "Riverraid", "Seaquest", "SpaceInvaders", "StarGunner",
    "TimePilot", "UpNDown", "VideoPinball", "WizardOfWor", "YarsRevenge",
)  # fmt: skip


def game_name(task: str) -> str:
    """RL Unplugged's spelling of a game from `Breakout`, `breakout`, `BreakoutNoFrameskip-v4` or `ALE/Breakout-v5`."""
    return game_of(task, GAMES, "an RL Unplugged Atari")


def recorded_task(shard: Path) -> str | None:
    """The env a shard's data was played on, from the folder it lies in as the bucket lays shards out
    (`.../Breakout/run_1-...`): `ALE/Breakout-v5`, whose settings (sticky actions p=0.25, the minimal
    action set) are those of Dopamine's DQN runs behind RL Unplugged. None in a folder of another name."""
    game = game_in(shard.expanduser().absolute().parent.name, GAMES)
    return f"ALE/{game}-v5" if game else None


def shard_name(run_id: int, shard_id: int) -> str:
    if run_id not in RUNS:
        raise OfflineRLError(f"--run-id {run_id}: RL Unplugged has runs 1 to {RUNS[-1]}")
    if not 0 <= shard_id < SHARDS_PER_RUN:
        raise OfflineRLError(f"--shard-id {shard_id}: expected 0 to {SHARDS_PER_RUN - 1}")
    return f"run_{run_id}-{shard_id:05d}-of-{SHARDS_PER_RUN:05d}"


def shard_url(game: str, name: str) -> str:
    """The shard's URL on the public mirror, or under `$RL_UNPLUGGED_MIRROR` (a local copy, a proxy)."""
    mirror = os.environ.get("RL_UNPLUGGED_MIRROR") or MIRROR
    return f"{mirror.rstrip('/')}/{game}/{name}"


def default_root() -> Path:
    return Path.home() / ".rl_unplugged"
