"""Learning curves (`scores.png`) and conservatism at work (`conservatism.png`), one panel per dataset.

Scores: the mean over seeds at each evaluation, shaded by its 95% bootstrap interval (rliable), one
line per setting. Conservatism: CQL's Q-values on the data's actions (`q_data`), on uniformly random
actions (`q_random`) and on the policy's (`q_policy`), averaged over seeds: the conservative term
pushes the random ones below the data's, and this shows by how much.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from offline_rl.core.files import atomic_path
from offline_rl.results.runs import CONSERVATISM_TAGS, Run, score_name
from offline_rl.results.score_statistics import mean_curve_interval

_LINE_STYLES = {"q_data": "-", "q_random": "--", "q_policy": ":"}


def _pyplot() -> Any:
    import matplotlib  # heavy (matplotlib): loaded only when used

    matplotlib.use("Agg")  # files only: no display on servers and in CI
    import matplotlib.pyplot as plt  # heavy (matplotlib): loaded only when used

    return plt


def _panels(plt: Any, count: int) -> tuple[Any, list[Any]]:
    columns = min(count, 3)
    rows = -(-count // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.8 * rows), squeeze=False)
    flat = list(axes.flat)
    for extra in flat[count:]:
        extra.remove()
    return figure, flat[:count]


def _aligned(curves: list[list[tuple[int, float]]]) -> tuple[np.ndarray, np.ndarray]:
    """Steps every run reached, and the runs' values there (runs × steps)."""
    common = sorted(set.intersection(*(set(step for step, _ in curve) for curve in curves)))
    values = np.array([[dict(curve)[step] for step in common] for curve in curves], dtype=np.float64)
    return np.array(common), values


Groups = list[tuple[str, list[Run]]]  # (setting, its runs), settings in order


def _panel_per_dataset(runs: list[Run]) -> tuple[Any, list[tuple[Any, str, Groups]]]:
    """A figure with one panel per dataset, and each panel's scored runs grouped by setting (a run
    stopped by divergence would cut its group's curve at its last evaluation)."""
    datasets = sorted({run.dataset for run in runs})
    figure, axes = _panels(_pyplot(), len(datasets))
    panels = []
    for ax, dataset in zip(axes, datasets, strict=True):
        members = [run for run in runs if run.dataset == dataset and run.scored]
        settings = sorted({run.setting for run in members})
        panels.append((ax, dataset, [(s, [r for r in members if r.setting == s]) for s in settings]))
    return figure, panels


def _finish(figure: Any, ax_labels: list[tuple[Any, str, str]], title: str) -> Any:
    for ax, dataset, ylabel in ax_labels:
        ax.set_title(dataset)
        ax.set_xlabel("gradient updates")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    return figure


SCORE_LABELS = {
    "normalized score": "D4RL normalised score",
    "human-normalized score": "human-normalised score",
    "return": "return",
}
"""A score's axis label, by `score_name`."""


def score_figure(runs: list[Run]) -> Any:
    figure, panels = _panel_per_dataset(runs)
    labels = []
    for ax, dataset, groups in panels:
        panel_runs = [run for _, group in groups for run in group]
        for setting, group in groups:
            steps, values = _aligned([[(e.updates, e.score) for e in run.evaluations] for run in group])
            if len(steps) == 0:
                continue
            mean, low, high = mean_curve_interval(values)
            (line,) = ax.plot(steps, mean, label=f"{setting} ({len(group)} seeds)")
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.2)
        if ax.get_lines():
            ax.legend(fontsize="small", title="mean, 95% CI", title_fontsize="small")
        labels.append((ax, dataset, SCORE_LABELS[score_name(panel_runs)]))
    return _finish(figure, labels, "Evaluation score during training")


def conservatism_figure(runs: list[Run]) -> Any:
    figure, panels = _panel_per_dataset(runs)
    labels = []
    for ax, dataset, groups in panels:
        for index, (setting, group) in enumerate(groups):
            for number, tag in enumerate(CONSERVATISM_TAGS):
                curves = [run.conservatism[tag] for run in group if run.conservatism.get(tag)]
                if len(curves) < len(group):
                    continue
                steps, values = _aligned(curves)
                # one setting: a colour per curve; several: a colour per setting, a line style per curve
                color = f"C{number}" if len(groups) == 1 else f"C{index}"
                ax.plot(steps, values.mean(axis=0), _LINE_STYLES[tag], color=color, label=f"{tag}, {setting}")
        if ax.get_lines():
            ax.legend(fontsize="small")
        labels.append((ax, dataset, "mean Q-value (mean over seeds)"))
    return _finish(figure, labels, "Conservatism: Q on data, random and policy actions")


def save_figure(figure: Any, path: Path) -> Path:
    plt = _pyplot()
    with atomic_path(path) as part:
        figure.savefig(part, format="png", dpi=110)
    plt.close(figure)
    return path
