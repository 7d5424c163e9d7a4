"""How close the rebuilt D4RL AntMaze (`offline_rl.d4rl_antmaze`) steps to D4RL's own model, across MuJoCo versions.

D4RL's AntMaze returns cannot be replayed here (its reference scores are 0 and 1, and its datasets
cannot be downloaded), so the rebuild is checked at the level of the model and of single steps:

    python benchmarks/antmaze_physics.py compare --d4rl-ant-xml PATH/d4rl/locomotion/assets/ant.xml
        compiles D4RL's ant.xml with its maze blocks added as D4RL's `MazeEnv` adds them, for every
        maze, and compares the compiled model with the rebuild's field by field (masses, inertias,
        joints, geoms, contact parameters, actuators, options);
    python benchmarks/antmaze_physics.py record --output states.npz [--episodes 20]
        records states of uniform-random U-maze episodes with the installed MuJoCo, and the state one
        env step (5 RK4 steps) after each, once with the rebuild's contact margins and once with
        D4RL's own (every geom 0.01);
    python benchmarks/antmaze_physics.py replay states.npz --output next.npz
        steps the same states and actions with whatever MuJoCo this interpreter has (it needs only
        mujoco and numpy: e.g. a venv with `pip install mujoco==2.3.1.post1 numpy`);
    python benchmarks/antmaze_physics.py diff states.npz next.npz
        how far the two versions' next states lie apart, relative to a step's own change.

Every step starts from a freshly set state (no solver warm start), so the two versions see the same
problem. MuJoCo up to 3.4 takes the larger geom margin of a contact pair and 3.5+ their sum
(`offline_rl.mujoco_margins`), which is why the rebuild puts D4RL's margin on the ant alone.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

COMPARED_FIELDS = (
    *("body_mass", "body_inertia", "body_pos", "body_quat", "body_ipos", "body_iquat"),
    *("jnt_type", "jnt_range", "jnt_axis", "jnt_pos", "jnt_limited", "jnt_margin", "qpos0"),
    *("geom_type", "geom_size", "geom_pos", "geom_quat", "geom_contype", "geom_conaffinity", "geom_condim"),
    *("geom_friction", "geom_solref", "geom_solimp", "geom_margin", "geom_gap", "dof_damping", "dof_armature"),
    *("actuator_ctrlrange", "actuator_gear", "actuator_trnid", "actuator_ctrllimited"),
)
STEP_TIME = 5  # D4RL's frame skip
TORQUE = 30.0
EPISODE_STEPS = 700


def d4rl_maze_xml(ant_xml: Path, layout: tuple[str, ...]) -> str:
    """D4RL's `MazeEnv` construction: its ant.xml plus one 4 × 4 × 1 box per wall cell, start cell at the origin."""
    tree = ET.parse(ant_xml)
    worldbody = tree.find(".//worldbody")
    assert worldbody is not None, f"{ant_xml}: no <worldbody>"
    start_row, start_column = next((i, j) for i, row in enumerate(layout) for j, c in enumerate(row) if c == "R")
    for i, row in enumerate(layout):
        for j, cell in enumerate(row):
            if cell == "#":
                ET.SubElement(
                    worldbody,
                    "geom",
                    name=f"block_{i}_{j}",
                    pos=f"{4.0 * (j - start_column)} {4.0 * (i - start_row)} 1.0",
                    size="2.0 2.0 1.0",
                    type="box",
                    material="",
                    contype="1",
                    conaffinity="1",
                    rgba="0.7 0.5 0.3 1.0",
                )
    return ET.tostring(tree.getroot(), encoding="unicode")


def compare(ant_xml: Path) -> int:
    import mujoco

    from offline_rl.d4rl_antmaze import ANTMAZE_LAYOUTS, antmaze_model_xml

    failures = 0
    for maze, layout in ANTMAZE_LAYOUTS.items():
        with tempfile.NamedTemporaryFile("w", suffix=".xml", dir=ant_xml.parent) as handle:
            handle.write(d4rl_maze_xml(ant_xml, layout))
            handle.flush()
            theirs = mujoco.MjModel.from_xml_path(handle.name)
        ours = mujoco.MjModel.from_xml_string(antmaze_model_xml(layout))
        differ = [
            name
            for name in COMPARED_FIELDS
            if getattr(theirs, name).shape != getattr(ours, name).shape
            or not np.allclose(getattr(theirs, name), getattr(ours, name), rtol=0, atol=1e-9)
        ]
        options = all(
            getattr(theirs.opt, name) == getattr(ours.opt, name) for name in ("timestep", "integrator", "iterations")
        )
        margin_geoms = [ours.geom(g).name for g in range(ours.ngeom) if theirs.geom_margin[g] != ours.geom_margin[g]]
        static = all(name == "floor" or name.startswith("block_") for name in margin_geoms)
        print(
            f"{maze}: {theirs.ngeom} geoms, {theirs.nbody} bodies; fields that differ: {differ or 'none'}; "
            f"options equal: {options}; margins differ on {len(margin_geoms)} geoms, all floor or blocks: {static}"
        )
        failures += bool(set(differ) - {"geom_margin"} or not options or not static)
    return 1 if failures else 0


