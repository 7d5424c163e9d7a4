"""Settings every example shares: the torch process, and the run around an algorithm.

Each example nests these in its own config with its own defaults (`OfflineRunConfig(epoch=100,
...)`), so a setting such as `--seed` is declared once for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from offline_rl.algorithms.fqe.config import FQEConfig
from offline_rl.core.arithmetic import CPU_PRODUCTS, MATMUL_PRECISIONS
from offline_rl.core.settings import SEED_RANGE, check_ranges, require, setting
from offline_rl.envs.mujoco import VIDEO_QUALITIES

MAX_SEEDS = 64
"""The most seeds one batched update trains (`--num-seeds`)."""


def resolve_matmul_precision(precision: str, device: str) -> str:
    """`auto`: TF32 products on CUDA (faster, and CQL-SAC's learning check found no difference from
    float32), float32 elsewhere (on an AMD CPU any other precision takes the products off oneDNN, which
    is slower there; bf16 on Intel's AMX units has had no learning check)."""
    if precision != "auto":
        return precision
    return "high" if device.startswith("cuda") else "highest"


@dataclass
class TorchConfig:
    """Where and how tensors are computed."""

    FLAG_GROUP: ClassVar[str] = "device"

    device: str = setting("auto", "auto (CUDA when present), cpu, cuda or cuda:N", per_invocation=True)
    threads: int = setting(
        0,
        "torch CPU threads (0: OMP_NUM_THREADS where set, else the cores other processes leave free)",
        details=(
            "The count a run chose is recorded, and a resumed run keeps it unless --threads is given: "
            "on a CPU the thread count decides the order of a product's sums, so a resume is exact only with it."
        ),
        minimum=0,
    )
    matmul_precision: str = setting(
        "highest",
        ("float32 matrix products: highest (float32), high (TF32 on GPUs), medium (bf16), or auto (high on CUDA)"),
        details=(
            "torch.set_float32_matmul_precision. medium uses bf16 where the processor has it: GPUs, "
            "and CPUs with AMX units. auto: high on CUDA, highest on CPU."
        ),
        choices=MATMUL_PRECISIONS,
        per_invocation=True,
    )
    cpu_products: str = setting(
        "auto",
        "library of the networks' CPU matrix products: onednn, blas (torch's default), or auto",
        details=(
            "onednn is several times torch's default on AMD CPUs, with the same float32 arithmetic; "
            "blas (MKL in PyPI's wheels) is the faster on Intel CPUs. auto: onednn on AMD processors,"
            " blas elsewhere."
        ),
        choices=CPU_PRODUCTS,
        per_invocation=True,
    )
    compile: bool | None = setting(
        None,
        "record each gradient update once and replay it as one CUDA graph (none: on for CUDA)",
        details="CPU runs eagerly; the start of a run says which path it takes and why.",
        per_invocation=True,
    )


LOGGERS = ("tensorboard", "wandb")


@dataclass
class LoggingConfig:
    """Where a run's curves go besides its TensorBoard events, which are always written (they are what
    `offline_rl.results` reads and what Tianshou's resume reads its counters from)."""

    FLAG_GROUP: ClassVar[str] = "logging"

    logger: str = setting(
        "tensorboard",
        "tensorboard, or wandb: TensorBoard and the same figures in a Weights & Biases run",
        details="WANDB_MODE=offline keeps the W&B run in the run folder, for `wandb sync` later.",
        choices=LOGGERS,
    )
    wandb_project: str = setting("offline_rl", ("W&B project of --logger wandb (its entity: WANDB_ENTITY or yours)"))
    wandb_group: str | None = setting(None, "W&B group of --logger wandb (a sweep's trials: the sweep's name)")
    wandb_name: str | None = setting(
        None, "W&B run name (none: the run folder under --logdir; a sweep's trials: the trial's id)"
    )


@dataclass
class RunConfig:
    """Seed, budget, evaluation, logs and checkpoints of one run."""

    FLAG_GROUP: ClassVar[str] = "run"
    TRAINING_ONLY: ClassVar[tuple[str, ...]] = ("video_interval",)
    """Settings that act on training alone: a command that only reads a resumed run's networks does
    not take them from the run (`flags._drop_training_settings`)."""

    seed: int = setting(0, "seed of torch, numpy and the evaluation envs", **SEED_RANGE)
    epoch: int = setting(200, "epochs; each ends with an evaluation and a checkpoint", minimum=1, maximum=10**6)
    batch_size: int = setting(256, "transitions per gradient step", minimum=1)
    test_num: int = setting(10, "evaluation episodes, one env each (with --test-steps: the envs that play)", minimum=1)
    test_steps: int = setting(
        0,
        ("evaluate by agent steps instead of episodes: the --test-num envs play until this many steps (0: episodes)"),
        details=(
            "The score averages every episode played. Dopamine's, DQN Replay's and the CQL paper's "
            "Atari protocol is 125000; with --render, --test-num episodes."
        ),
        minimum=0,
    )
    test_steps_cut: bool = setting(
        False,
        "with --test-steps: leave out the episode under way when the steps are spent (rlkit's way)",
        details=(
            "As the CQL authors' D4RL code (rlkit) evaluates: 1000 steps on one env (--test-num 1). "
            "Without it, episodes under way finish (Dopamine's way)."
        ),
    )
    logdir: str = setting("log", "root of the run folders <logdir>/<task>/<algo>/<seed>/<time>")
    render: float = setting(
        0.0, "seconds between rendered frames while evaluating (0: no rendering)", minimum=0, per_invocation=True
    )
    resume_path: str | None = setting(
        None,
        "checkpoint.pth to continue training from, with its run's settings; with --watch, policy.pth too",
        details=("Flags given on the command line override the run's settings; --watch also takes policy_last.pth."),
        per_invocation=True,
    )
    watch: bool = setting(False, "only evaluate --resume-path, do not train", per_invocation=True)
    save_video: str | None = setting(
        None,
        "with --watch: record each episode as an MP4 video in this folder",
        details=(
            "Videos are named <task>-<n>.mp4, numbered after those there, with their returns; MuJoCo "
            "renders off screen with EGL where there is no display."
        ),
        per_invocation=True,
    )
    video_interval: int = setting(
        0,
        "while training: film the first episode of every N-th evaluation and of the last (0: none)",
        details=(
            "Written as <run folder>/videos/evaluation-<k>.mp4, the evaluation before training "
            "included; the filmed episodes step in this process."
        ),
        minimum=0,
    )
    video_quality: str = setting(
        "auto",
        "filmed frames: full (with MuJoCo's shadows and reflections), fast (without), or auto",
        details="auto: fast where Mesa draws in software, full where a GPU draws.",
        choices=VIDEO_QUALITIES,
        per_invocation=True,
    )
    export_policy: str | None = setting(
        None,
        "only write --resume-path's policy to this file (.onnx or .pt2), for use without offline_rl",
        details=(
            ".onnx needs onnx, onnxscript and onnxruntime; .pt2 is a torch.export program. The file's"
            " actions are checked against the policy's before it is kept."
        ),
        per_invocation=True,
    )
    torch: TorchConfig = field(default_factory=TorchConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    @property
    def trains(self) -> bool:
        """Whether this command trains (and so writes a run folder): not with --watch or --export-policy."""
        return not (self.watch or self.export_policy)

    def validate(self) -> None:
        check_ranges(self)
        require(
            not self.export_policy or bool(self.resume_path),
            "--export-policy needs --resume-path (a run's policy.pth, policy_last.pth or checkpoint.pth)",
        )
        require(not (self.export_policy and self.watch), "give --watch or --export-policy, not both")
        require(
            not self.save_video or self.watch,
            "--save-video records the episodes --watch plays: add --watch (a training run films its evaluations "
            "with --video-interval N)",
        )
        require(not (self.save_video and self.render), "give --render (a window) or --save-video (files), not both")
        require(
            not self.video_interval or self.trains,
            "--video-interval films a training run's evaluations; --watch films with --save-video DIR",
        )
        require(not (self.video_interval and self.render), "give --render (a window) or --video-interval, not both")
        require(not self.test_steps_cut or self.test_steps > 0, "--test-steps-cut: add --test-steps N (the steps)")
        require(
            not self.test_steps_cut or self.test_num == 1,
            f"--test-steps-cut plays one env, as rlkit does: give --test-num 1 (on {self.test_num} envs sharing "
            "the steps, every episode could be cut and none scored)",
        )

    def evaluation_plan(self, episode: str = "episode") -> str:
        """What each evaluation plays, for the lines that announce a run: "10 episodes", or "whole
        episodes for 125000 steps on 10 envs" (`episode` names them: a game, for Atari)."""
        if self.test_steps and self.test_steps_cut:
            return f"{self.test_steps} agent steps of {episode}s, the one under way then left out"
        if self.test_steps:
            return f"whole {episode}s for {self.test_steps} agent steps on {self.test_num} env(s)"
        return f"{self.test_num} {episode}(s)"

    def output_files(self) -> dict[str, str]:
        """The single files this command writes besides a run folder, by the flag that names each:
        checked before any data is loaded, written atomically at the end."""
        return {"--export-policy": self.export_policy} if self.export_policy else {}


@dataclass
class OfflineRunConfig(RunConfig):
    """A run of an offline algorithm in Tianshou's offline trainer."""

    step_per_epoch: int = setting(
        5000, "gradient updates per epoch", aliases=("--update-per-epoch",), minimum=1, maximum=10**9, group="run"
    )
    log_interval: int = setting(
        100,
        "log training statistics every this many updates, as the mean over them (read from the device "
        "once per interval)",
        minimum=1,
        group="run",
    )
    num_seeds: int = setting(
        1,
        "train this many seeds (--seed, --seed + 1, ...) as one batched update, each writing the run folder a "
        "single run of its seed writes",
        minimum=1,
        maximum=MAX_SEEDS,
        group="run",
    )
    fqe: FQEConfig = field(default_factory=FQEConfig)

    @property
    def seeds(self) -> list[int]:
        """The seeds this command trains: --seed, and with --num-seeds S the S − 1 after it."""
        return list(range(self.seed, self.seed + self.num_seeds))

    @property
    def estimates_value(self) -> bool:
        """Whether this command only estimates --resume-path's policy by fitted Q evaluation (--fqe-updates)."""
        return self.fqe.fqe_updates > 0

    @property
    def trains(self) -> bool:
        return super().trains and not self.estimates_value

    @property
    def needs_data(self) -> bool:
        """Training and fitted Q evaluation read the dataset; --watch and --export-policy do not."""
        return self.trains or self.estimates_value

    def validate(self) -> None:
        if self.num_seeds > 1:  # before the checks of what it leaves out
            require(self.trains, "--num-seeds trains seeds; --watch, --export-policy and --fqe-updates take one run")
            require(
                not (self.video_interval or self.render),
                "--num-seeds: --video-interval and --render film or show one run; train that seed alone",
            )
            last = self.seed + self.num_seeds - 1
            require(last <= SEED_RANGE["maximum"], f"--num-seeds {self.num_seeds}: the last seed, {last}, is too large")
        super().validate()
        require(
            not self.watch or bool(self.resume_path), "--watch needs --resume-path (a policy.pth or checkpoint.pth)"
        )
        require(
            not self.estimates_value or bool(self.resume_path),
            "--fqe-updates needs --resume-path (a run's policy.pth, policy_last.pth or checkpoint.pth)",
        )
        require(
            not (self.estimates_value and (self.watch or self.export_policy)),
            "give one of --watch, --export-policy and --fqe-updates",
        )
        require(not self.fqe.fqe_output or self.estimates_value, "--fqe-output: add --fqe-updates N (the estimate)")

    def output_files(self) -> dict[str, str]:
        outputs = super().output_files()
        if self.estimates_value and self.fqe.fqe_output:
            outputs["--fqe-output"] = self.fqe.fqe_output
        return outputs


@dataclass
class FineTuneConfig:
    """Online fine-tuning after offline training (`offline_rl.runs.finetune`): the offline policy goes on
    learning in its env, one env step and `--online-updates-per-step` updates at a time, each batch
    drawn from the offline data and the transitions collected so far. The defaults are CORL's
    (`algorithms/finetune/*.py`): one env, one update per step, CQL's and IQL's batches drawn from the
    offline and online transitions alike; Cal-QL's presets draw half of each batch from each."""

    FLAG_GROUP: ClassVar[str] = "fine-tuning online"

    online_steps: int = setting(
        0,
        "after the offline updates, fine-tune in the env for this many env steps (0: offline only)",
        details=(
            "Given with --resume-path of a finished offline run, it fine-tunes that run's policy in the"
            " same run folder."
        ),
        minimum=0,
        maximum=10**9,
    )
    online_eval_interval: int = setting(
        5000, "env steps between two evaluations while fine-tuning", minimum=1, maximum=10**9
    )
    mixing_ratio: float | None = setting(
        None,
        "share of each fine-tuning batch drawn from the offline data (none: offline and online "
        "transitions drawn alike, as from one buffer)",
        details="CORL's Cal-QL draws half of each batch from each (0.5); its CQL and IQL draw from one buffer.",
        minimum=0,
        maximum=1,
    )
    online_updates_per_step: int = setting(
        1, "gradient updates per env step while fine-tuning", minimum=1, maximum=1000
    )

    @property
    def fine_tunes(self) -> bool:
        return self.online_steps > 0

    @property
    def eval_interval(self) -> int:
        """Env steps per fine-tuning epoch (one evaluation each): --online-eval-interval, or all of
        --online-steps where they are fewer."""
        return min(self.online_eval_interval, max(self.online_steps, 1))

    @property
    def epochs(self) -> int:
        """The fine-tuning phase's epochs, the last one ending at the last env step."""
        return self.online_steps // self.eval_interval

    def validate(self) -> None:
        check_ranges(self)
        require(
            self.online_steps % self.eval_interval == 0,
            f"--online-steps {self.online_steps}: expected a multiple of --online-eval-interval "
            f"{self.online_eval_interval} (each evaluation closes an equal stretch of env steps)",
        )
