from offline_rl.apps.cli import run_main
from offline_rl.results.command import main

run_main(main)
