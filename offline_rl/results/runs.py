"""Reading runs back from their log directories: settings from `run.json`, curves from TensorBoard.

A run directory is one that `offline_rl.runs.training` wrote: `run.json` (the settings and
dataset), TensorBoard event files, and `summary.json` once it trained to its end. Event files are
read with TensorBoard's own reader, with TensorFlow kept out (`offline_rl.core.import_order`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offline_rl.cli.programs import program_recording
from offline_rl.core.errors import OfflineRLError, OfflineRLWarning
from offline_rl.core.settings import flatten
from offline_rl.data.names import combined_label
from offline_rl.envs.scores import atari_reference_scores, scored_atari_game
from offline_rl.runs.files import RUN_SETTINGS_FILE, RUN_SUMMARY_FILE, diverged_reason, fqe_value

CONSERVATISM_TAGS = ("q_data", "q_random", "q_policy")
# Settings that never tell runs apart as "settings": where a run is, how it runs, and its data/seed.
# `matmul_precision` is not among them: TF32 or bf16 products are other arithmetic, which a table
# comparing precisions (float32 against TF32, as TF32's learning check does) must keep apart.
_NOT_SETTINGS = {
    "seed",
    "num_seeds",  # seeds trained in one batched update are the runs separate trials would be
    "dataset",
    "load_buffer_name",
    "logdir",
    "resume_path",
    "watch",
    "export_policy",
    "render",
    "save_video",
    "video_interval",
    "video_quality",
    "device",
    "threads",
    "cpu_products",
    "download",
    "log_interval",
    "progress",
    "logger",
    "wandb_project",
    "wandb_group",
    "wandb_name",
}


@dataclass
class Evaluation:
    updates: int
    return_mean: float
    return_std: float
    normalized_score: float | None

    @property
    def score(self) -> float:
        """The normalised score where the task has reference returns (D4RL's, or an Atari game's
        human-normalised score), else the return."""
        return self.normalized_score if self.normalized_score is not None else self.return_mean


@dataclass
class Run:
    path: Path
    settings: dict[str, Any]  # every leaf setting, by field name
    dataset: str
    seed: int
    finished: bool
    evaluations: list[Evaluation] = field(default_factory=list)
    conservatism: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    setting: str = "default"  # filled in by `label_settings`: what tells it apart from other runs
    diverged: str | None = None
    """Why the run stopped, when its training diverged (`RUN_DIVERGED_FILE`)."""
    fqe_value: float | None = None
    """Its final policy's fitted Q evaluation (`RUN_FQE_FILE`), when there is one."""
    program: str = ""
    """The program that wrote it (`d4rl_iql`), as its recorded settings name it; empty when they do not."""

    @property
    def scored(self) -> bool:
        """Whether the run has a score: evaluated, and not stopped by divergence (its last evaluation
        before the NaN is not where it ended)."""
        return bool(self.evaluations) and self.diverged is None

    @property
    def normalized(self) -> bool:
        return bool(self.evaluations) and all(e.normalized_score is not None for e in self.evaluations)

    @property
    def human_normalized(self) -> bool:
        """Whether its normalised score is an Atari game's human-normalised one rather than D4RL's."""
        return self.normalized and atari_reference_scores(str(self.settings.get("task") or "")) is not None


def score_name(runs: Iterable[Run]) -> str:
    """The name of the score runs are compared by (`Evaluation.score`): `normalized score` (D4RL's),
    `human-normalized score` (an Atari game's), or `return` where some run has no reference returns."""
    runs = list(runs)
    if not all(run.normalized for run in runs):
        return "return"
    return "human-normalized score" if all(run.human_normalized for run in runs) else "normalized score"


def with_settings_added_since(recorded: dict[str, Any]) -> dict[str, Any]:
    """A run's recorded settings, with those its program gained since the run at their defaults. A new
    setting's default keeps what the program did before it (`--test-steps 0`: episodes, `--cnn
    nature`), and without it a table over runs from before and after an upgrade would split one
    setting into two rows, `test_steps=None` and `test_steps=0`."""

    program = program_recording(recorded)
    return {**program.default_values(), **recorded} if program is not None else recorded


def dataset_of(settings: dict[str, Any], info: dict[str, Any]) -> str:
    """The name a run's data goes by in tables: its `--dataset`, or its buffer files as the run's own lines
    name them (`ckpt_{0-50}-first_0.01.hdf5` for a DQN Replay run's 51), after the Atari game they were
    played on where their names do not say it: every game's DQN Replay and RL Unplugged files are named
    alike, and Pong's runs must not be averaged with Breakout's."""
    dataset = settings.get("dataset")
    if dataset:
        names = dataset if isinstance(dataset, list | tuple) else [dataset]
        return " ".join(Path(str(name)).name for name in names)
    buffers = settings.get("load_buffer_name")
    if buffers:
        names = buffers if isinstance(buffers, list | tuple) else [buffers]
        label = combined_label([Path(str(name)).name for name in names], joiner=" ")
        game = scored_atari_game(str(settings.get("task") or ""))
        return f"{game}/{label}" if game and game.lower() not in label.lower() else label
    return str(info.get("name") or settings.get("task") or "unknown")


