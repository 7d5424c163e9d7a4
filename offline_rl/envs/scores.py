"""Reference scores and the normalised score used to report offline RL results.

D4RL: the (min, max) pairs are D4RL's own REF_MIN_SCORE / REF_MAX_SCORE: the returns of a random policy
and of the expert used to build each environment's datasets. They are the same for every dataset
version (-v0, -v2) of an environment, so they are keyed by the environment name alone; Maze2D's differ
by maze and reward, and are keyed by the dataset's name.

Atari: the (random, human) pairs of the 57 games, the human-normalised score's references that the
Atari literature reports against (DQN, Mnih et al. 2015; van Hasselt et al. 2016; Badia et al. 2020,
as gathered in DeepMind's DQN Zoo, `dqn_zoo/atari_data.py`; the DQN Replay / REM paper, RL Unplugged
and rliable normalise with them): a uniformly random agent's and a professional game tester's mean
returns, episodes capped at 108 000 frames. Keyed by the game as ALE names it (`ALE/<Game>-v5`).
"""

from __future__ import annotations

from offline_rl.envs.atari import game_in

D4RL_REFERENCE_SCORES: dict[str, tuple[float, float]] = {
    "halfcheetah": (-280.178953, 12135.0),
    "hopper": (-20.272305, 3234.3),
    "walker2d": (1.629008, 4592.3),
    "ant": (-325.6, 3879.7),
    "antmaze": (0.0, 1.0),
    "kitchen": (0.0, 4.0),  # Franka Kitchen (d4rl/kitchen/__init__.py): the four tasks' count
    # Adroit (d4rl/hand_manipulation_suite/__init__.py): the same pairs for v0 and v1
    "pen": (96.262799, 3076.8331017826877),
    "door": (-56.512833, 2880.5693087298737),
    "hammer": (-274.856578, 12794.134825156867),
    "relocate": (-6.425911, 4233.877797728884),
}


D4RL_DATASET_REFERENCE_SCORES: dict[str, tuple[float, float]] = {
    # Maze2D (d4rl/infos.py): one pair per maze and reward, so keyed by the dataset name (and D4RL's env id)
    "maze2d-umaze-v1": (23.85, 161.86),
    "maze2d-medium-v1": (13.13, 277.39),
    "maze2d-large-v1": (6.7, 273.99),
    "maze2d-umaze-dense-v1": (68.537689, 193.66285642381482),
    "maze2d-medium-dense-v1": (44.264742, 297.4552547777125),
    "maze2d-large-dense-v1": (30.569041, 303.4857382709002),
}


# game (as in ALE/<game>-v5), random agent, human tester; VideoPinball's random mean is close to the tester's
_ATARI_TABLE = """
Alien                 227.8     7127.7
Amidar                  5.8     1719.5
Assault               222.4      742.0
Asterix               210.0     8503.3
Asteroids             719.1    47388.7
Atlantis            12850.0    29028.1
BankHeist              14.2      753.1
BattleZone           2360.0    37187.5
BeamRider             363.9    16926.5
Berzerk               123.7     2630.4
Bowling                23.1      160.7
Boxing                  0.1       12.1
Breakout                1.7       30.5
Centipede            2090.9    12017.0
ChopperCommand        811.0     7387.8
CrazyClimber        10780.5    35829.4
Defender             2874.5    18688.9
DemonAttack           152.1     1971.0
DoubleDunk            -18.6      -16.4
Enduro                  0.0      860.5
FishingDerby          -91.7      -38.7
Freeway                 0.0       29.6
Frostbite              65.2     4334.7
Gopher                257.6     2412.5
Gravitar              173.0     3351.4
Hero                 1027.0    30826.4
IceHockey             -11.2        0.9
Jamesbond              29.0      302.8
Kangaroo               52.0     3035.0
Krull                1598.0     2665.5
KungFuMaster          258.5    22736.3
MontezumaRevenge        0.0     4753.3
MsPacman              307.3     6951.6
NameThisGame         2292.3     8049.0
Phoenix               761.4     7242.6
Pitfall              -229.4     6463.7
Pong                  -20.7       14.6
PrivateEye             24.9    69571.3
Qbert                 163.9    13455.0
Riverraid            1338.5    17118.0
RoadRunner             11.5     7845.0
Robotank                2.2       11.9
Seaquest               68.4    42054.7
Skiing             -17098.1    -4336.9
Solaris              1236.3    12326.7
SpaceInvaders         148.0     1668.7
StarGunner            664.0    10250.0
Surround              -10.0        6.5
Tennis                -23.8       -8.3
TimePilot            3568.0     5229.2
Tutankham              11.4      167.6
UpNDown               533.4    11693.2
Venture                 0.0     1187.5
VideoPinball        16256.9    17667.9
WizardOfWor           563.5     4756.5
YarsRevenge          3092.9    54576.9
Zaxxon                 32.5     9173.3
"""
ATARI_REFERENCE_SCORES: dict[str, tuple[float, float]] = {
    game: (float(random), float(human)) for game, random, human in map(str.split, _ATARI_TABLE.strip().splitlines())
}


def environment_key(name: str) -> str:
    """The environment part of a D4RL dataset name or a gymnasium id, lower-cased.

    `halfcheetah-medium-v2` and `HalfCheetah-v4` both give `halfcheetah`, so datasets generated
    locally for a gymnasium task share D4RL's reference scores; `door-human-v1` and `D4RL/door-v1`
    (D4RL's door env) both give `door`.
    """
    return name.strip().split("/")[-1].split("-")[0].lower()


def reference_scores(name: str) -> tuple[float, float] | None:
    """(min, max) reference returns for a D4RL dataset name or gymnasium id, if D4RL has them."""
    own = D4RL_DATASET_REFERENCE_SCORES.get(name.strip().split("/")[-1].lower())
    return own or D4RL_REFERENCE_SCORES.get(environment_key(name))


def normalized_score(episode_return: float, ref_min: float, ref_max: float) -> float:
    """D4RL's normalised score: 0 is the random policy, 100 the expert."""
    return 100.0 * (episode_return - ref_min) / (ref_max - ref_min)


def scored_atari_game(task: str) -> str | None:
    """The game of the 57 that `task` plays (`PongNoFrameskip-v4`, `ALE/Pong-v5`, `pong`: `Pong`), as
    `ATARI_REFERENCE_SCORES` spells it, or None when it names none of them."""
    return game_in(task, tuple(ATARI_REFERENCE_SCORES))


def atari_reference_scores(task: str) -> tuple[float, float] | None:
    """(random, human) returns of the Atari game `task` plays, or None when it names none of the 57."""
    game = scored_atari_game(task)
    return ATARI_REFERENCE_SCORES[game] if game is not None else None
