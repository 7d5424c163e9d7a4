"""`python -m offline_rl.describe SOURCE ...`: what each dataset holds and the command that trains on it.

The flags are the fields of `offline_rl.apps.dataset_description.DescribeConfig`.
"""

from __future__ import annotations

from offline_rl.apps.cli import run_main
from offline_rl.apps.dataset_description import main

if __name__ == "__main__":
    run_main(main)
