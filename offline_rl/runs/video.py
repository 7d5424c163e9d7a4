"""Videos of the episodes a policy plays (`--save-video`): one MP4 file per episode, written frame by
frame as the episode is played.

Gymnasium's own `RecordVideo` needs moviepy and keeps an episode's frames in memory until it ends: a
1000-step MuJoCo episode at 480×480 is 0.7 GB, and ten evaluation envs play in step. Here each frame
goes to OpenCV's encoder as it is rendered (OpenCV is already installed for the Atari preprocessing),
under a hidden name that becomes the video's only when its episode has ended (`offline_rl.core.files`).
"""

from __future__ import annotations

import abc
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, SupportsFloat

import cv2
import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing

from offline_rl.core.errors import OfflineRLError, first_line
from offline_rl.core.files import create_staging, publish, staging_name
from offline_rl.core.progress import progress_bar
from offline_rl.envs.make import MUJOCO_OFFSCREEN_BACKENDS
from offline_rl.envs.mujoco import (
    VIDEO_QUALITIES,
    drawn_in_software,
    leave_out_shadows_and_reflections,
    mujoco_renderer_of,
    opengl_renderer_name,
)

log = logging.getLogger(__name__)

VIDEO_CODEC = "mp4v"
"""MPEG-4 Part 2 in an .mp4 file: what OpenCV's PyPI wheels encode (they carry no H.264 encoder).
VLC, QuickTime, Windows' player and ffmpeg play it; web browsers mostly do not."""

BAR_DELAY_S = 3.0
"""The filming bar shows once filming has taken this long: a short watch prints no bar."""

DEFAULT_FPS = 30.0
"""Frames per second of an env that does not say (its `metadata["render_fps"]`)."""


ATARI_FRAMES_PER_SECOND = 60.0
"""The console's (NTSC) frame rate; an Atari step plays several of these frames (`frames_per_second`).
ALE's `render_fps` of 30 is the rate of its own window, not the game's."""


def mujoco_rendering_hint() -> str:
    """What lets MuJoCo render without a display, for an error where it could not."""
    chosen = os.environ.get("MUJOCO_GL", "unset")
    return f"; MuJoCo renders off screen with {MUJOCO_OFFSCREEN_BACKENDS}; MUJOCO_GL is {chosen}"


def display_available() -> bool:
    """Whether windows can open here: on Linux, an X or Wayland display is named (a server reached over
    SSH, a cluster node or a container has none); elsewhere, always."""
    if not sys.platform.startswith("linux"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def require_display() -> None:
    """`--render` on a machine with no display: one line that points to `--save-video`. Without it,
    MuJoCo's window system (GLFW) ends the process in a failed C assertion."""
    if not display_available():
        raise OfflineRLError(
            "--render opens a window, but this machine has no display (DISPLAY and WAYLAND_DISPLAY are unset); "
            "--save-video DIR films the episodes into files instead"
        )


def prepare_offscreen_rendering() -> None:
    """Make MuJoCo render off screen on a machine with no display. Its default, GLFW, needs a window
    system; tried first and failing, it leaves PyOpenGL set up for GLX, so that EGL (a GPU's, or
    Mesa's in software) then fails too. A choice already made in `MUJOCO_GL` is kept."""
    if "MUJOCO_GL" not in os.environ and not display_available():
        os.environ["MUJOCO_GL"] = "egl"


def frames_per_second(env: gym.Env) -> float:
    """The rate at which `env`'s steps happen in the game or simulation, so that a video plays in real
    time: its render rate; for an Atari game, the console's 60 frames a second over the emulator frames
    a step plays (ALE's own frame skip, times `AtariPreprocessing`'s: 1 × 4 for `*NoFrameskip-v4` and
    the `ALE/*-v5` envs the examples make, 4 × 1 for a Minari recording's screens)."""

    if not type(env.unwrapped).__module__.startswith("ale_py"):
        # (a MuJoCo env's own `frame_skip` is its physics steps per step, already counted in its render_fps)
        return float(env.metadata.get("render_fps") or DEFAULT_FPS)
    skip = getattr(env.unwrapped, "_frameskip", 1)
    # a (low, high) pair: each step skips a random count from low to high - 1
    frames = (skip[0] + skip[1] - 1) / 2 if isinstance(skip, tuple) else float(skip)
    layer: gym.Env = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, AtariPreprocessing):
            frames *= layer.frame_skip
        layer = layer.env
    return ATARI_FRAMES_PER_SECOND / frames


