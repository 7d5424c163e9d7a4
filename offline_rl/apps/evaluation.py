"""Evaluation reporting shared by the examples: mean ± std return and D4RL's normalised score."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tianshou.data import CollectStats

from offline_rl.scores import normalized_score


@dataclass
class EvaluationReporter:
    """Tianshou `compute_score_fn` that also prints and records each evaluation.

    The score used to pick the best checkpoint is the mean return (as Tianshou's default).
    """

    ref_min: float | None = None
    ref_max: float | None = None
    writer: object | None = None  # a tensorboard SummaryWriter
    history: list[dict[str, float]] = field(default_factory=list)

    def describe(self, returns: np.ndarray) -> dict[str, float]:
        mean, std = float(np.mean(returns)), float(np.std(returns))
        record = {"return_mean": mean, "return_std": std, "episodes": float(len(returns))}
        if self.ref_min is not None and self.ref_max is not None:
            record["normalized_score"] = normalized_score(mean, self.ref_min, self.ref_max)
            record["normalized_score_std"] = 100.0 * std / (self.ref_max - self.ref_min)
        return record

    @staticmethod
    def format(record: dict[str, float]) -> str:
        text = f"return {record['return_mean']:.2f} ± {record['return_std']:.2f}"
        if "normalized_score" in record:
            text += f", normalized score {record['normalized_score']:.1f} ± {record['normalized_score_std']:.1f}"
        return text

    def __call__(self, stats: CollectStats) -> float:
        record = self.describe(np.asarray(stats.returns, dtype=np.float64))
        self.history.append(record)
        index = len(self.history) - 1
        print(f"evaluation {index} ({int(record['episodes'])} episodes): {self.format(record)}", flush=True)
        if self.writer is not None:
            for key in ("return_mean", "return_std", "normalized_score"):
                if key in record:
                    self.writer.add_scalar(f"eval/{key}", record[key], global_step=index)  # type: ignore[attr-defined]
        return record["return_mean"]
