"""`--save-video`: every episode `--watch` plays, as an MP4 file of what the env rendered, with its return;
`--video-interval`: the first episode of a training run's chosen evaluations, in its run folder."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import forked
from conftest import REPO_ROOT, load_benchmark, run_in_process, run_repo_script, script_env
from offline_rl.core.errors import OfflineRLError
from offline_rl.envs.atari import make_atari_env
from offline_rl.envs.mujoco import mujoco_renderer_of
from offline_rl.runs.training import PREVIEW_TAG
from offline_rl.runs.video import EpisodeVideo, EvaluationVideos, VideoFile, VideoFolder, Videos, frames_per_second
from offline_rl.runs.video_preview import animated_preview

VIDEO_LINE = re.compile(r"video (\S+): return (-?[\d.]+) in (\d+) steps")


def read_video(path: Path) -> tuple[list[np.ndarray], float]:
    """The RGB frames of a video file, decoded by OpenCV, and its frame rate."""
    import cv2

    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame[..., ::-1])
    fps = capture.get(cv2.CAP_PROP_FPS)
    capture.release()
    return frames, fps


def short_pong(steps: int, folder: Videos | None = None) -> gym.Env:
    env = gym.wrappers.TimeLimit(make_atari_env("PongNoFrameskip-v4", render_mode="rgb_array"), steps)
    return env if folder is None else folder.wrap(env)


def test_each_episode_becomes_a_numbered_video_of_its_frames(tmp_path: Path) -> None:
    saved: list[tuple[str, int, float]] = []
    folder = VideoFolder(tmp_path, "ALE/Pong-v5", on_saved=lambda path, n, ret: saved.append((path.name, n, ret)))
    env = short_pong(40, folder)
    twin = short_pong(40)  # the same game unfilmed, for the frames the video should hold
    rewards = []
    for seed in (3, 4):
        env.reset(seed=seed)
        env.action_space.seed(seed)
        twin.reset(seed=seed)
        expected = [twin.render()]
        total, done = 0.0, False
        while not done:
            action = env.action_space.sample()
            _, reward, terminated, truncated, _ = env.step(action)
            twin.step(action)
            expected.append(twin.render())
            total += float(reward)
            done = terminated or truncated
        rewards.append(total)
        frames, fps = read_video(tmp_path / f"ALE-Pong-v5-{len(rewards)}.mp4")
        assert len(frames) == 41 and fps == pytest.approx(15.0)  # the frame after reset, one a step; 60 Hz / 4
        assert frames[0].shape == expected[0].shape == (210, 160, 3)
        # lossy, but frame by frame the same pictures: close to each, and where the game moved between two
        # steps (the ball, the paddles), a frame shows its own step's picture, not the other's
        errors = [np.abs(got.astype(int) - want).mean() for got, want in zip(frames, expected, strict=True)]
        assert max(errors) < 6.0, errors
        moved = np.abs(expected[10].astype(int) - expected[30]).max(axis=-1) > 50
        assert moved.sum() > 20
        own, other = (np.abs(frames[10][moved].astype(int) - expected[i][moved]).mean() for i in (10, 30))
        assert own < other / 3, (own, other)
    assert saved == [("ALE-Pong-v5-1.mp4", 40, rewards[0]), ("ALE-Pong-v5-2.mp4", 40, rewards[1])]

    # An episode cut short (a stop, or the env closed after its last counted episode) leaves nothing.
    env.reset(seed=5)
    env.step(0)
    env.close()
    twin.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["ALE-Pong-v5-1.mp4", "ALE-Pong-v5-2.mp4"]

    # Another watch into the same folder adds its videos after those there.
    again = VideoFolder(tmp_path, "ALE/Pong-v5")
    env = short_pong(3, again)
    env.reset(seed=0)
    for _ in range(3):
        env.step(0)
    env.close()
    assert again.saved == [tmp_path / "ALE-Pong-v5-3.mp4"]


class _Unrenderable(gym.Env):
    """An env whose renderer fails, or that was made without rgb frames."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode: str | None, fails: bool) -> None:
        self.render_mode, self.fails = render_mode, fails

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        return np.zeros(1, np.float32), 1.0, True, False, {}

    def render(self) -> np.ndarray | None:
        if self.fails:
            raise RuntimeError("no display\nsecond line")
        return None


