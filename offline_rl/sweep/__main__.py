from offline_rl.apps.cli import run_main
from offline_rl.sweep.command import main

run_main(main)
