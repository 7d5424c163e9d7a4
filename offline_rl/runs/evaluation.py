"""Evaluation reporting shared by the examples: mean ± std return, the normalised score (D4RL's, or Atari's
human-normalised one), and where an algorithm can say it, its critics' estimate of the episodes'
discounted return beside that return."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from offline_rl.envs.scores import atari_reference_scores, normalized_score

if TYPE_CHECKING:
    from tianshou.data import CollectStats

    from offline_rl.algorithms.value_check import StartValues

log = logging.getLogger(__name__)


def human_normalised(task: str) -> dict[str, Any]:
    """`EvaluationReporter`'s score settings for an Atari game: its human-normalised score, 0 at a random
    agent's mean return and 100 at a professional tester's (`offline_rl.envs.scores.ATARI_REFERENCE_SCORES`),
    which Atari results are compared by; none for other tasks."""

    scores = atari_reference_scores(task)  # the rule the results tables label their rows by, too
    if scores is None:
        return {}
    return {
        "ref_min": scores[0],
        "ref_max": scores[1],
        "score_name": "human-normalized score",
        "score_ends": ("a random agent", "a human tester"),
    }


StartValuesOf = Callable[[np.ndarray, Sequence[np.ndarray]], "StartValues | None"]
"""(first observations, rewards per episode) -> the critics' estimates and the discounted returns
(`CQLSAC.start_values`, `CQLQRDQN.start_values`)."""


def counted(count: int, noun: str) -> str:
    """`count` `noun`s, in the singular for one ("1 episode", "2 episodes")."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