@pytest.mark.parametrize(
    ("render_mode", "fails", "message"),
    [
        ("rgb_array", True, r"^--save-video: _Unrenderable could not render a frame \(no display\)$"),
        (None, False, r"^--save-video: _Unrenderable rendered NoneType, not an RGB image \(render_mode None;"),
    ],
)
def test_an_env_that_renders_no_frame_is_one_line(tmp_path: Path, render_mode, fails, message) -> None:
    env = EpisodeVideo(_Unrenderable(render_mode, fails), VideoFolder(tmp_path, "x"))
    with pytest.raises(OfflineRLError, match=message):
        env.reset()
    assert not list(tmp_path.iterdir())


def test_videos_play_in_real_time() -> None:
    from gymnasium.wrappers import AtariPreprocessing

    from offline_rl.envs.make import make_env

    envs = [
        (make_env("HalfCheetah-v4"), 20.0),  # 5 physics steps of 0.01 s a step: its render_fps says so already
        (make_atari_env("PongNoFrameskip-v4"), 15.0),  # 60 Hz over AtariPreprocessing's 4 frames a step
        (make_atari_env("Pong", protocol="sticky"), 15.0),  # ALE/Pong-v5, made to skip no frame itself
        (AtariPreprocessing(make_env("ALE/Pong-v5"), frame_skip=1, noop_max=0), 15.0),  # Minari's screens
        (make_env("ALE/Pong-v5", frameskip=(2, 5)), 20.0),  # 2, 3 or 4 frames a step: 3 on average
    ]
    for env, fps in envs:
        assert frames_per_second(env) == fps, env
        env.close()


