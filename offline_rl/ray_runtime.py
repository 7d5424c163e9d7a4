"""Connecting to Ray, for the commands that can hand their work to it (sweeps, RL Unplugged conversion).

Ray is an optional extra: nothing imports it until `--ray-address` (or `RAY_ADDRESS`) asks for it.
"""

from __future__ import annotations

from typing import Any

from offline_rl.errors import OfflineRLError

LOCAL = "local"
"""`--ray-address local`: a Ray runtime on this machine, for as long as the command runs."""


def connect(address: str) -> Any:
    """The `ray` module, connected to `address` (`auto`, `ray://HOST:PORT`, `HOST:PORT` or `local`);
    one-line errors when Ray is missing or the cluster cannot be reached."""
    try:
        import ray
    except ImportError:
        raise OfflineRLError('--ray-address: Ray is not installed; pip install -e ".[ray]"') from None
    if ray.is_initialized():
        return ray
    try:
        if address == LOCAL:
            ray.init(include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as error:
        reason = " ".join(str(error).split())[:300]
        raise OfflineRLError(f"--ray-address {address}: cannot connect ({reason})") from None
    return ray
