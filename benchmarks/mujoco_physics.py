"""How closely the MuJoCo models evaluated here step as they did for D4RL, across MuJoCo versions.

D4RL recorded its data and measured its scores on MuJoCo 2.x; this project runs today's MuJoCo. Two
checks, neither a timing:

    python benchmarks/mujoco_physics.py compare-antmaze --d4rl-ant-xml PATH/d4rl/locomotion/assets/ant.xml
        compiles D4RL's ant.xml with its maze blocks added as D4RL's `MazeEnv` adds them, for every
        maze, and compares the compiled model with `offline_rl.envs.antmaze`'s field by field
        (masses, inertias, joints, geoms, contact parameters, actuators, options);
    python benchmarks/mujoco_physics.py record --model hopper --output states.npz [--episodes 40]
        records states of uniform-random episodes of a model (antmaze: D4RL's U-maze as rebuilt here;
        hopper, ant, walker2d, half_cheetah: gymnasium's v4 models; kitchen: Gymnasium-Robotics'
        Franka Kitchen, read from its installed XML, whose meshes stay beside it) with the installed MuJoCo, and
        the state one env step after each, once with the model's margins as compiled and once as
        `offline_rl.envs.mujoco` keeps them (halved where this MuJoCo adds both geoms' margins);
    python benchmarks/mujoco_physics.py replay states.npz --output next.npz
        steps the same states and actions with whatever MuJoCo this interpreter has (it needs only
        mujoco and numpy: e.g. a venv with `pip install mujoco==2.3.1.post1 numpy`; the kitchen's XML
        file must still be where `record` found it);
    python benchmarks/mujoco_physics.py diff states.npz next.npz
        how far the two versions' next states lie apart, relative to a step's own change.

Every step starts from a freshly set state (no solver warm start), so both versions solve the same
problem.
"""

from __future__ import annotations

import argparse
import importlib.util
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
REPO_ROOT = Path(__file__).resolve().parents[1]
GYMNASIUM_MODELS = {"hopper": 4, "ant": 5, "walker2d": 4, "half_cheetah": 5}  # model -> the v4 env's frame skip
ANTMAZE_FRAME_SKIP = 5
KITCHEN_FRAME_SKIP = 40  # Gymnasium-Robotics' FrankaRobot: 40 steps of 0.002 s an env step
EPISODE_STEPS = 250


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


def compare_antmaze(ant_xml: Path) -> int:
    import mujoco

    from offline_rl.envs.antmaze import ANTMAZE_LAYOUTS, antmaze_model_xml

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
        print(
            f"{maze}: {theirs.ngeom} geoms, {theirs.nbody} bodies; fields that differ: {differ or 'none'}; "
            f"options equal: {options}"
        )
        failures += bool(differ or not options)
    return 1 if failures else 0