def find_run_dirs(logdirs: Iterable[str | Path]) -> list[Path]:
    found: set[Path] = set()
    for logdir in map(Path, logdirs):
        if not logdir.exists():
            raise OfflineRLError(f"{logdir}: no such directory")
        found.update(path.parent for path in logdir.rglob(RUN_SETTINGS_FILE))
    return sorted(found)


def _scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from offline_rl.core.import_order import (
        use_tensorboard_without_tensorflow,  # heavy (TensorBoard): loaded only when used
    )

    use_tensorboard_without_tensorflow()
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,  # heavy (TensorBoard): loaded only when used
    )

    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    by_step: dict[str, dict[int, float]] = {}
    for tag in accumulator.Tags().get("scalars", []):
        for event in accumulator.Scalars(tag):  # a resumed run logs into the same directory: last write wins
            by_step.setdefault(tag, {})[int(event.step)] = float(event.value)
    return {tag: sorted(values.items()) for tag, values in by_step.items()}


def read_run(run_dir: Path) -> Run:
    try:
        saved = json.loads((run_dir / RUN_SETTINGS_FILE).read_text())
    except (OSError, ValueError) as error:
        raise OfflineRLError(f"{run_dir / RUN_SETTINGS_FILE}: not a readable run record ({error})") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("config") or {}, dict):
        raise OfflineRLError(
            f"{run_dir / RUN_SETTINGS_FILE}: not a run record (expected a JSON object whose 'config' holds the "
            "run's settings, as the examples write it)"
        )
    recorded = flatten(saved.get("config") or {})
    settings = with_settings_added_since(recorded)
    program = program_recording(recorded)
    scalars = _scalars(run_dir)
    normalized = dict(scalars.get("eval/normalized_score", []))
    stds = dict(scalars.get("eval/return_std", []))
    evaluations = [
        Evaluation(step, value, stds.get(step, float("nan")), normalized.get(step))
        for step, value in scalars.get("eval/return_mean", [])
    ]
    conservatism = {tag: scalars[f"update/{tag}"] for tag in CONSERVATISM_TAGS if f"update/{tag}" in scalars}
    return Run(
        path=run_dir,
        settings=settings,
        dataset=dataset_of(settings, saved.get("dataset_info") or {}),
        seed=int(settings.get("seed", 0)),
        finished=(run_dir / RUN_SUMMARY_FILE).is_file(),
        evaluations=evaluations,
        conservatism=conservatism,
        diverged=diverged_reason(run_dir),
        fqe_value=fqe_value(run_dir),
        program=Path(program.command).stem if program is not None else "",
    )


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(map(str, value))
    return str(value)


def label_settings(runs: list[Run]) -> None:
    """Name each run's setting by the values that tell runs of one dataset apart (seed aside), named
    alike on every dataset. Where runs of several programs share a dataset (a table of algorithms), they
    are named by their program first, then by what tells that program's runs of one dataset apart. A
    value that only follows the dataset (its task) labels nothing."""
    programs_of: dict[str, set[str]] = {}
    for run in runs:
        programs_of.setdefault(run.dataset, set()).add(run.program)
    by_program: dict[str, list[Run]] = {}
    for run in runs:
        by_program.setdefault(run.program, []).append(run)
    for program_runs in by_program.values():
        keys = sorted({key for run in program_runs for key in run.settings} - _NOT_SETTINGS)
        by_dataset: dict[str, list[Run]] = {}
        for run in program_runs:
            by_dataset.setdefault(run.dataset, []).append(run)

        def varies_within_a_dataset(key: str, by_dataset: dict[str, list[Run]] = by_dataset) -> bool:
            return any(len({_shown(run.settings.get(key)) for run in group}) > 1 for group in by_dataset.values())

        varying = [key for key in keys if varies_within_a_dataset(key)]
        for run in program_runs:
            parts = [f"{key}={_shown(run.settings.get(key))}" for key in varying]
            if len(programs_of[run.dataset]) > 1:
                parts.insert(0, run.program or "another program")
            run.setting = " ".join(parts) or "default"


def read_runs(logdirs: Iterable[str | Path]) -> list[Run]:
    """Every run under `logdirs` with at least one evaluation or stopped by divergence, labelled by its setting."""
    found = list(map(read_run, find_run_dirs(logdirs)))
    runs = [run for run in found if run.evaluations or run.diverged]
    without = [str(run.path) for run in found if not (run.evaluations or run.diverged)]
    if runs and without:  # started and not yet evaluated, or a damaged TensorBoard log
        warnings.warn(
            f"left out {len(without)} run folder(s) whose TensorBoard logs hold no evaluation: "
            f"{', '.join(without[:3])}{f' and {len(without) - 3} more' if len(without) > 3 else ''}",
            OfflineRLWarning,
            stacklevel=2,
        )
    if not runs:
        raise OfflineRLError(
            f"{' '.join(map(str, logdirs))}: no run with an evaluation found (runs write run.json next to their "
            "TensorBoard logs)"
        )
    label_settings(runs)
    return runs


def groups(runs: list[Run]) -> Iterator[tuple[str, str, list[Run]]]:
    """(dataset, setting, runs) in a stable order."""
    keys = sorted({(run.dataset, run.setting) for run in runs})
    for dataset, setting in keys:
        yield (
            dataset,
            setting,
            sorted((r for r in runs if (r.dataset, r.setting) == (dataset, setting)), key=lambda r: r.seed),
        )
