"""Atari's human-normalised score: the 57 games' random and human references, the spellings of a game
that find them, and the evaluation line that reports it."""

from __future__ import annotations

import gymnasium as gym
import pytest

from offline_rl.envs.scores import ATARI_REFERENCE_SCORES, atari_reference_scores, normalized_score
from offline_rl.runs.evaluation import EvaluationReporter, human_normalised


def test_every_game_is_an_ale_game_and_human_beats_random() -> None:
    import ale_py

    gym.register_envs(ale_py)
    assert len(ATARI_REFERENCE_SCORES) == 57
    assert [game for game in ATARI_REFERENCE_SCORES if f"ALE/{game}-v5" not in gym.registry] == []
    assert all(random < human for random, human in ATARI_REFERENCE_SCORES.values())


def test_a_games_spellings_find_its_references_and_other_tasks_none() -> None:
    for task in ("PongNoFrameskip-v4", "ALE/Pong-v5", "Pong", "pong"):
        assert atari_reference_scores(task) == (-20.7, 14.6)
    assert atari_reference_scores("ALE/MsPacman-v5") == (307.3, 6951.6)
    assert atari_reference_scores("MontezumaRevengeNoFrameskip-v4") == (0.0, 4753.3)
    # the CQL paper's five games, as the DQN papers give them (random, human)
    assert [atari_reference_scores(game) for game in ("Asterix", "Breakout", "Qbert", "Seaquest")] == [
        (210.0, 8503.3), (1.7, 30.5), (163.9, 13455.0), (68.4, 42054.7),
    ]  # fmt: skip
    for task in ("HalfCheetah-v4", "CartPole-v1", "hopper-medium-v2", "D4RL/door-v1"):
        assert atari_reference_scores(task) is None


def test_the_human_normalized_score_by_hand() -> None:
    # Pong: random −20.7, human 14.6, a span of 35.3
    assert normalized_score(-20.7, -20.7, 14.6) == pytest.approx(0.0)
    assert normalized_score(14.6, -20.7, 14.6) == pytest.approx(100.0)
    assert normalized_score(0.0, -20.7, 14.6) == pytest.approx(100 * 20.7 / 35.3)  # 58.64
    assert normalized_score(-21.0, -20.7, 14.6) == pytest.approx(-100 * 0.3 / 35.3)  # below random


def test_an_atari_evaluation_reports_its_human_normalized_score() -> None:
    reporter = EvaluationReporter(**human_normalised("PongNoFrameskip-v4"))
    record = reporter.describe([-21.0, -19.0])  # mean −20, std 1
    assert record["normalized_score"] == pytest.approx(100 * 0.7 / 35.3)
    assert record["normalized_score_std"] == pytest.approx(100 / 35.3)
    assert reporter.format(record) == "return -20.00 ± 1.00, human-normalized score 2.0 ± 2.8"  # 1.98, 2.83
    assert human_normalised("CartPole-v1") == {}
    plain = EvaluationReporter(**human_normalised("CartPole-v1"))
    assert plain.format(plain.describe([-21.0, -19.0])) == "return -20.00 ± 1.00"