class VideoFile:
    """One video written frame by frame to a hidden staging file beside `path`, renamed by `finish`
    (to `path`, or the name it is given then) and removed by `discard` (an episode that did not end: a
    stop, or an env closed mid-episode)."""

    def __init__(self, path: Path, fps: float, first_frame: np.ndarray) -> None:
        self.path = path
        self.staging = staging_name(path, suffix=".part.mp4")  # OpenCV picks the container from the name
        create_staging(self.staging, path)
        height, width = first_frame.shape[:2]
        self.size = (width + width % 2, height + height % 2)  # MPEG-4 encodes even sizes
        self.frames = 0
        try:  # until it is returned no one else can remove the staging file: a stop here (Ctrl-C, SIGTERM) too
            self._writer = cv2.VideoWriter(str(self.staging), cv2.VideoWriter_fourcc(*VIDEO_CODEC), fps, self.size)
            if not self._writer.isOpened():
                raise OfflineRLError(f"{path}: OpenCV cannot write {VIDEO_CODEC} video here (its ffmpeg is missing)")
            self.add(first_frame)
        except BaseException:
            self.staging.unlink(missing_ok=True)
            raise

    def add(self, frame: np.ndarray) -> None:
        width, height = self.size
        bgr = cv2.cvtColor(np.ascontiguousarray(frame, dtype=np.uint8), cv2.COLOR_RGB2BGR)
        if bgr.shape[:2] != (height, width):
            bgr = cv2.copyMakeBorder(bgr, 0, height - bgr.shape[0], 0, width - bgr.shape[1], cv2.BORDER_REPLICATE)
        self._writer.write(bgr)
        self.frames += 1

    def finish(self, path: Path | None = None) -> Path:
        """Close the video and give it its name: `path`, else the one it was opened with."""
        self._writer.release()
        self.path = path or self.path
        if not self._complete():  # OpenCV reports no failed write: a full disk or a size limit cuts it short
            self.staging.unlink(missing_ok=True)
            raise OfflineRLError(
                f"{self.path}: not written whole (the encoder's writes were refused: a full disk or a file size limit?)"
            )
        publish(self.staging, self.path)
        return self.path

    def _complete(self) -> bool:
        """Whether the closed staging file reads back as a video of every frame written (its index,
        written last, holds the count: a file cut short has none)."""
        if self.staging.stat().st_size == 0:
            return False
        reader = cv2.VideoCapture(str(self.staging))
        try:
            return reader.isOpened() and int(reader.get(cv2.CAP_PROP_FRAME_COUNT)) == self.frames
        finally:
            reader.release()

    def discard(self) -> None:
        self._writer.release()
        self.staging.unlink(missing_ok=True)


SavedVideo = Callable[[Path, int, float], None]
"""Told of each video written: its path, the episode's steps and its return."""


