"""Other toolkits' names for this toolkit's settings, so a flag copied from them gets the one to use.

A user moving from d3rlpy, CORL, TF-Agents, jrl, the CQL authors' code or Tianshou's classic examples
types the names they know (`--conservative_weight 5`, `--cql_alpha 10`, `--lagrange-threshold 10`);
argparse alone answers "unrecognized arguments" and nothing else. Each entry says whose name it is and
what it is here, with the conversion where the two differ in more than the name (the README's "Preset
files" and "Continuous CQL-SAC" sections derive them). Names with no setting here say why none is needed.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class ForeignName:
    """`names` (snake_case, as the toolkit spells them) of `toolkit` are `flag` here (with `note`), or,
    with no flag, what `note` says."""

    names: tuple[str, ...]
    toolkit: str
    flag: str | None
    note: str = ""


FOREIGN_NAMES: tuple[ForeignName, ...] = (
    # d3rlpy 2.x: CQLConfig, DiscreteCQLConfig.
    ForeignName(("conservative_weight",), "d3rlpy's", "--cql-weight"),
    ForeignName(("alpha_threshold",), "d3rlpy's", "--target-action-gap", "a threshold of the unweighted gap in both"),
    ForeignName(("initial_alpha",), "d3rlpy's", "--lagrange-multiplier-init", "learned with --with-lagrange"),
    ForeignName(
        ("alpha_learning_rate",), "d3rlpy's", "--lagrange-lr", "d3rlpy always learns its α; here --with-lagrange"
    ),
    ForeignName(("temp_learning_rate",), "d3rlpy's", "--alpha-lr"),
    ForeignName(("initial_temperature",), "d3rlpy's", "--alpha"),
    ForeignName(("actor_learning_rate",), "d3rlpy's", "--actor-lr"),
    ForeignName(("critic_learning_rate",), "d3rlpy's", "--critic-lr"),
    ForeignName(("n_critics",), "d3rlpy's", "--num-critics"),
    ForeignName(("n_action_samples",), "d3rlpy's", "--cql-n-actions"),
    ForeignName(
        ("soft_q_backup",),
        "d3rlpy's",
        "--backup-entropy",
        "off, d3rlpy's target takes π's mean action at s′; ours samples it either way, as the CQL authors' code does",
    ),
    ForeignName(("max_q_backup",), "d3rlpy's and the CQL authors'", "--max-target-backup"),
    ForeignName(("compile_graph",), "d3rlpy's", "--compile"),
    ForeignName(("learning_rate",), "d3rlpy's", "--lr"),
    ForeignName(("target_update_interval",), "d3rlpy's", "--target-update-freq"),
    ForeignName(("alpha",), "d3rlpy's DiscreteCQL", "--cql-weight"),  # the conservative weight there
    # CORL's algorithms/offline/cql.py (TrainConfig) and TF-Agents' CqlSacAgent.
    ForeignName(("cql_alpha",), "CORL's, TF-Agents' and jrl's", "--cql-weight"),
    ForeignName(
        ("policy_lr",), "CORL's and the CQL authors'", "--actor-lr", "both tune α at the same rate: --alpha-lr"
    ),
    ForeignName(("qf_lr",), "CORL's and the CQL authors'", "--critic-lr"),
    ForeignName(("q_n_hidden_layers",), "CORL's", "--critic-layers"),
    ForeignName(("soft_target_update_rate",), "CORL's", "--tau"),
    ForeignName(("cql_importance_sample",), "CORL's", "--importance-sample"),
    ForeignName(("cql_lagrange", "use_lagrange_cql_alpha"), "CORL's and TF-Agents'", "--with-lagrange"),
    ForeignName(("cql_target_action_gap",), "CORL's", "--target-action-gap"),
    ForeignName(("cql_temp",), "CORL's", "--temperature"),
    ForeignName(("cql_max_target_backup",), "CORL's", "--max-target-backup"),
    ForeignName(("cql_clip_diff_min",), "CORL's", "--clip-diff-min"),
    ForeignName(("cql_clip_diff_max",), "CORL's", "--clip-diff-max"),
    ForeignName(("normalize",), "CORL's", "--normalize-obs"),
    ForeignName(("use_automatic_entropy_tuning",), "CORL's", "--auto-alpha"),
    ForeignName(("discount",), "CORL's and the CQL authors'", "--gamma"),
    ForeignName(("n_episodes",), "CORL's", "--test-num"),
    ForeignName(("eval_freq",), "CORL's and Tianshou's", "--step-per-epoch", "each epoch ends with an evaluation"),
    ForeignName(("max_timesteps",), "CORL's", None, "the budget is --epoch × --step-per-epoch updates"),
    ForeignName(("checkpoints_path",), "CORL's", "--logdir"),
    ForeignName(("load_model",), "CORL's", "--resume-path"),
    ForeignName(("config_path",), "CORL's", "--config", "CORL's CQL configs are here as configs/cql/<dataset>.yaml"),
    ForeignName(("env",), "CORL's and the CQL authors'", "--dataset", "a D4RL name; --task is the env it evaluates on"),
    ForeignName(("alpha_multiplier",), "CORL's", None, "no setting: CORL's default 1 is what runs here"),
    ForeignName(("target_update_period",), "CORL's", None, "no setting: targets follow every update, CORL's default 1"),
    ForeignName(("buffer_size",), "CORL's and Tianshou's", None, "no setting: the whole dataset is the buffer"),
    ForeignName(("num_cql_samples",), "TF-Agents'", "--cql-n-actions"),
    ForeignName(("cql_alpha_learning_rate",), "TF-Agents'", "--lagrange-lr"),
    ForeignName(("softmax_temperature",), "TF-Agents'", "--temperature", "T = 1 / softmax_temperature"),
    ForeignName(("num_bc_steps",), "TF-Agents'", "--bc-steps"),
    ForeignName(("include_critic_entropy_term",), "TF-Agents'", "--backup-entropy"),
    ForeignName(("reward_scale_factor",), "TF-Agents'", "--reward-scale"),
    ForeignName(
        ("reward_shift",),
        "TF-Agents'",
        "--reward-bias",
        "TF-Agents shifts before it scales: --reward-bias = reward_shift × reward_scale_factor",
    ),
    ForeignName(
        ("log_cql_alpha_clipping",),
        "TF-Agents'",
        "--lagrange-multiplier-min",
        "it clips log α′ to (lo, hi): --lagrange-multiplier-min e^lo --lagrange-multiplier-max e^hi",
    ),
    ForeignName(
        ("action_clipping",),
        "TF-Agents'",
        "--clip-dataset-actions",
        "dataset actions are clipped into the action box itself here, not to ±0.995",
    ),
    ForeignName(
        ("reward_noise_variance",),
        "TF-Agents'",
        "--reward-noise-std",
        "the same number: TF-Agents draws its noise with that value as the standard deviation",
    ),
    ForeignName(
        ("env_name",),
        "TF-Agents'",
        "--dataset",
        "a D4RL name such as antmaze-medium-play-v0; the env it belongs to is evaluated (--task for another)",
    ),
    ForeignName(
        ("dataset_name",),
        "TF-Agents'",
        "--dataset",
        "TFDS's d4rl_mujoco_halfcheetah/v0-medium-expert is D4RL's halfcheetah-medium-expert-v0 here",
    ),
    ForeignName(("gin_file",), "TF-Agents'", "--config", "a YAML preset; CORL's values per dataset: configs/cql/"),
    ForeignName(
        ("cql_tau",),
        "TF-Agents'",
        "--target-action-gap",
        "TF-Agents' learned α multiplies the unweighted gap: --cql-weight 1",
    ),
    # The CQL authors' code (aviralkumar2907/CQL: examples/cql_mujoco_new.py's flags, rlkit's CQLTrainer).
    ForeignName(
        ("lagrange_thresh",),
        "the CQL authors'",
        "--target-action-gap",
        "they threshold w·gap: its value / --cql-weight with --with-lagrange; a negative value is --no-with-lagrange",
    ),
    ForeignName(
        ("min_q_version",),
        "the CQL authors'",
        "--importance-sample",
        "3 (CQL(H)): --importance-sample; 2 (CQL(ρ)): --no-importance-sample",
    ),
    ForeignName(("policy_eval_start",), "the CQL authors'", "--bc-steps"),
    ForeignName(
        ("deterministic_backup",), "the CQL authors'", "--backup-entropy", "the opposite: True is --no-backup-entropy"
    ),
    ForeignName(("num_random",), "the CQL authors'", "--cql-n-actions"),
    ForeignName(("temp",), "the CQL authors'", "--temperature"),
    ForeignName(("num_qs",), "the CQL authors'", "--num-critics"),
    ForeignName(
        ("data_subtract",), "the CQL authors'", None, "no setting: the dataset's Q is always subtracted (their True)"
    ),
    # ... and the rlkit algorithm_kwargs and variant keys of their scripts.
    ForeignName(("num_epochs",), "the CQL authors' (rlkit's)", "--epoch"),
    ForeignName(("num_trains_per_train_loop",), "the CQL authors' (rlkit's)", "--step-per-epoch"),
    ForeignName(
        ("num_eval_steps_per_epoch",),
        "the CQL authors' (rlkit's)",
        "--test-steps",
        "with --test-steps-cut --test-num 1, rlkit's evaluation exactly (their presets: configs/cql_authors/)",
    ),
    ForeignName(
        ("max_path_length",),
        "the CQL authors' (rlkit's)",
        None,
        "no setting: episodes end at the env's own time limit (MuJoCo's 1000, their value)",
    ),
    ForeignName(("layer_size",), "the CQL authors'", "--critic-width", "and --hidden-sizes M M M for the actor"),
    # jrl's CQL (google-research/jrl: cql.config.CQLConfig and its runner's flags).
    ForeignName(("q_lr",), "jrl's", "--critic-lr"),
    ForeignName(("num_bc_iters",), "jrl's", "--bc-steps"),
    ForeignName(("num_importance_acts",), "jrl's", "--cql-n-actions"),
    ForeignName(("actor_network_hidden_sizes",), "jrl's", "--hidden-sizes"),
    ForeignName(
        ("critic_network_hidden_sizes",),
        "jrl's",
        "--critic-layers",
        "with --critic-width: jrl's (256, 256, 256) is --critic-layers 3 --critic-width 256",
    ),
    ForeignName(
        ("eval_with_q_filter", "num_eval_samples"),
        "jrl's",
        "--eval-q-filter",
        "one setting here, the number of samples K (0: off); jrl's default K is 10",
    ),
    ForeignName(("episodes_per_eval",), "jrl's", "--test-num"),
    ForeignName(("eval_every_steps",), "jrl's", "--step-per-epoch", "each epoch ends with an evaluation"),
    ForeignName(("num_steps",), "jrl's", None, "the budget is --epoch × --step-per-epoch updates"),
    ForeignName(("root_dir",), "jrl's and TF-Agents'", "--logdir"),
    ForeignName(("task_name",), "jrl's", "--dataset", "a D4RL name, antmaze-large-diverse-v0 included"),
    ForeignName(
        ("num_sgd_steps_per_step",),
        "jrl's",
        None,
        "no setting: on CUDA every update is already one replayed CUDA graph, and --batch-size is one update's",
    ),
    # Tianshou's classic examples (examples/offline/d4rl_cql.py, atari_cql.py).
    ForeignName(
        ("lagrange_threshold",),
        "Tianshou's",
        "--target-action-gap",
        "Tianshou thresholds w·gap: its value / --cql-weight",
    ),
    ForeignName(("expert_data_task",), "Tianshou's", "--dataset"),
    ForeignName(("n_step",), "Tianshou's", None, "no setting: CQL-SAC's TD target is one step, the paper's and CORL's"),
    ForeignName(("start_timesteps",), "Tianshou's", None, "no setting: an offline run takes no environment steps"),
    ForeignName(("resume_id",), "Tianshou's", "--resume-path", "the checkpoint.pth of the run to continue"),
)


def names_of(toolkit: str) -> frozenset[str]:
    """Every name of `toolkit` (e.g. "CORL") in the table: the keys that mark a config file as its."""
    return frozenset(name for entry in FOREIGN_NAMES if toolkit in entry.toolkit for name in entry.names)


def _normalised(flag: str) -> str:
    return flag.split("=", 1)[0].lstrip("-").replace("-", "_").lower()


def foreign_flag_advice(flag: str, known_flags: Collection[str]) -> str | None:
    """What to type instead of `flag`, which this program does not know: the setting another toolkit's
    name stands for (when this program has it), else the closest flag it has, else None."""
    name = _normalised(flag)
    for entry in FOREIGN_NAMES:
        if name in entry.names and (entry.flag is None or entry.flag in known_flags):
            here = f"here {entry.flag}" if entry.flag else ""
            said = "; ".join(part for part in (here, entry.note) if part)
            return f"{flag} is {entry.toolkit} {name}: {said}"
    kebab = "--" + name.replace("_", "-")
    close = difflib.get_close_matches(kebab, [known for known in known_flags if "_" not in known], n=1, cutoff=0.8)
    return f"{flag}: did you mean {close[0]}?" if close else None
