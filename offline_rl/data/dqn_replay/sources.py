"""Where DQN Replay checkpoints live: the bucket's layout, its public HTTP mirror, local folders.

The DQN Replay Dataset (Agarwal et al. 2020; the data of the CQL paper's Atari experiments) is
`gs://atari-replay-datasets/dqn/<Game>/<run>/replay_logs/`: for each of 5 runs of 60 games, 51
checkpoints (0 to 50) of the Dopamine DQN agent's replay, 1M transitions each. A checkpoint is
six gzip-compressed `.npy` files: `$store$_observation_ckpt.N.gz`, `$store$_action_ckpt.N.gz`,
`$store$_reward_ckpt.N.gz`, `$store$_terminal_ckpt.N.gz`, `add_count_ckpt.N.gz` and
`invalid_range_ckpt.N.gz` (the last is recomputed here, so it is not needed). Downloads go to
`~/.dqn_replay/datasets/<Game>/<run>/replay_logs/`, as `gsutil -m cp -R` lays the bucket out, so a
copy made elsewhere with gsutil is found where it is put.
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

from offline_rl.envs.atari import game_in, game_of

MIRROR = "https://storage.googleapis.com/atari-replay-datasets/dqn"
RUNS = range(1, 6)
CHECKPOINTS = range(0, 51)
STORE_ARRAYS = ("observation", "action", "reward", "terminal")
"""The replay's per-slot arrays, saved as `$store$_<name>_ckpt.N.gz`."""
ADD_COUNT = "add_count"
"""How many transitions (padding included) the replay had received: where its oldest slot is."""

# Dopamine's 60 Atari games, the games of the DQN Replay Dataset.
GAMES = (
    "AirRaid", "Alien", "Amidar", "Assault", "Asterix", "Asteroids", "Atlantis", "BankHeist", "BattleZone",
    "BeamRider", "Berzerk", "Bowling", "Boxing", "Breakout", "Carnival", "Centipede", "ChopperCommand",
    "CrazyClimber", "DemonAttack", "DoubleDunk", "ElevatorAction", "Enduro", "FishingDerby", "Freeway",
    "Frostbite", "Gopher", "Gravitar", "Hero", "IceHockey", "Jamesbond", "JourneyEscape", "Kangaroo", "Krull",
    "KungFuMaster", "MontezumaRevenge", "MsPacman", "NameThisGame", "Phoenix", "Pitfall", "Pong", "Pooyan",
    "PrivateEye", "Qbert", "Riverraid", "RoadRunner", "Robotank", "Seaquest", "Skiing", "Solaris",
    "SpaceInvaders", "StarGunner", "Tennis", "TimePilot", "Tutankham", "UpNDown", "Venture", "VideoPinball",
    "WizardOfWor", "YarsRevenge", "Zaxxon",
)  # fmt: skip


def game_name(task: str) -> str:
    """The bucket's spelling of a game from `Pong`, `pong`, `PongNoFrameskip-v4` or `ALE/Pong-v5`."""
    return game_of(task, GAMES, "a DQN Replay")


def array_file(name: str, checkpoint: int) -> str:
    """The file name Dopamine gives the array `name` of checkpoint `checkpoint`."""
    prefix = "$store$_" if name in STORE_ARRAYS else ""
    return f"{prefix}{name}_ckpt.{checkpoint}.gz"


def checkpoint_files(checkpoint: int) -> list[str]:
    """The files a conversion reads: the four replay arrays and the add count."""
    return [array_file(name, checkpoint) for name in (*STORE_ARRAYS, ADD_COUNT)]


def folder_url(game: str, run: int) -> str:
    """A run's replay folder on the public mirror, or under `$DQN_REPLAY_MIRROR` (a local copy, a proxy)."""
    mirror = os.environ.get("DQN_REPLAY_MIRROR") or MIRROR
    return f"{mirror.rstrip('/')}/{game}/{run}/replay_logs"


def file_url(folder: str, name: str) -> str:
    """The URL of the file `name` in the mirror folder `folder` (`folder_url`)."""
    return f"{folder}/{urllib.parse.quote(name)}"


def replay_folder(root: Path, game: str, run: int) -> Path:
    return root / game / str(run) / "replay_logs"


def recorded_task(replay_dir: Path) -> str | None:
    """The env a replay was played on, from the folders it lies in as the bucket lays them out
    (`.../Pong/1/replay_logs`): `ALE/Pong-v5`, whose settings (sticky actions p=0.25, the minimal
    action set) are those of Dopamine's DQN runs. None when no folder on the way names a game."""
    folder = replay_dir.expanduser().absolute()
    for name in (folder.name, folder.parent.name, folder.parent.parent.name):
        if game := game_in(name, GAMES):
            return f"ALE/{game}-v5"
    return None


def checkpoint_label(replay_dir: Path, checkpoint: int, fraction: float = 1.0) -> str:
    """A checkpoint's short name in logs and run summaries (which results tables group runs by):
    `Pong/1/ckpt.7` for the bucket's layout, `Pong/1/ckpt.7-first_0.01` for its first 1%."""
    folder = replay_dir.expanduser().absolute()
    if folder.name == "replay_logs":
        folder = folder.parent
    part = "" if fraction >= 1.0 else f"-first_{fraction:g}"
    return f"{folder.parent.name}/{folder.name}/ckpt.{checkpoint}{part}"


def checkpoints_in(replay_dir: Path) -> list[int]:
    """The checkpoints of a replay folder whose files are all there, in order."""
    found = []
    for path in replay_dir.glob(f"{ADD_COUNT}_ckpt.*.gz"):
        suffix = path.name.removeprefix(f"{ADD_COUNT}_ckpt.").removesuffix(".gz")
        if suffix.isdigit() and all((replay_dir / name).is_file() for name in checkpoint_files(int(suffix))):
            found.append(int(suffix))
    return sorted(found)


def default_root() -> Path:
    return Path.home() / ".dqn_replay"