class Videos(abc.ABC):
    """Where the episodes of the envs it wraps (`wrap`) are filmed, and which ones: every episode
    (`VideoFolder`) or the chosen evaluations' first (`EvaluationVideos`). The envs share it, so they
    must step in this process (Tianshou's `DummyVectorEnv`)."""

    flag = "--save-video"
    """The flag that asked for the videos, for the errors of an env that cannot be filmed."""

    def __init__(self, *, on_saved: SavedVideo | None = None, quality: str = "full") -> None:
        if quality not in VIDEO_QUALITIES:
            raise ValueError(f"video quality {quality!r}: one of {', '.join(VIDEO_QUALITIES)}")
        self.on_saved = on_saved
        self.saved: list[Path] = []
        self.quality = quality
        """`--video-quality` (`offline_rl.envs.mujoco`); "full" films what gymnasium draws."""
        self._software: bool | None = None  # whether software draws the frames: asked at the first MuJoCo frame
        self._bar: Any = None

    def wrap(self, env: gym.Env) -> EpisodeVideo:
        return EpisodeVideo(env, self)

    @abc.abstractmethod
    def claim(self, env: EpisodeVideo) -> Path | None:
        """Whether the episode `env` starts now is filmed: the name its frames are written beside
        until it ends (its staging file's), or None."""

    @abc.abstractmethod
    def final_path(self, env: EpisodeVideo) -> Path:
        """The name of the video of the episode `env` has just ended."""

    def leaves_out_shadows(self, env: gym.Env) -> bool:
        """Whether `env`, which has drawn its first frame, draws its next ones without MuJoCo's shadows and
        reflections: `--video-quality fast`, or auto where Mesa draws in software."""

        renderer = mujoco_renderer_of(env)
        if renderer is None or self.quality == "full" or (self.quality == "auto" and not self._drawn_in_software()):
            return False
        return leave_out_shadows_and_reflections(renderer)

    def _drawn_in_software(self) -> bool:
        """Whether software draws the frames, asked of OpenGL at the first MuJoCo frame and said once."""

        if self._software is None:
            name = opengl_renderer_name()
            self._software = drawn_in_software(name)
            if self._software:
                log.info(
                    f"filming: MuJoCo's frames are drawn in software ({name}), so without shadows and "
                    "reflections, which is several times faster (--video-quality full keeps them)"
                )
        return self._software

    def saved_video(self, path: Path, steps: int, episode_return: float) -> None:
        self.saved.append(path)
        if self.on_saved is not None:
            self.on_saved(path, steps, episode_return)

    def frame_written(self) -> None:
        """Count a frame on the filming bar. Filming is slow where MuJoCo draws in software, and envs
        that play in step end their episodes together: long episodes would otherwise show no progress
        for minutes."""
        if self._bar is None:
            self._bar = progress_bar(desc="filming", unit=" frames", leave=False, delay=BAR_DELAY_S)
        self._bar.update(1)

    def close(self) -> None:
        """Close the filming bar (the videos themselves are closed by their envs)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class VideoFolder(Videos):
    """Every episode, in `folder`, named `<name>-<n>.mp4` and numbered in the order the episodes end,
    after any of that name already there: a second `--watch` into the same folder adds its videos and
    replaces none."""

    def __init__(
        self, folder: str | os.PathLike[str], name: str, *, on_saved: SavedVideo | None = None, quality: str = "full"
    ) -> None:
        super().__init__(on_saved=on_saved, quality=quality)
        self.folder = Path(folder).expanduser()
        self.stem = re.sub(r"[^\w.-]+", "-", name).strip("-") or "episode"  # `ALE/Pong-v5`: one file name
        pattern = re.compile(rf"{re.escape(self.stem)}-(\d+)\.mp4")
        existing = (pattern.fullmatch(path.name) for path in self.folder.glob("*.mp4")) if self.folder.is_dir() else ()
        self._last_number = max((int(found[1]) for found in existing if found), default=0)

    def claim(self, env: EpisodeVideo) -> Path:
        return self.folder / f"{self.stem}.mp4"  # numbered when its episode ends

    def final_path(self, env: EpisodeVideo) -> Path:
        self._last_number += 1
        return self.folder / f"{self.stem}-{self._last_number}.mp4"


class EvaluationVideos(Videos):
    """A training run's evaluations, filmed one episode each (`--video-interval`): `film(path)` before an
    evaluation's envs are reset asks for the first episode to start, `film(None)` for none. The env
    that claims it keeps the claim through further resets until an episode of it ends (the trainer
    resets the envs once before its first evaluation and again as it begins), so one episode of the
    evaluation is filmed: the first env's, which resets first."""

    flag = "--video-interval"

    def __init__(self, *, on_saved: SavedVideo | None = None, quality: str = "full") -> None:
        super().__init__(on_saved=on_saved, quality=quality)
        self._wanted: Path | None = None
        self._holder: EpisodeVideo | None = None

    def film(self, path: Path | None) -> None:
        self._wanted, self._holder = path, None
        self.close()  # a bar per video: training goes on between them

    def claim(self, env: EpisodeVideo) -> Path | None:
        if self._wanted is None or self._holder not in (None, env):
            return None
        self._holder = env
        return self._wanted

    def final_path(self, env: EpisodeVideo) -> Path:
        path = self._wanted
        if path is None or self._holder is not env:
            raise RuntimeError("an evaluation video ended that was not asked for")
        self._wanted, self._holder = None, None
        self.close()
        return path


