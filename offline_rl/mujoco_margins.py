"""Contact margins that mean the same in every MuJoCo version.

A contact becomes a constraint once two geoms come within their pair's margin. MuJoCo up to 3.4 takes
the larger of the two geoms' margins, MuJoCo 3.5 and later their sum (checked with a sphere over a
plane: margins 0.01 and 0.01 make a pair margin of 0.01 in 3.4.0 and 0.02 in 3.5.0 and 4.0.0). D4RL's
models give every geom the same margin, so on a recent MuJoCo their contacts start twice as far
out as they did under mujoco-py: one step of D4RL's ant differed from MuJoCo 2.3.1-3.4.0 by a median
0.016 in its velocities, 2.5% of a step's change, and by 3e-6 once the static side's margin was 0
(BENCHMARKS.md, "D4RL's AntMaze envs"). The rebuilt D4RL envs therefore keep D4RL's margin on the moving
body's geoms and give the static ones (floor, walls, blocks) this attribute: the pair margin is then
D4RL's under either rule.
"""

STATIC_GEOM_MARGIN = 'margin="0"'
