"""The aggregate figures of a results table, computed by `rliable` (Agarwal et al. 2021).

Scores of one (dataset, setting) group form rliable's (runs × tasks) matrix with one task; the
interquartile mean and its 95% stratified-bootstrap percentile interval come from
`rliable.library.get_interval_estimates`, seeded so that a table is reproducible: rliable 1.2 draws
its resamples from numpy's global generator (its `random_state` does not reach them), so that
generator is seeded for the call and restored after it.
Mean and standard deviation (over seeds, population std as CORL reports) are numpy's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from offline_rl.core.errors import OfflineRLError

CONFIDENCE = 0.95
DEFAULT_REPS = 2000
"""Bootstrap replications: rliable's default is 50 000; 2000 keeps a table of many groups quick."""


@dataclass(frozen=True)
class Aggregate:
    runs: int
    mean: float
    std: float
    iqm: float
    ci_low: float
    ci_high: float


def _rliable() -> tuple[object, object]:
    try:
        from rliable import library, metrics  # heavy (rliable): loaded only when used
    except ImportError:
        raise OfflineRLError(
            'results need rliable and matplotlib: pip install -e ".[results]" (or pip install rliable matplotlib)'
        ) from None
    return library, metrics


@contextlib.contextmanager
def _seeded_global_numpy(seed: int) -> Iterator[None]:
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def aggregate(scores: np.ndarray, *, reps: int = DEFAULT_REPS, seed: int = 0) -> Aggregate:
    """Mean ± std and IQM [95% CI] of one score per run."""
    library, metrics = _rliable()
    scores = np.asarray(scores, dtype=np.float64).reshape(-1, 1)
    with _seeded_global_numpy(seed):
        points, intervals = library.get_interval_estimates(  # type: ignore[attr-defined]
            {"scores": scores},
            lambda x: np.array([metrics.aggregate_iqm(x)]),  # type: ignore[attr-defined]
            reps=reps,
            confidence_interval_size=CONFIDENCE,
        )
    low, high = intervals["scores"][:, 0]
    return Aggregate(
        runs=len(scores),
        mean=float(np.mean(scores)),
        std=float(np.std(scores)),
        iqm=float(points["scores"][0]),
        ci_low=float(low),
        ci_high=float(high),
    )


def mean_curve_interval(
    curves: np.ndarray, *, reps: int = 500, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over runs at each evaluation and its 95% bootstrap interval: `curves` is (runs × points)."""
    library, metrics = _rliable()
    curves = np.asarray(curves, dtype=np.float64)
    points = curves.shape[1]
    if len(curves) == 1:  # one run: nothing to bootstrap
        return curves[0], curves[0], curves[0]
    with _seeded_global_numpy(seed):
        points_estimates, intervals = library.get_interval_estimates(  # type: ignore[attr-defined]
            {"curves": curves[:, None, :]},
            lambda x: np.array([metrics.aggregate_mean(x[..., i]) for i in range(points)]),  # type: ignore[attr-defined]
            reps=reps,
            confidence_interval_size=CONFIDENCE,
        )
    return points_estimates["curves"], intervals["curves"][0], intervals["curves"][1]


def rank_correlation(first: np.ndarray, second: np.ndarray) -> float:
    """Spearman's ρ of two paired samples (ties share their mean rank); NaN where either is constant,
    since then no order exists to agree with."""
    from scipy.stats import spearmanr  # rliable's own dependency

    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    if len(first) < 2 or np.ptp(first) == 0 or np.ptp(second) == 0:
        return float("nan")
    return float(spearmanr(first, second).statistic)