class EpisodeVideo(gym.Wrapper):
    """Records the episodes `env` plays that its `Videos` choose: the frame after reset and one after
    each step. The return it reports is the sum of the rewards this wrapper sees, so it should be the
    outermost one: the return an evaluation scores. `env` must be made with `render_mode="rgb_array"`;
    it renders nothing in the episodes that are not filmed."""

    def __init__(self, env: gym.Env, videos: Videos) -> None:
        super().__init__(env)
        self.videos = videos
        self.fps = frames_per_second(env)
        self._video: VideoFile | None = None
        self._staging: Path | None = None  # the episode is filmed: its video is written beside this name
        self._first_frame: np.ndarray | None = None
        self._steps = 0
        self._return = 0.0
        self._quality_chosen = False  # after its first frame: with or without shadows (`Videos.leaves_out_shadows`)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._discard()
        observation, info = self.env.reset(**kwargs)
        self._staging = self.videos.claim(self)
        # kept, not yet written: an env reset after its last episode (as collectors do) leaves no file
        self._first_frame = self._frame() if self._staging is not None else None
        self._steps, self._return = 0, 0.0
        return observation, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        if self._staging is None:
            return observation, reward, terminated, truncated, info
        if self._video is None:
            if self._first_frame is None:
                raise RuntimeError("a filmed env was stepped before its first reset")
            self._video = VideoFile(self._staging, self.fps, self._first_frame)
            self.videos.frame_written()
        self._video.add(self._frame())
        self.videos.frame_written()
        self._steps += 1
        self._return += float(reward)
        if terminated or truncated:
            path = self._video.finish(self.videos.final_path(self))  # a stop before its rename: `close` discards it
            self._video, self._staging = None, None
            self.videos.saved_video(path, self._steps, self._return)
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        self._discard()
        super().close()

    def _discard(self) -> None:
        if self._video is not None:
            self._video.discard()
            self._video = None

    def _frame(self) -> np.ndarray:
        frame = self._rendered()
        if not self._quality_chosen:
            self._quality_chosen = True
            if self.videos.leaves_out_shadows(self.env):
                frame = self._rendered()  # this one too
        return frame

    def _rendered(self) -> np.ndarray:
        try:
            frame = self.env.render()
        except Exception as error:  # an env's renderer: no display, no OpenGL, a package missing
            hint = mujoco_rendering_hint() if "mujoco" in type(self.env.unwrapped).__module__ else ""
            raise OfflineRLError(
                f"{self.videos.flag}: {self._name()} could not render a frame ({first_line(error)}){hint}"
            ) from None
        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
            raise OfflineRLError(
                f"{self.videos.flag}: {self._name()} rendered {type(frame).__name__}, not an RGB image "
                f"(render_mode {self.env.render_mode!r}; 'rgb_array' is needed)"
            )
        return frame

    def _name(self) -> str:
        spec = self.env.spec
        return spec.id if spec is not None else type(self.env.unwrapped).__name__
