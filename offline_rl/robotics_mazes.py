"""Gymnasium-Robotics' AntMaze and PointMaze envs, made without leaving their model files behind.

Each AntMaze or PointMaze env (1.4.2, the newest release) writes the MJCF model of its maze into the
system's temporary folder and never removes it: `ant_maze<time.time()>.xml` for AntMaze v4/v5 and
PointMaze, always the one `ant_maze.xml` for AntMaze v3. Every evaluation worker of every run of a
Minari `D4RL/antmaze` or `D4RL/pointmaze` dataset thus adds a file to `/tmp` (this project's test suite
left 600 of them on its development machine), and AntMaze v3 fails for a second user of a shared machine,
whose process cannot overwrite the first user's `/tmp/ant_maze.xml`.

`keep_maze_models_private()` gives every maze its own fresh folder for the file and removes that folder
once the env has read its model, so nothing is left and no two envs (or users) share a path. The model
file's content, and so the env, are unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
import types
from collections.abc import Callable, Iterator
from typing import Any

PRIVATE_FOLDER_PREFIX = "offline_rl-maze-"


@contextlib.contextmanager
def _private_temporary_directory(*args: Any, **kwargs: Any) -> Iterator[str]:
    """Stands in for `tempfile.TemporaryDirectory` in the maze modules. They write their model next to
    the folder it yields (`path.dirname(tmp_dir)`), so the folder is a child of a fresh private one, and
    it stays after the block: the env reads the model only later, in its own `__init__`."""
    private = tempfile.mkdtemp(prefix=PRIVATE_FOLDER_PREFIX)
    child = os.path.join(private, "model")
    os.mkdir(child)
    yield child


def _private_tempfile_module() -> types.SimpleNamespace:
    return types.SimpleNamespace(**{**vars(tempfile), "TemporaryDirectory": _private_temporary_directory})


def _removing_model_folder(init: Callable[..., None]) -> Callable[..., None]:
    """The env's `__init__`, followed (also when it fails) by removing the private folder its model was
    written into; a path outside such a folder (an unpatched writer) is left alone."""

    @functools.wraps(init)
    def initialise(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, *args, **kwargs)
        finally:
            model_path = getattr(self, "tmp_xml_file_path", None)
            if model_path is not None:
                folder = os.path.dirname(str(model_path))
                if os.path.basename(folder).startswith(PRIVATE_FOLDER_PREFIX):
                    shutil.rmtree(folder, ignore_errors=True)

    initialise.__offline_rl_private_model__ = True  # type: ignore[attr-defined]
    return initialise


_WRITERS = ("gymnasium_robotics.envs.maze.maze", "gymnasium_robotics.envs.maze.maze_v4")
_ENVS = (
    ("gymnasium_robotics.envs.maze.ant_maze_v3", "AntMazeEnv"),
    ("gymnasium_robotics.envs.maze.ant_maze_v4", "AntMazeEnv"),
    ("gymnasium_robotics.envs.maze.ant_maze_v5", "AntMazeEnv"),
    ("gymnasium_robotics.envs.maze.point_maze", "PointMazeEnv"),
)


def keep_maze_models_private() -> None:
    """Install the private folders in Gymnasium-Robotics' maze modules (idempotent). A module or class a
    later release renames or drops is skipped: its envs then behave as that release writes them."""
    import importlib

    for module_name in _WRITERS:
        with contextlib.suppress(ImportError):
            module = importlib.import_module(module_name)
            if getattr(module, "tempfile", None) is tempfile:
                module.tempfile = _private_tempfile_module()
    for module_name, class_name in _ENVS:
        with contextlib.suppress(ImportError):
            env_class = getattr(importlib.import_module(module_name), class_name, None)
            init = getattr(env_class, "__init__", None)
            if init is not None and not getattr(init, "__offline_rl_private_model__", False):
                env_class.__init__ = _removing_model_folder(init)
