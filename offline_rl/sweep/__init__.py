"""`python -m offline_rl.sweep`: a grid of ordinary example runs (seeds × datasets × settings), run as
parallel processes on this machine or as Ray tasks on a cluster, resumable at any time, ending
with the tables and plots of `offline_rl.results`.
"""
