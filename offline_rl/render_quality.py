"""How MuJoCo draws the frames a video films (`--video-quality`): with its shadows and reflections, or
without them where that is what makes filming slow.

Where no GPU draws, Mesa's llvmpipe rasterises each 480×480 MuJoCo frame on the CPU: 43 ms a
HalfCheetah frame on a 2-core Zen 4, of which the shadow pass and the floor's reflection (the scene
drawn a second time, mirrored) take three quarters: without them a frame takes 10.6 ms. On a GPU
these passes cost little (not measured here), so there the frames keep them. The robot, its motion and the camera are
the same either way; the floor is drawn without its mirror image and its tint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gymnasium as gym

VIDEO_QUALITIES = ("auto", "full", "fast")
"""`--video-quality`: full (MuJoCo's own look), fast (no shadows or reflections) or auto (fast where Mesa
draws in software)."""

SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swrast", "software rasterizer")
"""Words in the OpenGL renderer's name of a software rasteriser (Mesa's, and its older ones)."""

INNER_MUJOCO_ENVS = ("ant_env", "point_env")
"""Where Gymnasium-Robotics' mazes keep the MuJoCo env that draws them (AntMaze, PointMaze)."""


def mujoco_renderer_of(env: gym.Env) -> Any | None:
    """The gymnasium `MujocoRenderer` that draws `env`'s frames; None for an env MuJoCo does not draw."""
    unwrapped = env.unwrapped
    for holder in (unwrapped, *(getattr(unwrapped, name, None) for name in INNER_MUJOCO_ENVS)):
        renderer = getattr(holder, "mujoco_renderer", None)
        if renderer is not None:
            return renderer
    return None


def opengl_renderer_name() -> str:
    """The renderer of the OpenGL context current in this thread (MuJoCo's, after it has drawn a frame):
    a GPU's name, or Mesa's `llvmpipe (LLVM ...)`; empty where it cannot be asked."""
    try:
        from OpenGL import GL

        name = GL.glGetString(GL.GL_RENDERER)
    except Exception:  # PyOpenGL missing, or no context current: nothing known, nothing changed
        return ""
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name or "")


def drawn_in_software(renderer_name: str) -> bool:
    return any(word in renderer_name.lower() for word in SOFTWARE_RENDERERS)


def leave_out_shadows_and_reflections(renderer: Any) -> bool:
    """Turn off the shadow and reflection passes of the scene `renderer` draws with (its viewer is made
    by its first frame); whether it had a viewer to change."""
    import mujoco

    scene = getattr(getattr(renderer, "viewer", None), "scn", None)
    if scene is None:
        return False
    scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
    scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
    return True