@dataclass
class EvaluationReporter:
    """Tianshou `compute_score_fn` that also prints and records each evaluation.

    Tianshou's trainer evaluates once before its first epoch and takes that as the best so far
    (calling `save_best_fn`). Of untrained weights it never counts: it is reported as the starting
    point, its score is the best of the run's trained evaluations so far (−∞ at the start), and
    `current_is_initial` tells `save_best_fn` to skip it. A run resumed from the checkpoint of epoch
    E (written before that epoch's evaluation) makes it again there: `initial_counts`, it is
    evaluation E, counted, plotted and eligible as the best like any (a stop during it lost it, and
    one after it gets it again, the same). Trained evaluations are numbered by epoch; the score is
    the mean return (as Tianshou's default).
    """

    ref_min: float | None = None
    ref_max: float | None = None
    score_name: str = "normalized score"
    score_ends: tuple[str, str] = ("a random policy", "an expert")  # whose mean returns score 0 and 100
    writer: object | None = None  # a tensorboard SummaryWriter
    history: list[dict[str, float]] = field(default_factory=list)
    first_index: int = 0  # trained evaluations a resumed run had already recorded
    initial_counts: bool = False  # the evaluation before training is the resumed epoch's own, made again
    best: dict[str, float] | None = None  # the best trained evaluation (a resumed run's included)
    current_is_initial: bool = False
    updates_done: Callable[[], int] | None = None  # the x-axis of the eval/* curves (else: the index)
    seconds: float = 0.0  # time spent collecting evaluation episodes (the summary reports it apart)
    initial: dict[str, float] | None = None  # the evaluation before training (of the resumed weights)
    start_values: StartValuesOf | None = None  # the critics' estimate of each episode's discounted return
    value_units: str = ""  # the units of the value check where they are not the env's rewards
    after_evaluation: Callable[[dict[str, float]], None] | None = None  # given each trained evaluation's record
    label: str = ""  # heads each evaluation's line: "seed 3: " for one seed of a batch (--num-seeds)
    says_scale: bool = True  # under its first score, what 0 and 100 are (one seed of a batch says it for all)
    _initial_pending: bool = True
    _scale_said: bool = False

    @property
    def next_index(self) -> int:
        """The number the next evaluation is printed with: the one before training is numbered by the
        epoch it starts from (0, or a resumed run's), the trained ones by their epoch."""
        if self._initial_pending and not self.initial_counts:
            return self.first_index
        return self.first_index + len(self.history) + 1

    @property
    def next_is_initial(self) -> bool:
        return self._initial_pending

    def resume_mid_epoch(self) -> None:
        """The run goes on inside an epoch, after its last evaluation: none is made before training."""
        self._initial_pending = False

    @property
    def latest_is_best(self) -> bool:
        """Whether the evaluation just made is a trained one and the best so far (`policy.pth` is due)."""
        return not self.current_is_initial and bool(self.history) and self.best is self.history[-1]

    @property
    def best_epoch(self) -> int | None:
        return None if self.best is None else self.best.get("epoch")

    def step_of(self, index: int) -> int:
        """The step evaluation `index`'s figures are logged at, while it runs or as it ends: the updates
        done (`updates_done`), else the index."""
        return self.updates_done() if self.updates_done is not None else index

    @property
    def best_score(self) -> float:
        return self.best["return_mean"] if self.best is not None else -math.inf

    def describe(self, returns: np.ndarray) -> dict[str, float]:
        mean, std = float(np.mean(returns)), float(np.std(returns))
        record = {"return_mean": mean, "return_std": std, "episodes": float(len(returns))}
        if self.ref_min is not None and self.ref_max is not None:
            record["normalized_score"] = normalized_score(mean, self.ref_min, self.ref_max)
            record["normalized_score_std"] = 100.0 * std / (self.ref_max - self.ref_min)
        return record

    def format(self, record: dict[str, float]) -> str:
        text = f"return {record['return_mean']:.2f} ± {record['return_std']:.2f}"
        if "normalized_score" in record:
            text += f", {self.score_name} {record['normalized_score']:.1f} ± {record['normalized_score_std']:.1f}"
        return text

    def _say_scale(self, record: dict[str, float]) -> None:
        """Once, under the first score: what its 0 and 100 are (a random policy scores about 0, whatever
        the data; a first look at random data scores a few points)."""
        if self._scale_said or not self.says_scale or "normalized_score" not in record:
            return
        self._scale_said = True
        low, high = self.score_ends
        log.info(
            f"({self.score_name}: 0 is the mean return of {low}, {self.ref_min:.1f}; 100 that of {high}, "
            f"{self.ref_max:.1f})"
        )

    def value_check(self, stats: CollectStats) -> dict[str, float]:
        """The mean discounted return of the episodes and the critics' mean estimate of it, where the
        algorithm gives one (`start_values`) and the evaluation's own loop kept the episodes."""
        from offline_rl.runs.evaluation_collector import (
            episode_record,  # heavy (Tianshou, torch): loaded only when used
        )

        episodes = episode_record(stats)
        values = self.start_values(episodes.start_obs, episodes.rewards) if self.start_values and episodes else None
        if values is None:
            return {}
        self.value_units = values.rewards
        return {"value_estimate": float(np.mean(values.estimated)), "discounted_return": float(np.mean(values.actual))}

    def format_value_check(self, record: dict[str, float]) -> str:
        if "value_estimate" not in record:
            return ""
        actual, estimated = record["discounted_return"], record["value_estimate"]
        units = f" ({self.value_units})" if self.value_units else ""
        return f"; discounted return {actual:.2f}, the critics' estimate {estimated:.2f}{units}"

    def __call__(self, stats: CollectStats) -> float:
        record = self.describe(np.asarray(stats.returns, dtype=np.float64)) | self.value_check(stats)
        self.seconds += float(stats.collect_time)
        played = counted(int(record["episodes"]), "episode")
        initial, self._initial_pending = self._initial_pending, False
        self.current_is_initial = initial and not self.initial_counts
        text = self.format(record) + self.format_value_check(record)
        if initial:
            self.initial = record
        if self.current_is_initial:
            log.info(f"{self.label}evaluation before training ({played}): {text}")
            self._say_scale(record)
            return self.best_score
        index = self.first_index + len(self.history) + 1
        record["epoch"] = index
        self.history.append(record)
        log.info(f"{self.label}evaluation {index}{' of the resumed weights' if initial else ''} ({played}): {text}")
        self._say_scale(record)
        if self.writer is not None:
            step = self.step_of(index)
            # the episodes too: a budget of steps (--test-steps) plays as many as fit, which varies with the play
            logged = (
                "return_mean",
                "return_std",
                "normalized_score",
                "discounted_return",
                "value_estimate",
                "episodes",
            )
            for key in logged:
                if key in record:
                    self.writer.add_scalar(f"eval/{key}", record[key], global_step=step)  # type: ignore[attr-defined]
        if record["return_mean"] > self.best_score:
            self.best = record
        if self.after_evaluation is not None:
            self.after_evaluation(record)
        return record["return_mean"]
