from offline_rl.cli.main import run_main
from offline_rl.sweep.command import main

run_main(main)
