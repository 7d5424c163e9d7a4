"""D4RL reference scores and the normalised score used to report offline RL results.

The (min, max) pairs are D4RL's own REF_MIN_SCORE / REF_MAX_SCORE: the returns of a random policy and
of the expert used to build each environment's datasets. They are the same for every dataset
version (-v0, -v2) of an environment, so they are keyed by the environment name alone; Maze2D's differ
by maze and reward, and are keyed by the dataset's name.
"""

from __future__ import annotations

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
