"""`results.csv` (one row per run and evaluation) and `results.md` (one row per dataset and setting).

The headline is the final score: the last evaluation (or, with `last_k` > 1, the mean of the last k,
CORL's convention), as CORL, d3rlpy and the papers report. The best evaluation over training is
shown beside it and labelled optimistic: picking the best of many noisy evaluations overstates a
policy's score.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from offline_rl.core.files import atomic_path
from offline_rl.results.runs import Run, groups, score_name
from offline_rl.results.score_statistics import DEFAULT_REPS, Aggregate, aggregate, rank_correlation

CSV_COLUMNS = (
    "dataset",
    "setting",
    "seed",
    "run",
    "finished",
    "evaluation",
    "updates",
    "return_mean",
    "return_std",
    "normalized_score",
    "fqe_value",  # the run's final policy's fitted Q evaluation, on each of its rows; empty where none
)


def final_score(run: Run, last_k: int = 1) -> float:
    return float(np.mean([e.score for e in run.evaluations[-last_k:]]))


def best_score(run: Run) -> float:
    return max(e.score for e in run.evaluations)


@dataclass(frozen=True)
class GroupRow:
    dataset: str
    setting: str
    score_name: str
    final: Aggregate | None
    """Over the scored runs; None when every run of the group diverged."""
    best: Aggregate | None
    updates: int | None
    finished: int
    runs: int
    diverged: int
    fqe: list[float] = field(default_factory=list)
    """The fitted Q evaluations of the scored runs' final policies, where they were estimated."""
    fqe_final: list[float] = field(default_factory=list)
    """Those runs' final scores, paired with `fqe`."""


def group_rows(runs: list[Run], *, last_k: int = 1, reps: int = DEFAULT_REPS) -> list[GroupRow]:
    """One row per dataset and setting. Runs stopped by divergence are counted, not scored: their
    last evaluation before the NaN is not where they ended, and a score for them would hide it."""
    rows = []
    for dataset, setting, members in groups(runs):
        scored = [r for r in members if r.scored]
        rows.append(
            GroupRow(
                dataset=dataset,
                setting=setting,
                score_name=score_name(scored),
                final=aggregate(np.array([final_score(r, last_k) for r in scored]), reps=reps) if scored else None,
                best=aggregate(np.array([best_score(r) for r in scored]), reps=reps) if scored else None,
                updates=min(r.evaluations[-1].updates for r in scored) if scored else None,
                finished=sum(r.finished for r in members),
                runs=len(members),
                diverged=sum(r.diverged is not None for r in members),
                fqe=[r.fqe_value for r in scored if r.fqe_value is not None],
                fqe_final=[final_score(r, last_k) for r in scored if r.fqe_value is not None],
            )
        )
    return rows


def write_csv(runs: list[Run], path: Path) -> Path:
    with atomic_path(path) as part, part.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for dataset, setting, members in groups(runs):
            for run in members:
                for index, e in enumerate(run.evaluations, start=1):
                    normalized = "" if e.normalized_score is None else f"{e.normalized_score:.6g}"
                    estimate = "" if run.fqe_value is None else f"{run.fqe_value:.6g}"
                    figures = [index, e.updates, f"{e.return_mean:.6g}", f"{e.return_std:.6g}", normalized, estimate]
                    writer.writerow([dataset, setting, run.seed, str(run.path), run.finished, *figures])
    return path


