"""The sweep's state, `sweep.json` in its folder, rewritten atomically after every change.

It lists every trial with its flags and status (queued, running, done, failed, interrupted), the
attempts it took, its score and, for a failure, the one-line reason: what a user (or a script)
reads to see where a sweep stands, also after the sweep process is gone.
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from offline_rl.core.files import write_json
from offline_rl.sweep.spec import SweepSpec, Trial
from offline_rl.sweep.trial import TrialOutcome

STATE_FILE = "sweep.json"


class SweepState:
    def __init__(self, folder: Path, spec: SweepSpec, trials: list[Trial]) -> None:
        self.path = folder / STATE_FILE
        self._lock = threading.Lock()
        self.header = {"name": spec.name, "example": spec.example, "source": spec.source}
        self.trials: dict[str, dict[str, Any]] = {
            trial.id: {"arguments": list(trial.arguments), "status": "queued", "attempts": 0} for trial in trials
        }
        self.write()

    def running(self, trial_id: str) -> None:
        with self._lock:
            self.trials[trial_id]["status"] = "running"
        self.write()

    def finished(self, outcome: TrialOutcome) -> None:
        with self._lock:
            entry = self.trials[outcome.id]
            entry.update({k: v for k, v in asdict(outcome).items() if k != "id"})
        self.write()

    def count(self, status: str) -> int:
        return sum(entry["status"] == status for entry in self.trials.values())

    def scores(self) -> list[float]:
        return [e["score"] for e in self.trials.values() if e["status"] == "done" and e.get("score") is not None]

    def write(self) -> None:
        with self._lock:
            write_json(self.path, {**self.header, "trials": self.trials})
