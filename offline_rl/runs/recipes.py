"""D4RL's recipe for its locomotion datasets, made on any machine: `python -m offline_rl.collect --recipe
hopper-medium --output hopper-medium.hdf5`.

D4RL (Fu et al. 2020, arXiv:2004.07219, section 5 and its `scripts/generation`) trains a SAC policy
online on each task, then writes:

- random: 1M transitions of uniform actions;
- medium: 1M transitions of a policy trained to about a third of the expert's return (D4RL stops
  training early; here, the earliest snapshot whose evaluation reaches a third of the expert's), its
  actions drawn from the policy's Gaussian as D4RL's were;
- medium-replay: the replay buffer the training recorded until that policy;
- expert: 1M transitions of the fully trained policy (here, the run's last snapshot);
- medium-expert: the medium and the expert transitions, one after the other.

The policies come from a behaviour run of `examples/mujoco_sac.py` (its `snapshots/returns.json` lists
each snapshot with its evaluation), given with `--behaviour-run`. Each file is made deterministically
from its policy file and `--seed` (`collect_dataset`), and records the recipe beside how it was made.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import h5py
import numpy as np

from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import check_output
from offline_rl.core.settings import setting
from offline_rl.data.hdf5_files import hdf5_for_reading
from offline_rl.runs.dataset_generation import CollectConfig, collect_dataset
from offline_rl.runs.dataset_writers import RANDOM_POLICY, Provenance, write_d4rl_columns

log = logging.getLogger(__name__)

RECIPE_TASKS = {"halfcheetah": "HalfCheetah-v4", "hopper": "Hopper-v4", "walker2d": "Walker2d-v4", "ant": "Ant-v4"}
RECIPE_KINDS = ("random", "medium", "medium-replay", "expert", "medium-expert")
MEDIUM_FRACTION = 1 / 3
"""D4RL's medium policy: about a third of the expert's return."""


@dataclass(frozen=True)
class RecipeCollectConfig(CollectConfig):
    """`python -m offline_rl.collect`'s flags: a collection, or one of D4RL's recipes (`--recipe`)."""

    FLAG_GROUP: ClassVar[str] = "collection"

    recipe: str | None = setting(
        None,
        "one of D4RL's locomotion datasets, made the D4RL way: <env>-<kind>, e.g. hopper-medium",
        details=(
            f"env: {', '.join(RECIPE_TASKS)}; kind: {', '.join(RECIPE_KINDS)}. Sets --task and --policy; "
            "--size is each collected part's size (D4RL: 1000000)."
        ),
    )
    behaviour_run: Path | None = setting(
        None, "with --recipe: the run folder of examples/mujoco_sac.py whose snapshots the recipe plays"
    )


@dataclass(frozen=True)
class Recipe:
    env: str  # D4RL's name of the environment: "hopper"
    kind: str  # one of RECIPE_KINDS

    @property
    def name(self) -> str:
        return f"{self.env}-{self.kind}"

    @property
    def task(self) -> str:
        return RECIPE_TASKS[self.env]


def parse_recipe(name: str) -> Recipe:
    env, _, kind = name.strip().lower().partition("-")
    if env not in RECIPE_TASKS or kind not in RECIPE_KINDS:
        envs, kinds = "|".join(RECIPE_TASKS), "|".join(RECIPE_KINDS)
        raise OfflineRLError(f"--recipe {name}: expected <env>-<kind>, env one of {envs}, kind one of {kinds}")
    return Recipe(env, kind)


@dataclass(frozen=True)
class BehaviourRun:
    """A run folder of `examples/mujoco_sac.py`: its snapshots, each with its evaluation."""

    folder: Path
    snapshots: list[dict[str, Any]]

    @classmethod
    def read(cls, folder: Path, task: str) -> BehaviourRun:
        index = folder / "snapshots" / "returns.json"
        if not index.is_file():
            raise OfflineRLError(
                f"--behaviour-run {folder}: no snapshots/returns.json; expected the run folder of "
                f"examples/mujoco_sac.py --task {task}"
            )
        snapshots = _json(index)
        if not isinstance(snapshots, list) or not all(_is_snapshot(entry) for entry in snapshots):
            raise OfflineRLError(f"{index}: {SNAPSHOT_ENTRY}")
        if not snapshots:
            raise OfflineRLError(f"--behaviour-run {folder}: no snapshot yet (each evaluation leaves one)")
        recorded = _json(folder / "run.json") if (folder / "run.json").is_file() else {}
        config = recorded.get("config") if isinstance(recorded, dict) else None
        trained_on = config.get("task") if isinstance(config, dict) else None
        if trained_on not in (None, task):
            raise OfflineRLError(f"--behaviour-run {folder}: trained on {trained_on}, not {task}")
        return cls(folder, snapshots)

    def file(self, snapshot: dict[str, Any]) -> Path:  # a plain name, checked: inside snapshots/
        return self.folder / "snapshots" / str(snapshot["file"])

    def expert(self) -> dict[str, Any]:
        """The fully trained policy: the run's last snapshot."""
        return self.snapshots[-1]

    def medium(self) -> dict[str, Any]:
        """The earliest snapshot whose mean return reaches a third of the expert's (on D4RL's normalised
        scale where the task has one, so that a negative random return counts as its zero)."""
        expert = self.expert()
        scale = "normalized_score" if "normalized_score" in expert else "return_mean"
        bar = MEDIUM_FRACTION * float(expert[scale])
        return next(snapshot for snapshot in self.snapshots if float(snapshot[scale]) >= bar)


