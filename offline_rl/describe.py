"""`python -m offline_rl.describe SOURCE ...`: what each dataset holds and the command that trains on it.

The flags are the fields of `offline_rl.cli.describe.DescribeConfig`.
"""

from __future__ import annotations

from offline_rl.cli.describe import main
from offline_rl.cli.main import run_main

if __name__ == "__main__":
    run_main(main)
