"""`--logger wandb`: the run's figures in a Weights & Biases run as well as in TensorBoard.

CORL reports through W&B and Tianshou's examples take `--logger wandb`, so researchers coming from
either expect their curves there. TensorBoard stays the run's record (`offline_rl.results` and
Tianshou's resume read it); W&B gets a copy of exactly what the run's one TensorBoard writer
receives, scalar for scalar at the same steps (`mirror_scalars`), rather than W&B's
`sync_tensorboard`, which patches TensorBoard's writer process-wide and follows its event files.
The W&B run lives in the run's folder (`<run folder>/wandb/`), its id in `wandb_run.json` there, so
`--resume-path` continues the same W&B run, and with `WANDB_MODE=offline` (no network, a cluster's
compute nodes) everything stays in the folder until `wandb sync` uploads it.
"""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import string
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offline_rl.core.errors import OfflineRLError
from offline_rl.core.files import write_json
from offline_rl.data.download import unreachable
from offline_rl.runs.config import LoggingConfig

log = logging.getLogger(__name__)

RUN_ID_FILE = "wandb_run.json"
"""In the run folder: the W&B run's id and project, so that a resumed run logs on into the same W&B run."""
STEP_KEY = "global_step"
"""The x-axis of every figure: the step TensorBoard gets it at (updates; env steps for the online
trainer's episodes and evaluations)."""


def require_wandb(logging: LoggingConfig) -> None:
    """A one-line error before any data is loaded when `--logger wandb` cannot be honoured: no wandb
    package, no way to W&B's server, or no W&B login (asked for at a terminal, as W&B itself does)."""
    if logging.logger != "wandb":
        return
    os.environ.setdefault("WANDB_SILENT", "true")  # W&B's own lines (its login's too): the run says where it logs
    try:
        import wandb  # heavy (wandb): loaded only when used
    except ImportError as error:
        raise OfflineRLError(
            f"--logger wandb needs the wandb package ({error}): pip install wandb (or the project's [wandb] "
            "extra), or give --logger tensorboard"
        ) from None
    settings = wandb.Settings()
    from_environment = getattr(settings, "update_from_env_vars", None)  # WANDB_MODE, WANDB_BASE_URL
    if callable(from_environment):
        from_environment(dict(os.environ))
    if settings.mode not in ("online", "run"):  # offline or disabled: nothing to reach now
        return
    # Without a network W&B retries for 90 s before it fails: its server is asked first, in seconds.
    address = urllib.parse.urlsplit(settings.base_url)
    problem = unreachable(address.hostname or "", address.port or (80 if address.scheme == "http" else 443))
    if problem is not None:
        raise OfflineRLError(f"--logger wandb: {problem} (W&B's server); {_OFFLINE}")
    try:
        wandb.login(verify=False)  # whether a key is there (no network); at a terminal W&B asks for one
    except Exception as error:  # wandb's UsageError, whose text says what is missing
        reason = " ".join(str(error).split()).rstrip(".") or type(error).__name__
        raise OfflineRLError(f"--logger wandb: {reason}; or {_OFFLINE}") from None


_OFFLINE = "set WANDB_MODE=offline to keep the W&B run in the run folder and upload it later with `wandb sync`"