def _model_variants() -> dict[str, str]:
    from offline_rl.d4rl_antmaze import ANTMAZE_LAYOUTS, antmaze_model_xml
    from offline_rl.mujoco_margins import STATIC_GEOM_MARGIN

    ours = antmaze_model_xml(ANTMAZE_LAYOUTS["umaze"])
    return {"rebuild": ours, "d4rl_margins": ours.replace(f" {STATIC_GEOM_MARGIN}", "")}


def _one_step(model, data, state: np.ndarray, action: np.ndarray) -> np.ndarray:
    import mujoco

    mujoco.mj_resetData(model, data)
    data.qpos[:], data.qvel[:] = state[: model.nq], state[model.nq :]
    mujoco.mj_forward(model, data)
    data.ctrl[:] = action
    for _ in range(STEP_TIME):
        mujoco.mj_step(model, data)
    return np.concatenate([data.qpos, data.qvel])


def record(output: Path, episodes: int) -> int:
    import mujoco

    xmls = _model_variants()
    model = mujoco.MjModel.from_xml_string(xmls["rebuild"])
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    states, actions = [], []
    for _ in range(episodes):
        mujoco.mj_resetData(model, data)
        data.qpos[:] = model.qpos0 + rng.uniform(-0.1, 0.1, model.nq)
        data.qvel[:] = rng.standard_normal(model.nv) * 0.1
        mujoco.mj_forward(model, data)
        for _ in range(EPISODE_STEPS):
            action = rng.uniform(-1.0, 1.0, model.nu) * TORQUE
            states.append(np.concatenate([data.qpos, data.qvel]))
            actions.append(action)
            data.ctrl[:] = action
            for _ in range(STEP_TIME):
                mujoco.mj_step(model, data)
    arrays = {"states": np.array(states), "actions": np.array(actions)}
    arrays |= {f"xml_{name}": np.array(xml) for name, xml in xmls.items()}
    arrays |= _replay(arrays)
    np.savez(output, **arrays)
    print(f"{len(states)} states of {episodes} episodes, MuJoCo {mujoco.__version__}: {output}")
    return 0


def _replay(arrays) -> dict[str, np.ndarray]:
    import mujoco

    result = {"version": np.array(mujoco.__version__)}
    for key in [key for key in arrays if key.startswith("xml_")]:
        model = mujoco.MjModel.from_xml_string(str(arrays[key]))
        data = mujoco.MjData(model)
        result[f"next_{key[4:]}"] = np.array(
            [_one_step(model, data, s, a) for s, a in zip(arrays["states"], arrays["actions"], strict=True)]
        )
    return result


def replay(states: Path, output: Path) -> int:
    arrays = dict(np.load(states))
    result = _replay(arrays)
    np.savez(output, **result)
    print(f"replayed {len(arrays['states'])} steps with MuJoCo {result['version']}: {output}")
    return 0


def diff(first: Path, second: Path) -> int:
    a, b = np.load(first), np.load(second)
    nq = 15
    print(f"MuJoCo {a['version']} against {b['version']}, {len(a['next_rebuild'])} steps")
    if "states" in a:
        change = np.abs(a["next_rebuild"] - a["states"])[:, nq:]
        print(f"  a step changes qvel by a median {np.median(change):.3g}")
    for variant in ("rebuild", "d4rl_margins"):
        gap = np.abs(a[f"next_{variant}"] - b[f"next_{variant}"])[:, nq:]
        share = np.mean(gap.max(axis=1) > 1e-3)
        print(
            f"  {variant}: |qvel difference| median {np.median(gap):.3g}, "
            f"99th percentile {np.percentile(gap, 99):.3g}, max {gap.max():.3g}; steps differing by > 1e-3: {share:.1%}"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("compare")
    command.add_argument("--d4rl-ant-xml", type=Path, required=True)
    command = commands.add_parser("record")
    command.add_argument("--output", type=Path, required=True)
    command.add_argument("--episodes", type=int, default=20)
    command = commands.add_parser("replay")
    command.add_argument("states", type=Path)
    command.add_argument("--output", type=Path, required=True)
    command = commands.add_parser("diff")
    command.add_argument("first", type=Path)
    command.add_argument("second", type=Path)
    args = parser.parse_args()
    if args.command == "compare":
        return compare(args.d4rl_ant_xml)
    if args.command == "record":
        return record(args.output, args.episodes)
    if args.command == "replay":
        return replay(args.states, args.output)
    return diff(args.first, args.second)


if __name__ == "__main__":
    sys.exit(main())