SNAPSHOT_ENTRY = (
    "expected examples/mujoco_sac.py's list of snapshots: each with an integer epoch and env_steps, a file "
    "name (epoch-<E>.pt) and a numeric return_mean (and normalized_score)"
)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise OfflineRLError(f"{path}: not readable JSON ({error})") from None


def _is_snapshot(entry: Any) -> bool:
    numbers = ("return_mean", "normalized_score")
    return (
        isinstance(entry, dict)
        and all(
            isinstance(entry.get(key), int) and not isinstance(entry.get(key), bool) for key in ("epoch", "env_steps")
        )
        and isinstance(entry.get("file"), str)
        and Path(entry["file"]).name == entry["file"] not in ("", ".", "..")
        and all(isinstance(entry.get(key), int | float) for key in numbers if key in entry or key == "return_mean")
    )


def make_recipe(config: RecipeCollectConfig) -> Path:
    """Write `config.recipe`'s dataset at `config.output` (see the module's docstring)."""
    assert config.recipe is not None
    recipe = parse_recipe(config.recipe)
    base = replace(config, task=recipe.task, recipe=None, behaviour_run=None)
    if recipe.kind == "random":
        return write_collections([RANDOM_POLICY], base, recipe)
    if config.behaviour_run is None:
        raise OfflineRLError(
            f"--recipe {recipe.name}: --behaviour-run: required, the run folder of examples/mujoco_sac.py "
            f"--config configs/sac/{recipe.task}.yaml whose snapshots it plays"
        )
    run = BehaviourRun.read(Path(config.behaviour_run).expanduser(), recipe.task)
    medium, expert = run.medium(), run.expert()
    log.info(
        f"{recipe.name}: medium policy {run.file(medium)} (return {medium['return_mean']:.1f}), "
        f"expert policy {run.file(expert)} (return {expert['return_mean']:.1f})"
    )
    if recipe.kind == "medium-replay":
        return write_replay_until(run, medium, base, recipe)
    chosen = {"medium": [medium], "expert": [expert], "medium-expert": [medium, expert]}[recipe.kind]
    sampled = replace(base, sample_policy=True)  # D4RL's collections drew from the SAC policy's Gaussian
    return write_collections([str(run.file(snapshot)) for snapshot in chosen], sampled, recipe)