@dataclass
class WandbRun:
    """The W&B run beside one run folder, fed by `mirror_scalars`."""

    run: Any
    folder: Path
    pending: dict[str, Any] = field(default_factory=dict)  # scalars, and videos (`add_video`)
    pending_step: int | None = None
    finished: bool = False

    @classmethod
    def start(cls, folder: Path, logdir: str, logging: LoggingConfig, settings: dict[str, Any]) -> WandbRun:
        """Start (or, for a folder that has one, resume) the run's W&B run; one line says where it is."""
        import wandb  # heavy (wandb): loaded only when used

        previous = _recorded_id(folder)
        run_id = previous or _new_id()
        name = logging.wandb_name or _folder_name(folder, logdir)
        try:
            run = wandb.init(
                project=logging.wandb_project,
                group=logging.wandb_group,
                name=name,
                id=run_id,
                resume="allow",
                dir=str(folder),
                config=settings,
                settings=wandb.Settings(silent=True, console="off"),
            )
        except Exception as error:  # wandb raises its own kinds (UsageError, CommError, ...), all user-facing
            reason = " ".join(str(error).split()) or type(error).__name__
            advice = f"log in with `wandb login`, or {_OFFLINE}"
            raise OfflineRLError(f"--logger wandb: W&B could not start the run ({reason[:300]}); {advice}") from None
        if previous is None:
            write_json(folder / RUN_ID_FILE, {"id": run_id, "project": logging.wandb_project})
        run.define_metric(STEP_KEY)  # every figure plotted against TensorBoard's step, not W&B's row count
        run.define_metric("*", step_metric=STEP_KEY)
        wandb_run = cls(run, folder)
        log.info(f"W&B: {'resumed ' if previous else ''}run {name} ({run_id}) {wandb_run.where()}")
        return wandb_run

    def where(self) -> str:
        """Where to look at the run: its page, or for an offline run the command that uploads it."""
        mode = self.run.settings.mode
        if mode == "offline":
            return f"kept offline: wandb sync {self.run.settings.sync_dir}"
        url = self.run.url if mode != "disabled" else None
        return f"at {url}" if url else f"not kept (WANDB_MODE={mode})"

    def add_scalar(self, tag: str, value: Any, step: int | None) -> None:
        """One TensorBoard scalar; those of one step go to W&B as one row (`flush`)."""
        self._row(step)[tag] = float(value)

    def add_video(self, tag: str, gif: bytes, step: int) -> None:
        """An animated GIF (a filmed evaluation's preview, as TensorBoard gets it), in the row of its step."""

        import wandb  # heavy (wandb): loaded only when used

        self._row(step)[tag] = wandb.Video(io.BytesIO(gif), format="gif")

    def _row(self, step: int | None) -> dict[str, Any]:
        """The figures of `step`'s row, still open: another step's are sent first."""
        if step != self.pending_step:
            self.flush()
            self.pending_step = step
        return self.pending

    def flush(self) -> None:
        if self.pending:
            row = dict(self.pending)
            if self.pending_step is not None:
                row[STEP_KEY] = int(self.pending_step)
            self.run.log(row)
            self.pending.clear()

    def finish(self, exit_code: int, summary: dict[str, Any] | None = None) -> None:
        """End the W&B run: the figures still pending, the run's summary (its last and best evaluation),
        and how it ended: the command's exit status (0 shows as finished in W&B, others as failed)."""
        self.finished = True
        self.flush()
        if summary:
            self.run.summary.update(_flat(summary))
        self.run.finish(exit_code=exit_code)


def mirror_scalars(writer: Any, wandb_run: WandbRun) -> Any:
    """`writer` (a TensorBoard SummaryWriter) that also hands each scalar to `wandb_run`."""
    add_scalar, flush = writer.add_scalar, writer.flush

    def add_scalar_both(tag: str, scalar_value: Any, global_step: int | None = None, *args: Any, **kwargs: Any) -> Any:
        result = add_scalar(tag, scalar_value, global_step, *args, **kwargs)
        wandb_run.add_scalar(tag, scalar_value, global_step)
        return result

    def flush_both() -> Any:
        wandb_run.flush()
        return flush()

    writer.add_scalar, writer.flush = add_scalar_both, flush_both
    return writer


def _new_id() -> str:
    """A W&B run id as W&B makes them: 8 random lowercase letters and digits."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


def _recorded_id(folder: Path) -> str | None:
    try:
        return str(json.loads((folder / RUN_ID_FILE).read_text())["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _folder_name(folder: Path, logdir: str) -> str:
    """The run folder under --logdir (`Hopper-v4/cql/0/261127-101500`), as TensorBoard lists it."""
    try:
        return str(folder.resolve().relative_to(Path(logdir).expanduser().resolve()))
    except ValueError:  # a resumed run's folder may lie under another --logdir
        return "/".join(folder.resolve().parts[-4:])


def _flat(summary: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`summary` with nested mappings as `a/b` keys and only numbers and strings kept (W&B's summary)."""
    flat: dict[str, Any] = {}
    for key, value in summary.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat(value, f"{name}/"))
        elif isinstance(value, bool | int | float | str):
            flat[name] = value
    return flat
