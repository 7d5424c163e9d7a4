"""`python -m offline_rl.results LOGDIR...`: the tables and plots a paper reports, from the runs' logs.

Runs are found by their `run.json` (settings) next to TensorBoard event files; each run's
evaluations become rows of `results.csv`, each (dataset, setting) group a row of `results.md`
(final score mean ± std, IQM with a 95% stratified-bootstrap CI from `rliable`, the optimistic best
beside it), and `scores.png` / `conservatism.png` show the curves. Needs the `results` extra.
"""
