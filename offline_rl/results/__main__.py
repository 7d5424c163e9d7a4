from offline_rl.cli.main import run_main
from offline_rl.results.command import main

run_main(main)