def write_collections(policies: list[str], config: CollectConfig, recipe: Recipe) -> Path:
    """A collection of `config.size` transitions by each policy (its seeds as given), one after the
    other, as one D4RL file that records the recipe. Each collection is made in a file of its own
    beside the output first, kept on disk as it goes (`collect_dataset`), so that the same command run
    again after a stop continues it."""
    output = check_output(config.output, flag="--output", overwrite=config.overwrite)
    parts = [output.with_name(f".{output.name}.{number}.collecting.hdf5") for number in range(len(policies))]
    for policy, part in zip(policies, parts, strict=True):
        collect_dataset(replace(config, policy=policy, output=part, overwrite=True))
    keys = ("observations", "actions", "rewards", "terminals", "timeouts", "next_observations")
    columns: dict[str, list[np.ndarray]] = {key: [] for key in keys}
    for part in parts:
        with h5py.File(part, "r") as file:
            for key in keys:
                columns[key].append(file[key][()])
    _write(
        output,
        {key: np.concatenate(pieces) for key, pieces in columns.items()},
        config,
        recipe,
        " then ".join(policies),
    )
    for part in parts:
        os.unlink(part)
    return output


def write_replay_until(run: BehaviourRun, medium: dict[str, Any], config: CollectConfig, recipe: Recipe) -> Path:
    """The behaviour run's replay, oldest first, up to the medium snapshot's env steps, as a D4RL file;
    its last step, where the replay is cut, a time-out unless it ended its episode."""
    output = check_output(config.output, flag="--output", overwrite=config.overwrite)
    path, steps = run.folder / "replay.hdf5", int(medium["env_steps"])
    if not path.is_file():
        raise OfflineRLError(f"--behaviour-run {run.folder}: no replay.hdf5 (run it with --checkpoint-replay)")
    try:
        columns = _replay_rows(path, steps, recipe)
    except (KeyError, ValueError, TypeError) as error:
        raise OfflineRLError(f"{path}: not a replay saved by examples/mujoco_sac.py ({error})") from None
    if not columns["terminals"][-1]:
        columns["timeouts"][-1] = True
    policy = f"the replay of {run.folder} until {run.file(medium)}"
    _write(output, columns, config, recipe, policy)
    return output


def _replay_rows(path: Path, steps: int, recipe: Recipe) -> dict[str, np.ndarray]:
    """The replay's first `steps` steps as D4RL's columns, from its one training env's group."""
    with hdf5_for_reading(path) as file:
        layout = json.loads(file.attrs["layout"])
        if int(layout["buffer_num"]) != 1 or "0" not in file:
            raise OfflineRLError(f"{path}: {recipe.name} needs a replay of one training env (--training-num 1)")
        group = file["0"]
        if "obs_next" not in group:
            raise OfflineRLError(f"{path}: the replay kept no next observations")
        kept = len(group["rew"])
        if kept < steps or int(layout["size"]) <= kept:
            raise OfflineRLError(
                f"{path}: holds {kept} steps of a replay of {layout['size']}; {recipe.name} needs its first "
                f"{steps} (the medium snapshot's), all kept (a --buffer-size above the run's env steps)"
            )
        columns = {
            "observations": group["obs"][:steps].astype(np.float32),
            "actions": group["act"][:steps].astype(np.float32),
            "rewards": group["rew"][:steps].astype(np.float32),
            "terminals": group["terminated"][:steps].astype(bool),
            "timeouts": group["truncated"][:steps].astype(bool),
            "next_observations": group["obs_next"][:steps].astype(np.float32),
        }
    return columns


def _write(output: Path, columns: dict[str, np.ndarray], config: CollectConfig, recipe: Recipe, policy: str) -> None:
    made = Provenance(recipe.task, policy, config.noise_std, config.seed, config.num_envs, recipe=recipe.name)
    write_d4rl_columns(output, columns, made, config.compression)