def markdown_table(rows: Sequence[GroupRow], *, last_k: int = 1) -> str:
    final = "last evaluation" if last_k == 1 else f"mean of the last {last_k} evaluations"
    estimated = any(row.fqe for row in rows)  # the FQE column only where some run was estimated
    lines = [
        f"Final score: the {final} of each run; mean ± std over seeds, and the interquartile mean with its "
        "95% stratified-bootstrap CI (rliable). Score: the normalised score where the task has reference "
        "returns (D4RL's: 0 random, 100 expert; an Atari game's human-normalized: 0 random, 100 human), else "
        "the return. Best: the best evaluation during training (optimistic).",
        *(
            ["Runs whose training diverged (stopped on NaN or inf) are counted, and left out of the scores."]
            if any(row.diverged for row in rows)
            else []
        ),
        "",
        "| dataset | setting | runs (finished) | updates | score | final: mean ± std | final: IQM [95% CI] "
        "| best (optimistic): mean ± std |" + (" FQE estimate: mean ± std |" if estimated else ""),
        "|---|---|---|---|---|---|---|---|" + ("---|" if estimated else ""),
    ]
    for row in rows:
        f, b = row.final, row.best
        counts = f"{row.runs} ({row.finished}" + (f"; {row.diverged} diverged)" if row.diverged else ")")
        fqe = f" {_fqe_cell(row)} |" if estimated else ""
        if f is None or b is None:
            lines.append(f"| {row.dataset} | {row.setting} | {counts} | - | - | diverged | diverged | diverged |{fqe}")
            continue
        lines.append(
            f"| {row.dataset} | {row.setting} | {counts} | {row.updates} | {row.score_name} "
            f"| {_mean_std(f)} | {_iqm_interval(f)} | {_mean_std(b)} |{fqe}"
        )
    if estimated:
        lines.extend(["", *offline_selection(rows)])
    return "\n".join(lines) + "\n"


def _fqe_cell(row: GroupRow) -> str:
    if not row.fqe:
        return "-"
    counted = "" if len(row.fqe) == row.runs - row.diverged else f" ({len(row.fqe)} estimated)"
    if len(row.fqe) == 1:
        return f"{row.fqe[0]:.1f} (1 run){counted}"
    return f"{np.mean(row.fqe):.1f} ± {np.std(row.fqe):.1f}{counted}"


def offline_selection(rows: Sequence[GroupRow]) -> list[str]:
    """What fitted Q evaluation would have picked without playing a policy (Paine et al. 2020): per
    dataset, the setting with the highest mean estimate beside the one with the highest mean final
    score, and how well the estimates order the runs (Spearman's ρ against their final scores)."""
    lines = [
        "FQE estimate: fitted Q evaluation of each run's final policy on its data (its discounted return from "
        "the data's episode starts; no env step). Offline selection, per dataset:"
    ]
    for dataset in sorted({row.dataset for row in rows}):
        estimated = [row for row in rows if row.dataset == dataset and row.fqe]
        if not estimated:
            continue
        estimates = [value for row in estimated for value in row.fqe]
        finals = [value for row in estimated for value in row.fqe_final]
        rho = rank_correlation(np.array(estimates), np.array(finals))
        runs = f"{len(estimates)} run" + ("" if len(estimates) == 1 else "s")
        agreement = f"Spearman's ρ of estimate and final score over its {runs}: " + (
            "undefined (one of them is the same for every run)" if np.isnan(rho) else f"{rho:.2f}"
        )
        if len(estimated) < 2:
            lines.append(f"- {dataset}: {agreement}.")
            continue
        picked = max(estimated, key=lambda row: float(np.mean(row.fqe)))
        best = max(estimated, key=lambda row: float(np.mean(row.fqe_final)))
        picked_score = float(np.mean(picked.fqe_final))
        lines.append(
            f"- {dataset}: FQE picks {picked.setting} (final score {picked_score:.1f}); the best final score is "
            f"{best.setting}'s ({float(np.mean(best.fqe_final)):.1f}). {agreement}."
        )
    return lines


def _mean_std(scores: Aggregate) -> str:
    """`mean ± std`; one run has no spread to show, and "± 0.0" would claim one."""
    return f"{scores.mean:.1f} (1 run)" if scores.runs == 1 else f"{scores.mean:.1f} ± {scores.std:.1f}"


def _iqm_interval(scores: Aggregate) -> str:
    """`IQM [95% CI]`; a bootstrap over one run gives the run's own score as both ends, not an interval."""
    if scores.runs == 1:
        return f"{scores.iqm:.1f} (1 run: no interval)"
    return f"{scores.iqm:.1f} [{scores.ci_low:.1f}, {scores.ci_high:.1f}]"


def write_markdown(rows: Sequence[GroupRow], path: Path, *, last_k: int = 1) -> Path:
    with atomic_path(path) as part:
        part.write_text(markdown_table(rows, last_k=last_k))
    return path