def test_watch_films_the_episodes_it_scores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An Atari game: the videos' returns are the episodes `--watch` scores, the files are there, and a bar
    counted the frames filmed."""
    import offline_rl.runs.video

    monkeypatch.setattr(offline_rl.runs.video, "BAR_DELAY_S", 0.0)
    args = ["--task", "PongNoFrameskip-v4", "--watch", "--test-num", "2", "--eps-test", "1.0"]
    watched = run_in_process("examples/atari_qrdqn.py", *args, "--save-video", "videos", cwd=tmp_path)
    assert watched.returncode == 0, watched.stderr[-2000:]
    lines = VIDEO_LINE.findall(watched.stdout)
    assert [Path(path).name for path, _, _ in lines] == ["PongNoFrameskip-v4-1.mp4", "PongNoFrameskip-v4-2.mp4"]
    mean = float(re.search(r"return (-?[\d.]+) ±", watched.stdout.splitlines()[-1]).group(1))
    assert np.mean([float(ret) for _, ret, _ in lines]) == pytest.approx(mean, abs=0.01)
    assert watched.stdout.splitlines()[-1].endswith("over 2 episodes; 2 videos in videos")
    for path, _, steps in lines:
        frames, _ = read_video(tmp_path / path)
        assert len(frames) == int(steps) + 1
    filmed = sum(int(steps) + 1 for _, _, steps in lines)
    assert re.search(rf"^filming: {filmed} frames \[", watched.stderr, re.MULTILINE), watched.stderr[-2000:]
    assert sorted(path.name for path in (tmp_path / "videos").iterdir()) == [Path(p).name for p, _, _ in lines]


def test_mujoco_renders_off_screen_without_a_display(tmp_path: Path) -> None:
    """`d4rl_cql.py --watch --save-video` in a process of its own with no display and no MUJOCO_GL: MuJoCo's
    default window system would fail there, so the command picks EGL itself."""
    env = script_env()
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM"):
        env.pop(name, None)
    tiny = ["--task", "InvertedPendulum-v4", "--dataset-size", "500", "--hidden-sizes", "8", "--critic-layers", "1"]
    trained = run_in_process(
        "examples/d4rl_cql.py", *tiny, "--epoch", "1", "--step-per-epoch", "2", "--test-num", "1", cwd=tmp_path
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    (policy,) = (tmp_path / "log").rglob("policy_last.pth")
    watch = ["--task", "InvertedPendulum-v4", "--watch", "--resume-path", str(policy), "--test-num", "1"]
    watched = forked.run(
        [sys.executable, str(REPO_ROOT / "examples/d4rl_cql.py"), *watch, "--save-video", "videos"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert watched.returncode == 0, watched.stderr[-2000:]
    ((path, episode_return, steps),) = VIDEO_LINE.findall(watched.stdout)
    assert float(episode_return) == int(steps)  # InvertedPendulum: a reward of 1 a step
    frames, fps = read_video(tmp_path / path)
    assert len(frames) == int(steps) + 1 and frames[0].shape == (480, 480, 3) and fps == pytest.approx(25.0)
    assert len(np.unique(frames[0].reshape(-1, 3), axis=0)) > 10  # a scene, not a blank frame


def run_rendering_program(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`program` run to success in a process of its own (which EGL wants), MuJoCo rendering off screen
    through EGL."""
    done = forked.run(
        [sys.executable, "-c", program, *args],
        capture_output=True,
        text=True,
        env={**script_env(), "MUJOCO_GL": "egl"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


QUALITY_PROGRAM = """
import json, sys
import gymnasium as gym, numpy as np
from pathlib import Path
from offline_rl.envs.mujoco import leave_out_shadows_and_reflections, mujoco_renderer_of, opengl_renderer_name
from offline_rl.envs.make import make_env
from offline_rl.runs.video import VideoFolder
from offline_rl.cli.main import print_library_messages

print_library_messages()  # as a program shows the library's lines

def references():
    env = make_env("HalfCheetah-v4", render_mode="rgb_array"); env.reset(seed=0)
    frames = [env.render()]
    software = "llvmpipe" in opengl_renderer_name()  # while MuJoCo's context is current
    leave_out_shadows_and_reflections(mujoco_renderer_of(env))
    frames.append(env.render()); env.close()
    return frames, software

(with_shadows, without), software = references()
folder = VideoFolder(Path(sys.argv[2]), "cheetah", quality=sys.argv[1])
env = folder.wrap(gym.wrappers.TimeLimit(make_env("HalfCheetah-v4", render_mode="rgb_array"), 2))
env.reset(seed=0)
for _ in range(2):
    env.step(np.zeros(6))
np.save(Path(sys.argv[2]) / "references.npy", np.stack([with_shadows, without]))
print(json.dumps({"software": software, "video": str(folder.saved[0])}))
"""


@pytest.mark.parametrize("quality", ["full", "fast", "auto"])
def test_video_quality_fast_leaves_out_mujocos_shadows_from_the_first_frame_on(tmp_path: Path, quality: str) -> None:
    """--video-quality: `fast` films MuJoCo's frames, the first one included, without shadows and
    reflections; `full` as gymnasium draws them; `auto` fast only where software draws (said once)."""
    import json

    done = run_rendering_program(QUALITY_PROGRAM, quality, str(tmp_path))
    result = json.loads(done.stdout.splitlines()[-1])
    fast = quality == "fast" or (quality == "auto" and result["software"])
    with_shadows, without = np.load(tmp_path / "references.npy").astype(float)
    assert np.abs(with_shadows - without).mean() > 10  # HalfCheetah's floor shows the difference
    frames, _ = read_video(Path(result["video"]))
    first = frames[0].astype(float)
    nearer, farther = (without, with_shadows) if fast else (with_shadows, without)
    assert np.abs(first - nearer).mean() < 4 < np.abs(first - farther).mean()
    said = "filming: MuJoCo's frames are drawn in software" in done.stdout
    assert said == (quality == "auto" and result["software"])
    # Atari screens are not MuJoCo's: nothing to change there
    assert mujoco_renderer_of(short_pong(1)) is None


def test_a_stop_while_a_video_opens_or_closes_leaves_no_hidden_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C or SIGTERM (an exception anywhere) while the encoder opens, or between the video's last
    frame and its rename: the staging file is removed, by the video being opened or by the env's close."""
    import offline_rl.runs.video

    play = load_benchmark("video_recording", monkeypatch).play

    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(offline_rl.runs.video.VideoFile, "add", stop)
        with pytest.raises(KeyboardInterrupt):
            play(short_pong(5, VideoFolder(tmp_path, "opening")), 0)
    assert not list(tmp_path.iterdir())
    env = short_pong(5, VideoFolder(tmp_path, "closing"))
    with monkeypatch.context() as patch:
        patch.setattr(offline_rl.runs.video, "publish", stop)
        with pytest.raises(KeyboardInterrupt):
            play(env, 0)
    assert list(tmp_path.iterdir())  # the staging file, until the env is closed
    env.close()
    assert not list(tmp_path.iterdir())


class CountedRenders(gym.Wrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.renders = 0

    def render(self) -> object:
        self.renders += 1
        return self.env.render()


def test_an_evaluation_films_the_first_episode_to_start_and_renders_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`EvaluationVideos`: the env that resets first after `film(path)` keeps the claim through another reset
    (the trainer resets the envs twice before its first evaluation), its episode becomes `path`, and no
    other episode is filmed, or rendered at all, until the next `film`."""
    play_out = load_benchmark("video_recording", monkeypatch).play  # one seeded episode of random actions
    saved: list[tuple[str, int]] = []
    videos = EvaluationVideos(on_saved=lambda path, steps, _: saved.append((path.name, steps)))
    first, second = CountedRenders(short_pong(30)), CountedRenders(short_pong(20))
    filmed_first, filmed_second = videos.wrap(first), videos.wrap(second)
    videos.film(tmp_path / "evaluation-0.mp4")
    for env in (filmed_first, filmed_second):
        env.reset(seed=1)
    assert (first.renders, second.renders) == (1, 0)
    assert play_out(filmed_second, 2) == 20 and play_out(filmed_first, 1) == 30
    assert saved == [("evaluation-0.mp4", 30)] and second.renders == 0
    assert len(read_video(tmp_path / "evaluation-0.mp4")[0]) == 31
    play_out(filmed_first, 3)  # the evaluation's next episode on the same env: not asked for
    assert len(saved) == 1 and first.renders == 32
    videos.film(None)
    play_out(filmed_second, 4)
    videos.film(tmp_path / "evaluation-2.mp4")
    play_out(filmed_second, 5)
    assert saved[1:] == [("evaluation-2.mp4", 20)] and sorted(p.name for p in tmp_path.iterdir()) == [
        "evaluation-0.mp4",
        "evaluation-2.mp4",
    ]


TINY_RUN = [
    "--task",
    "InvertedPendulum-v4",
    "--dataset-size",
    "500",
    "--hidden-sizes",
    "8",
    "--critic-layers",
    "1",
    "--step-per-epoch",
    "2",
    "--test-num",
    "2",
]


def without_display() -> dict[str, str]:
    """The environment of a program on a server: no display and no rendering backend chosen."""
    env = script_env()
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM"):
        env.pop(name, None)
    return env


def run_d4rl_cql(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cwd.mkdir(exist_ok=True)
    command = [sys.executable, str(REPO_ROOT / "examples/d4rl_cql.py"), *args]
    done = forked.run(command, capture_output=True, text=True, cwd=cwd, env=without_display(), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def tensorboard_previews(run_folder: Path) -> list[tuple[int, bytes]]:
    """(step, GIF) of each filmed evaluation's preview in the run's TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_folder), size_guidance={"images": 0})
    events.Reload()
    if PREVIEW_TAG not in events.Tags()["images"]:
        return []
    return [(image.step, image.encoded_image_string) for image in events.Images(PREVIEW_TAG)]


def gif_frames(gif: bytes) -> tuple[list[np.ndarray], list[int]]:
    """The RGB frames of an animated GIF, as floats, and how long each is shown (ms)."""
    from PIL import Image, ImageSequence

    frames, delays = [], []
    for frame in ImageSequence.Iterator(Image.open(io.BytesIO(gif))):
        frames.append(np.asarray(frame.convert("RGB"), dtype=float))
        delays.append(int(frame.info["duration"]))
    return frames, delays


def write_video(path: Path, frames: list[np.ndarray], fps: float) -> Path:
    video = VideoFile(path, fps, frames[0])
    for frame in frames[1:]:
        video.add(frame)
    return video.finish()


def numbered_frames(count: int, height: int, width: int) -> list[np.ndarray]:
    """Frames of a white square moving right over a coloured gradient: where the square is tells which
    frame a picture is (`square_at`)."""
    background = np.zeros((height, width, 3), np.uint8)
    background[..., 0] = np.linspace(0, 255, width).astype(np.uint8)
    background[..., 1], background[..., 2] = 80, np.linspace(40, 200, height).astype(np.uint8)[:, None]
    frames = []
    for k in range(count):
        frame = background.copy()
        left = k * ((width - 16) // count)
        frame[height // 2 - 8 : height // 2 + 8, left : left + 16] = 255
        frames.append(frame)
    return frames


def square_at(frame: np.ndarray) -> float:
    """Where (the fraction of the width) the white square's middle is."""
    row = np.asarray(frame, dtype=float)[frame.shape[0] // 2].min(axis=1)  # white: every channel bright
    columns = np.flatnonzero(row > 200)
    return float(columns.mean() + 0.5) / frame.shape[1]


@pytest.mark.parametrize(
    ("fps", "count", "size", "kept", "shape"),
    [
        (125.0, 31, (480, 480), list(range(0, 31, 5)), (160, 160)),  # Hopper's rate: every 5th, 25 a second
        (15.0, 20, (210, 160), list(range(20)), (210, 160)),  # an Atari screen: all kept, never widened
        (20.0, 20, (120, 320), list(range(20)), (60, 160)),  # aspect kept
    ],
)
def test_a_preview_plays_in_real_time_at_most_25_frames_a_second(
    tmp_path: Path, fps: float, count: int, size: tuple[int, int], kept: list[int], shape: tuple[int, int]
) -> None:
    source = numbered_frames(count, *size)
    preview = animated_preview(write_video(tmp_path / "v.mp4", source, fps))
    frames, delays = gif_frames(preview.gif)
    assert (preview.frames, preview.height, preview.width) == (len(kept), *shape)
    assert [frame.shape[:2] for frame in frames] == [shape] * len(kept)
    # each frame is the source frame it stands for, its colours about the same
    assert [square_at(frame) for frame in frames] == pytest.approx([square_at(source[k]) for k in kept], abs=0.02)
    assert np.abs(frames[0].mean(axis=(0, 1)) - source[0].mean(axis=(0, 1))).max() < 6
    # shown for as long as the frames it stands for, in hundredths, without the rounding adding up
    ends = np.cumsum(delays)
    for position, end in enumerate(ends[:-1]):
        assert abs(end - 1000 * kept[position + 1] / fps) <= 5
    assert abs(ends[-1] - 1000 * count / fps) <= 5 or delays[-1] == 20
    assert preview.seconds == pytest.approx(count / fps)


def test_a_preview_shows_the_first_minute_of_a_long_episode(tmp_path: Path) -> None:
    source = numbered_frames(40, 48, 720)
    preview = animated_preview(write_video(tmp_path / "v.mp4", source, 10.0), max_seconds=2.5)
    frames, delays = gif_frames(preview.gif)
    assert len(frames) == 26 and preview.seconds == pytest.approx(2.6)  # frames 0 to 25: 2.5 s after the first
    assert sum(delays) == 2600 and square_at(frames[-1]) == pytest.approx(square_at(source[25]), abs=0.02)


def test_a_file_that_is_no_video_has_no_preview_and_the_run_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`animated_preview` of a file OpenCV cannot read is one line naming it; a training run's filmed
    evaluation then says so and goes on (its video is kept), and logs a readable one at its step."""
    from types import SimpleNamespace

    from offline_rl.runs.config import RunConfig
    from offline_rl.runs.evaluation import EvaluationReporter
    from offline_rl.runs.training import film_evaluations

    broken = tmp_path / "evaluation-2.mp4"
    broken.write_bytes(b"not a video")
    with pytest.raises(OfflineRLError, match=f"{re.escape(str(broken))}: OpenCV cannot read this video back"):
        animated_preview(broken)

    logged: list[tuple[str, int, int]] = []
    reporter = EvaluationReporter(updates_done=lambda: 40)
    folder = SimpleNamespace(
        settings=RunConfig(video_interval=2, epoch=3),
        reporter=reporter,
        log_path=tmp_path,
        add_video=lambda tag, preview, step: logged.append((tag, preview.width, step)),
    )
    videos, collector = EvaluationVideos(), SimpleNamespace()
    film_evaluations(collector, videos, folder)  # type: ignore[arg-type]
    videos.on_saved(broken, 3, 1.0)
    assert (
        capsys.readouterr().out.strip()
        == f"no preview of it in TensorBoard: {broken}: OpenCV cannot read this video back for its preview"
    )
    videos.on_saved(write_video(tmp_path / "good.mp4", numbered_frames(4, 48, 64), 25.0), 3, 1.0)
    assert logged == [(PREVIEW_TAG, 64, 40)]


def evaluation_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("evaluation ")]


def test_a_training_run_films_its_chosen_evaluations_and_scores_them_as_unfilmed(tmp_path: Path) -> None:
    """`d4rl_cql.py --video-interval 2`, MuJoCo with no display: the evaluation before training, every second
    one and the last are filmed into the run folder, each video the first env's episode; the scores are those
    of the same run unfilmed; resumed, the run films on, and leaves the video of the weights it resumes."""
    filmed = run_d4rl_cql(*TINY_RUN, "--epoch", "3", "--video-interval", "2", cwd=tmp_path / "filmed")
    (run,) = (tmp_path / "filmed" / "log").rglob("checkpoint.pth")
    lines = VIDEO_LINE.findall(filmed.stdout)
    videos = run.parent / "videos"
    assert [path for path, _, _ in lines] == [
        str(videos.relative_to(tmp_path / "filmed") / f"evaluation-{k}.mp4") for k in (0, 2, 3)
    ]
    for path, episode_return, steps in lines:
        assert float(episode_return) == int(steps)  # InvertedPendulum: a reward of 1 a step
        frames, fps = read_video(tmp_path / "filmed" / path)
        assert len(frames) == int(steps) + 1 and frames[0].shape == (480, 480, 3) and fps == pytest.approx(25.0)
    assert f"; 3 videos in {videos.relative_to(tmp_path / 'filmed')}; last evaluation" in filmed.stdout
    assert sorted(path.name for path in videos.iterdir()) == [
        "evaluation-0.mp4",
        "evaluation-2.mp4",
        "evaluation-3.mp4",
    ]
    # each video's preview is in TensorBoard at its evaluation's step (2 updates an epoch): the whole
    # episode, shrunk to 160 pixels, in real time (InvertedPendulum's 25 frames a second)
    previews = tensorboard_previews(run.parent)
    assert [step for step, _ in previews] == [0, 4, 6]
    for (_, gif), (path, _, steps) in zip(previews, lines, strict=True):
        frames, delays = gif_frames(gif)
        # (a frame that repeats the one before is merged into it, its time added)
        assert 1 < len(frames) <= int(steps) + 1 and frames[0].shape == (160, 160, 3)
        assert sum(delays) == pytest.approx(1000 * (int(steps) + 1) / 25, abs=10)
        shrunk = read_video(tmp_path / "filmed" / path)[0][-1][1::3, 1::3].astype(float)
        assert np.abs(frames[-1] - shrunk).mean() < 12  # the same picture, its palette and shrinking aside

    unfilmed = run_in_process("examples/d4rl_cql.py", *TINY_RUN, "--epoch", "3", cwd=tmp_path)
    assert unfilmed.returncode == 0, unfilmed.stderr[-2000:]
    assert (
        evaluation_lines(filmed.stdout) == evaluation_lines(unfilmed.stdout)
        and len(evaluation_lines(filmed.stdout)) == 4
    )

    before = (videos / "evaluation-3.mp4").stat()
    resumed = run_d4rl_cql("--resume-path", str(run), "--epoch", "4", cwd=tmp_path / "filmed")
    assert [Path(path).name for path, _, _ in VIDEO_LINE.findall(resumed.stdout)] == ["evaluation-4.mp4"]
    after = (videos / "evaluation-3.mp4").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [step for step, _ in tensorboard_previews(run.parent)] == [0, 4, 6, 8]  # none logged twice
    # --watch reads the run's settings but not its training's: filming evaluations is neither refused there
    # nor reported as a setting the watch overrides
    watched = run_in_process("examples/d4rl_cql.py", "--watch", "--resume-path", str(run), cwd=tmp_path)
    assert watched.returncode == 0 and not VIDEO_LINE.findall(watched.stdout), watched.stderr[-2000:]
    assert "reading the run in" in watched.stdout and "--video-interval" not in watched.stdout


@pytest.mark.parametrize(
    ("program", "args", "message"),
    [
        ("examples/d4rl_cql.py", ["--save-video", "v"], "--save-video records the episodes --watch plays: add --watch"),
        ("examples/d4rl_cql.py", ["--watch", "--video-interval", "1"], "--video-interval films a training run's"),
        (
            "examples/atari_qrdqn.py",
            ["--video-interval", "1", "--render", "0.01"],
            r"give --render \(a window\) or --video-interval, not both",
        ),
        (
            "examples/atari_qrdqn.py",
            ["--watch", "--save-video", "v", "--render", "0.01"],
            r"give --render \(a window\) or --save-video \(files\), not both",
        ),
        (
            "examples/atari_qrdqn.py",
            ["--watch", "--save-buffer-name", "b.hdf5", "--save-video", "v"],
            "--save-video records --watch's evaluation episodes, not a collection",
        ),
    ],
)
def test_save_video_outside_watch_is_refused(tmp_path: Path, program, args, message) -> None:
    refused = run_in_process(program, *args, cwd=tmp_path)
    assert refused.returncode == 2 and re.search(message, refused.stderr), refused.stderr[-2000:]
    assert not list(tmp_path.iterdir())


def test_a_video_folder_that_is_a_file_is_refused_before_playing(tmp_path: Path) -> None:
    (tmp_path / "videos").write_text("not a folder")
    args = ["--task", "PongNoFrameskip-v4", "--watch", "--test-num", "1", "--save-video", "videos"]
    refused = run_in_process("examples/atari_qrdqn.py", *args, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1] == "error: --save-video videos: is a file; expected a folder"


def test_each_way_of_showing_episodes_asks_the_env_for_its_render_mode(tmp_path: Path) -> None:
    """A window (`--render`), videos (`--save-video`, `--video-interval`) or neither: the env is made for it,
    and shown envs step in this process; those shown in a window or filmed by `--watch` play whole episodes,
    those of a filmed training run the evaluation's budget of steps, as unfilmed."""
    from test_exact_resume import cartpole_policy
    from tianshou.env import DummyVectorEnv

    from offline_rl.runs.config import RunConfig
    from offline_rl.runs.training import showing_collector

    asked: list[dict[str, str]] = []

    def make(**kwargs: str) -> gym.Env:
        asked.append(kwargs)  # a window cannot open here: CartPole, unshown, stands in for it
        return short_pong(5) if kwargs.get("render_mode") == "rgb_array" else gym.make("CartPole-v1")

    budget = {"test_num": 2, "test_steps": 1000}
    for run, mode, videos_kind, budget_kept in [
        (RunConfig(**budget), None, None, True),
        (RunConfig(**budget, render=0.01), "human", None, False),
        (RunConfig(**budget, watch=True, save_video=str(tmp_path)), "rgb_array", VideoFolder, False),
        (RunConfig(**budget, video_interval=5), "rgb_array", EvaluationVideos, True),
    ]:
        asked.clear()
        collector, videos = showing_collector(cartpole_policy(0.0), make, run, task="t")
        assert [kwargs.get("render_mode") for kwargs in asked] == [mode, mode]
        assert type(videos) is videos_kind if videos_kind else videos is None
        if mode is not None:
            assert isinstance(collector.env, DummyVectorEnv)
        assert collector.min_steps == (1000 if budget_kept else 0)
        collector.close()


def test_a_mujoco_gl_that_cannot_load_is_one_line(tmp_path: Path) -> None:
    """MuJoCo loads `MUJOCO_GL`'s backend at import: a value it does not know (or `osmesa` without OSMesa)
    used to end any MuJoCo command in a traceback from deep inside PyOpenGL."""
    failed = forked.run(
        [sys.executable, "-m", "offline_rl.collect", "--task", "HalfCheetah-v4", "--output", "data.hdf5"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**script_env(), "MUJOCO_GL": "bogus"},
        timeout=300,
    )
    assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr[-2000:]
    assert failed.stderr.strip().splitlines()[-1] == (
        "error: MUJOCO_GL=bogus: MuJoCo could not load that OpenGL backend (invalid value for environment "
        "variable MUJOCO_GL: bogus); unset it, or set MUJOCO_GL=egl (libEGL: Debian's libegl1) or "
        "MUJOCO_GL=osmesa (libosmesa6, slower) where that library is installed"
    )
    assert not list(tmp_path.iterdir())


def test_render_without_a_display_points_to_save_video(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window cannot open on a server: before, MuJoCo's GLFW ended the process in a failed C assertion."""
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    args = ["--task", "PongNoFrameskip-v4", "--watch", "--test-num", "1", "--render", "0.01"]
    refused = run_in_process("examples/atari_qrdqn.py", *args, cwd=tmp_path)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines()[-1] == (
        "error: --render opens a window, but this machine has no display (DISPLAY and WAYLAND_DISPLAY are unset); "
        "--save-video DIR films the episodes into files instead"
    )


def test_a_frame_of_odd_size_is_padded_to_the_even_size_mpeg4_encodes(tmp_path: Path) -> None:
    from offline_rl.runs.video import VideoFile

    rng = np.random.default_rng(0)
    frames = [np.repeat(rng.integers(0, 256, (1, 1, 3), dtype=np.uint8), 33 * 21, 0).reshape(21, 33, 3)]
    frames += [np.full((21, 33, 3), value, np.uint8) for value in (40, 200)]
    video = VideoFile(tmp_path / "odd.mp4", 10.0, frames[0])
    for frame in frames[1:]:
        video.add(frame)
    assert video.finish() == tmp_path / "odd.mp4"
    read, fps = read_video(tmp_path / "odd.mp4")
    assert [frame.shape for frame in read] == [(22, 34, 3)] * 3 and fps == pytest.approx(10.0)
    for got, want in zip(read, frames, strict=True):  # the padding repeats the edge: the picture is unchanged
        assert np.abs(got.astype(int) - want[0, 0]).mean() < 8
    assert [path.name for path in tmp_path.iterdir()] == ["odd.mp4"]


def test_the_filming_benchmark_runs_each_row(tmp_path: Path) -> None:
    """`benchmarks/video_recording.py` on a short Pong episode: every row measured, or gymnasium's skipped
    where moviepy (not a dependency) is missing."""
    args = ["--task", "PongNoFrameskip-v4", "--steps", "20"]
    done = run_repo_script("benchmarks/video_recording.py", *args, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = done.stdout.strip().splitlines()[1:]
    measured = r" +[\d.]+ s \( *[\d.]+ ms/frame\), resident memory \+ *\d+ MB, (\d) file\(s\) of [\d.]+ MB$"
    assert re.fullmatch(r"render only \(no file\)" + measured, rows[0])[1] == "0"
    assert re.fullmatch(r"offline_rl EpisodeVideo" + measured, rows[1])[1] == "1"
    gymnasium_row = re.fullmatch(r"gymnasium RecordVideo" + measured, rows[2])
    assert (gymnasium_row is not None and gymnasium_row[1] == "1") or "moviepy" in rows[2].lower(), rows[2]


ENV_SETS_PROGRAM = """
import offline_rl  # first, as the examples: TensorBoard's TensorFlow beside Mesa's LLVM crashes the process
import json, sys
from pathlib import Path
from types import SimpleNamespace
import torch
from offline_rl.runs import training
from offline_rl.runs.config import RunConfig
from offline_rl.algorithms.cql_sac import CQLSAC, CQLSACConfig
from offline_rl.envs.make import make_env

training.SUBPROCESS_ENVS_MIN_CORES = 1  # as on a machine of 4 cores or more
make_test_env = lambda **kwargs: make_env("InvertedPendulum-v4", **kwargs)
probe = make_test_env()
torch.manual_seed(3)  # random weights: the pole falls within a few dozen steps
config = CQLSACConfig(actor_hidden_sizes=[16, 16], critic_layers=1)
policy = CQLSAC.build(probe.observation_space, probe.action_space, config).policy.eval()
run = RunConfig(test_num=3, video_interval=2, epoch=9)
reporter = SimpleNamespace(next_index=0, next_is_initial=False, step_of=lambda index: index)
folder = SimpleNamespace(
    settings=run, reporter=reporter, log_path=Path(sys.argv[1]), add_video=lambda tag, preview, step: None
)
filmed, videos = training.showing_collector(policy, make_test_env, run, task="InvertedPendulum-v4")
training.film_evaluations(filmed, videos, folder)
unfilmed, _ = training.showing_collector(policy, make_test_env, RunConfig(test_num=3), task="InvertedPendulum-v4")
played = {"filmed": [], "unfilmed": []}
for index in range(3):
    reporter.next_index = index
    for name, collector in (("filmed", filmed), ("unfilmed", unfilmed)):
        collector.reset()
        stats = collector.collect(n_episode=3)
        played[name].append([type(collector.env).__name__, [float(r) for r in stats.returns]])
own, filming = filmed.own_envs, filmed.filming_envs
for collector in (filmed, unfilmed):
    collector.close()
played["closed"] = [own.is_closed, filming.is_closed]
print(json.dumps(played))
"""


def test_a_filmed_run_plays_its_other_evaluations_on_the_envs_an_unfilmed_run_plays_on(tmp_path: Path) -> None:
    """Where the evaluation envs step in processes of their own (4 cores or more), `--video-interval` films
    its chosen evaluations on envs in this process and plays the others on the subprocesses an unfilmed
    run plays on, each scored as the unfilmed run scores it; both sets close with the collector."""
    import json

    played = json.loads(run_rendering_program(ENV_SETS_PROGRAM, str(tmp_path)).stdout.splitlines()[-1])
    envs = [kind for kind, _ in played["filmed"]]
    assert envs == ["DummyVectorEnv", "SubprocVectorEnv", "DummyVectorEnv"]  # evaluations 0 and 2 filmed
    assert [kind for kind, _ in played["unfilmed"]] == ["SubprocVectorEnv"] * 3
    assert [returns for _, returns in played["filmed"]] == [returns for _, returns in played["unfilmed"]]
    assert len({tuple(returns) for _, returns in played["filmed"]}) == 1  # reseeded alike: the same episodes
    assert sorted(path.name for path in (tmp_path / "videos").iterdir()) == ["evaluation-0.mp4", "evaluation-2.mp4"]
    assert played["closed"] == [True, True]


def test_a_video_cut_short_by_a_file_size_limit_is_one_line_and_left_nowhere(tmp_path: Path) -> None:
    """OpenCV reports no failed write: a full disk (here a file size limit, which Python turns into a
    refused write) left a video without its index under its final name."""
    import resource

    from offline_rl.core.errors import OfflineRLError
    from offline_rl.runs.video import VideoFile

    noise = np.random.default_rng(0).integers(0, 256, size=(40, 240, 240, 3), dtype=np.uint8)  # incompressible
    whole = VideoFile(tmp_path / "whole.mp4", 25.0, noise[0])
    for frame in noise[1:]:
        whole.add(frame)
    assert whole.finish() == tmp_path / "whole.mp4"
    size = (tmp_path / "whole.mp4").stat().st_size

    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, limits[1]))
    try:
        cut = VideoFile(tmp_path / "cut.mp4", 25.0, noise[0])
        for frame in noise[1:]:
            cut.add(frame)
        with pytest.raises(OfflineRLError, match=r"cut\.mp4: not written whole \(the encoder's writes were refused"):
            cut.finish()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["whole.mp4"]
