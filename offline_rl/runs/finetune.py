"""Offline training, then online fine-tuning in the same run folder (`--online-steps`).

The offline phase is the offline run, unchanged, to its summary. At the switch the algorithm takes its
online settings (`go_online`: CQL's `--online-cql-weight`, Cal-QL's calibration off, as CORL fine-tunes)
and from then on learns from batches drawn from the offline data and the env steps collected since
(`offline_rl.algorithms.fine_tuning`), trained by Tianshou's off-policy trainer: one env, one env step
and `--online-updates-per-step` updates at a time, an evaluation every `--online-eval-interval` env steps.

One folder, two phases: the curves go on along the update count (`eval/*` and the update statistics at
the algorithm's updates, offline ones first), checkpoints after each fine-tuning epoch keep the online
replay and the env's place in its episode (`offline_rl.runs.online`), and the closing summary reports the
offline score, the fine-tuned one and the env steps. A fine-tuning checkpoint says so (`FINE_TUNING_KEY`,
with where the offline phase ended); `--resume-path` of it goes on fine-tuning, of a finished offline run
starts it. The generators are reseeded at the switch, so fine-tuning a finished run later draws what
fine-tuning right after its training would have.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from offline_rl.core.errors import OfflineRLError
from offline_rl.core.progress import shell_quoted
from offline_rl.runs.config import FineTuneConfig, OfflineRunConfig
from offline_rl.runs.evaluation import EvaluationReporter
from offline_rl.runs.files import (
    FINE_TUNING_KEY,
    RUN_CHECKPOINT_FILE,
    RUN_FINAL_POLICY_FILE,
    RUN_OFFLINE_SUMMARY_FILE,
    RUN_SUMMARY_FILE,
)

log = logging.getLogger(__name__)

FINE_TUNING_SEED_OFFSET = 20_000
"""The generators start the fine-tuning from --seed + this (the evaluation envs use --seed + 10 000)."""
LABEL = "fine-tuning: "


def fine_tune(
    algorithm: Any,
    buffer: Any,
    make_env: Callable[..., Any],
    run: OfflineRunConfig,
    finetune: FineTuneConfig,
    reporter_factory: Callable[[Any], EvaluationReporter],
    *,
    offline_summary: Callable[[], dict[str, Any]],
    checkpoint: dict[str, Any] | None,
    task: str,
    saved: dict[str, Any],
) -> dict[str, Any]:
    """The fine-tuning phase of a run (see the module docstring): `checkpoint` is --resume-path's, of the
    fine-tuning phase (it goes on) or of the offline one; `offline_summary()` trains the offline phase to
    its end, or gives the summary of the finished one, and is called only when the phase is to start."""
    from offline_rl.data.online_replay import NullCheckedVectorReplayBuffer  # heavy (Tianshou): when used
    from offline_rl.envs.resumable import resumable_where_possible
    from offline_rl.runs.online import OnlinePlan, train_online  # heavy (Tianshou, torch): loaded only when used

    ended = (checkpoint or {}).get(FINE_TUNING_KEY)
    if ended is None:  # the switch: the offline phase first, to its end
        summary = offline_summary()
        # the folder the run is resumed from (it may have moved since its summary was written), else the new run's
        folder = Path(run.resume_path).expanduser().resolve().parent if run.resume_path else Path(summary["log_path"])
        if (folder / RUN_SUMMARY_FILE).is_file():  # the run goes on: not ended until fine-tuning ends
            (folder / RUN_SUMMARY_FILE).replace(folder / RUN_OFFLINE_SUMMARY_FILE)
        ended = {"offline_updates": int(algorithm.num_updates), "offline_last": summary.get("last")}
        checkpoint = switch_counters(int(algorithm.num_updates), run.seed)
        run = replace(run, resume_path=str(folder / RUN_CHECKPOINT_FILE))
    try:
        algorithm.start_fine_tuning(buffer, finetune.online_steps, finetune.mixing_ratio)
    except ValueError as error:
        raise OfflineRLError(f"--online-steps {finetune.online_steps}: {error}") from None
    algorithm.statistics_interval = run.log_interval
    algorithm.capture = run.torch.compile
    log.info(algorithm.update_path())

    def reporter(writer: Any) -> EvaluationReporter:
        made = reporter_factory(writer)
        made.label = LABEL
        return made

    def summarize(folder: Any) -> dict[str, Any]:
        return {FINE_TUNING_KEY: ended}

    plan = OnlinePlan(
        task=task,
        algo_name="",  # the run's folder is the offline phase's
        label="fine-tuning",
        saved={**saved, FINE_TUNING_KEY: ended},
        make_training_env=lambda: resumable_where_possible(make_env()),  # the env made for evaluation, too
        make_test_env=make_env,
        replay=NullCheckedVectorReplayBuffer(finetune.online_steps, 1),
        training_num=1,
        step_per_epoch=finetune.eval_interval,
        step_per_collect=1,
        update_per_step=finetune.online_updates_per_step,
        checkpoint_replay=True,
        make_reporter=reporter,
        next_step=f"watch it: --watch --resume-path {{best}} (or its last weights, {RUN_FINAL_POLICY_FILE})",
        updates_done=lambda: int(algorithm.num_updates),
        windowed_statistics=True,
        summarize=summarize,
    )
    online_run = replace(run, epoch=finetune.epochs)
    return train_online(plan, algorithm, online_run, checkpoint)


def switch_counters(updates: int, seed: int) -> dict[str, Any]:
    """Where the fine-tuning phase starts, as a checkpoint would say it: no epoch and no env step yet, the
    updates the offline phase made, and the generators reseeded from `seed` (`FINE_TUNING_SEED_OFFSET`)."""
    from offline_rl.core.random_state import RANDOM_STATE_KEY, capture_random_state, preserved_random_state
    from offline_rl.runs.session import seed_generators

    with preserved_random_state():
        seed_generators(seed + FINE_TUNING_SEED_OFFSET)
        state = capture_random_state()
    return {"epoch": 0, "env_step": 0, "gradient_step": updates, RANDOM_STATE_KEY: state}


def fine_tuning_finished(
    checkpoint: dict[str, Any] | None, finetune: FineTuneConfig, resume_path: str
) -> dict[str, Any] | None:
    """The summary of --resume-path's run when it already fine-tuned for all the epochs asked for (said in
    one line); None when there is fine-tuning left, or its summary is yet to be written."""
    if checkpoint is None or FINE_TUNING_KEY not in checkpoint or int(checkpoint.get("epoch", 0)) < finetune.epochs:
        return None
    folder = Path(resume_path).expanduser().resolve().parent
    try:
        summary = json.loads((folder / RUN_SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or FINE_TUNING_KEY not in summary:  # the offline phase's: finish the run
        return None
    log.info(
        f"the run in {shell_quoted(folder)} already fine-tuned for its {finetune.online_steps} env steps; nothing "
        "to do: give --online-steps above that to fine-tune it further, or --watch to evaluate it"
    )
    return summary
