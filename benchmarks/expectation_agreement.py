"""Whether two estimators of the same quantity, sampled independently, share their expectation.

`d3rlpy_agreement.py` compares our updates with d3rlpy's where both draw random actions, so their
losses and gradients are equal only on average. Each comparison here is a z-score of the difference
of the two sides' means over their draws, z = (mean ours − mean theirs) / √(se² + se²): where the
expectations agree, a standard normal draw. A scalar agrees at |z| < 4. A gradient's coordinates
move together, so a vector is judged along five fixed directions, each a scalar with a proper z;
coordinates drawn independently of each other (one per state of a batch) must also keep their mean z²
within chance of 1. A coordinate drawn without noise on either side must match to float rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Agreement:
    """How far two sets of per-trial draws are from sharing their expectation."""

    z: np.ndarray
    """per coordinate: (mean ours − mean theirs) / standard error of that difference"""
    projected_z: np.ndarray
    """the same for the draws' projections on a few fixed directions (a vector's only)"""
    relative_difference: float
    """‖mean ours − mean theirs‖ / ‖mean theirs‖"""
    independent: bool = False
    """whether the coordinates are drawn independently of each other (one per state of the batch)"""

    @property
    def mean_z_squared(self) -> float:
        return float(np.mean(self.z**2))

    @property
    def max_abs_z(self) -> float:
        return float(np.max(np.abs(self.z)))

    def agrees(self) -> bool:
        """|z| < 4 for a scalar or a projection. Independent coordinates (per state) also need their mean
        z² within 4 standard deviations of 1 (√(2/n) each). A gradient's coordinates are strongly
        correlated, so their mean z² has no known spread; each projection on a fixed direction is a
        scalar estimator with a proper z. A coordinate that should be exact must be."""
        if self.z.size == 1:
            return self.max_abs_z < 4.0
        chance = 1.0 + 4.0 * math.sqrt(2.0 / self.z.size)
        spread_ok = not self.independent or self.mean_z_squared < chance
        return bool(np.all(np.isfinite(self.z)) and np.max(np.abs(self.projected_z)) < 4.0 and spread_ok)

    def describe(self) -> str:
        if self.z.size == 1:
            return f"|z| {self.max_abs_z:.2f}"
        return (
            f"along {self.projected_z.size} directions max |z| {np.max(np.abs(self.projected_z)):.2f} "
            f"(its {self.z.size} coordinates: mean z² {self.mean_z_squared:.2f})"
        )


def z_scores(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """(mean ours − mean theirs) / its standard error, per column of two (trials, columns) arrays; a
    column drawn without noise on both sides is 0 where the two agree to float rounding, else inf."""
    difference = ours.mean(0) - theirs.mean(0)
    error = np.sqrt(ours.var(0, ddof=1) / len(ours) + theirs.var(0, ddof=1) / len(theirs))
    exact = error <= 1e-12 * (np.abs(ours.mean(0)) + np.abs(theirs.mean(0))) + 1e-300  # no noise but rounding
    rounding = 1e-5 * np.abs(theirs.mean(0)) + 1e-7
    exact_z = np.where(np.abs(difference) <= rounding, 0.0, np.inf)
    return np.where(exact, exact_z, difference / np.where(exact, 1, error))


def agreement(ours: np.ndarray, theirs: np.ndarray, directions: int = 5, *, independent: bool = False) -> Agreement:
    """Compare (trials, ...) draws of two estimators of the same quantity: coordinate by coordinate,
    and along `directions` − 1 random directions (fixed seed) and the two sides' summed means (where
    the expectations agree, that sum is independent of the difference tested, so the direction taken
    from the draws does not bias it, as `theirs`' mean alone would)."""
    ours = np.asarray(ours, np.float64).reshape(len(ours), -1)
    theirs = np.asarray(theirs, np.float64).reshape(len(theirs), -1)
    z = z_scores(ours, theirs)
    projected = np.zeros(0)
    if z.size > 1:
        random = np.random.default_rng(0).standard_normal((z.size, directions - 1))
        basis = np.column_stack([ours.mean(0) + theirs.mean(0), random])
        basis /= np.maximum(np.linalg.norm(basis, axis=0), 1e-300)
        projected = z_scores(ours @ basis, theirs @ basis)
    mean_theirs = float(np.linalg.norm(theirs.mean(0)))
    relative = float(np.linalg.norm(ours.mean(0) - theirs.mean(0)) / max(mean_theirs, 1e-12))
    return Agreement(z, projected, relative, independent)