def _margins_module():
    """`offline_rl/envs/mujoco.py` loaded on its own (it needs only mujoco and numpy), so that a venv
    with nothing but an older MuJoCo can replay the states as the library would step them."""
    spec = importlib.util.spec_from_file_location("mujoco_margins", REPO_ROOT / "offline_rl" / "envs" / "mujoco.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model_xml(name: str) -> tuple[str, int]:
    """(MJCF text, or for a model with mesh files the path of its XML; frame skip) of a model."""
    if name == "kitchen":
        import gymnasium_robotics

        assets = Path(gymnasium_robotics.__file__).parent / "envs" / "assets" / "kitchen_franka" / "kitchen_assets"
        return str((assets / "kitchen_env_model.xml").resolve()), KITCHEN_FRAME_SKIP
    if name == "antmaze":
        from offline_rl.envs.antmaze import ANTMAZE_LAYOUTS, antmaze_model_xml

        return antmaze_model_xml(ANTMAZE_LAYOUTS["umaze"]), ANTMAZE_FRAME_SKIP
    import gymnasium

    assets = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets"
    return (assets / f"{name}.xml").read_text(), GYMNASIUM_MODELS[name]


def _models(xml: str, variant: str):
    import mujoco

    is_path = xml.endswith(".xml") and not xml.lstrip().startswith("<")
    model = mujoco.MjModel.from_xml_path(xml) if is_path else mujoco.MjModel.from_xml_string(xml)
    if variant == "classic_margins":
        _margins_module().keep_classic_model_margins(model)
    return model, mujoco.MjData(model)


VARIANTS = ("as_compiled", "classic_margins")


def _one_step(model, data, state: np.ndarray, action: np.ndarray, frame_skip: int) -> np.ndarray:
    import mujoco

    mujoco.mj_resetData(model, data)
    data.qpos[:], data.qvel[:] = state[: model.nq], state[model.nq :]
    mujoco.mj_forward(model, data)
    data.ctrl[:] = action
    for _ in range(frame_skip):
        mujoco.mj_step(model, data)
    return np.concatenate([data.qpos, data.qvel])


def record(name: str, output: Path, episodes: int) -> int:
    import mujoco

    xml, frame_skip = _model_xml(name)
    model, data = _models(xml, "as_compiled")
    low, high = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    rng = np.random.default_rng(0)
    states, actions = [], []
    for _ in range(episodes):
        mujoco.mj_resetData(model, data)
        data.qpos[:] = model.qpos0 + rng.uniform(-0.1, 0.1, model.nq)
        data.qvel[:] = rng.standard_normal(model.nv) * 0.1
        mujoco.mj_forward(model, data)
        for _ in range(EPISODE_STEPS):
            action = rng.uniform(low, high)
            states.append(np.concatenate([data.qpos, data.qvel]))
            actions.append(action)
            data.ctrl[:] = action
            for _ in range(frame_skip):
                mujoco.mj_step(model, data)
    arrays = {"model": np.array(name), "xml": np.array(xml), "frame_skip": np.array(frame_skip)}
    arrays |= {"states": np.array(states), "actions": np.array(actions)}
    arrays |= _replay(arrays)
    np.savez(output, **arrays)
    print(f"{name}: {len(states)} states of {episodes} episodes, MuJoCo {mujoco.__version__}: {output}")
    return 0


def _replay(arrays) -> dict[str, np.ndarray]:
    import mujoco

    result = {"version": np.array(mujoco.__version__), "nq": np.array(0)}
    frame_skip = int(arrays["frame_skip"])
    for variant in VARIANTS:
        model, data = _models(str(arrays["xml"]), variant)
        result["nq"] = np.array(model.nq)
        steps = zip(arrays["states"], arrays["actions"], strict=True)
        result[f"next_{variant}"] = np.array([_one_step(model, data, s, a, frame_skip) for s, a in steps])
    return result


def replay(states: Path, output: Path) -> int:
    arrays = dict(np.load(states))
    result = _replay(arrays)
    np.savez(output, **result)
    print(f"replayed {len(arrays['states'])} steps with MuJoCo {result['version']}: {output}")
    return 0


def diff(first: Path, second: Path) -> int:
    a, b = np.load(first), np.load(second)
    nq = int(a["nq"])
    print(f"MuJoCo {a['version']} against {b['version']}, {len(a['next_as_compiled'])} steps")
    if "states" in a:
        change = np.abs(a["next_as_compiled"] - a["states"])[:, nq:]
        print(f"  {a['model']}: a step changes qvel by a median {np.median(change):.3g}")
    for variant in VARIANTS:
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
    command = commands.add_parser("compare-antmaze")
    command.add_argument("--d4rl-ant-xml", type=Path, required=True)
    command = commands.add_parser("record")
    command.add_argument("--model", choices=["antmaze", *GYMNASIUM_MODELS, "kitchen"], default="antmaze")
    command.add_argument("--output", type=Path, required=True)
    command.add_argument("--episodes", type=int, default=40)
    command = commands.add_parser("replay")
    command.add_argument("states", type=Path)
    command.add_argument("--output", type=Path, required=True)
    command = commands.add_parser("diff")
    command.add_argument("first", type=Path)
    command.add_argument("second", type=Path)
    args = parser.parse_args()
    if args.command == "compare-antmaze":
        return compare_antmaze(args.d4rl_ant_xml)
    if args.command == "record":
        return record(args.model, args.output, args.episodes)
    if args.command == "replay":
        return replay(args.states, args.output)
    return diff(args.first, args.second)


if __name__ == "__main__":
    sys.exit(main())
