"""The programs a user runs, written as recipes (settings → envs → data → algorithm → trainer →
summary). Installed as `offline_rl.examples`, so that the console scripts and a sweep's trials run
exactly these files."""
