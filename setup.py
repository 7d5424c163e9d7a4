"""Package definition for offline_rl.

torch is declared without a version pin on purpose: install `torch==2.13.0` (a CPU build on local
disk here) before this package so pip never resolves a multi-GB CUDA build on its own.
"""

from pathlib import Path

from setuptools import find_packages, setup

README = Path(__file__).with_name("README.md")

setup(
    name="offline_rl",
    version="0.1.0",
    description="Offline reinforcement learning (CQL-SAC, discrete CQL) for Tianshou 2.x",
    long_description=README.read_text(encoding="utf-8") if README.exists() else "",
    long_description_content_type="text/markdown",
    # The examples are the programs themselves: installed as `offline_rl.examples`, so that the console
    # scripts and a sweep's trials run exactly the files a reader reads.
    packages=[*find_packages(include=["offline_rl", "offline_rl.*"]), "offline_rl.examples"],
    package_dir={"offline_rl.examples": "examples"},
    python_requires=">=3.11",
    install_requires=[
        "tianshou>=2.0.1,<3",
        "torch>=2.5",  # 2.2 to 2.4: torch.export cannot export the policies (--export-policy .pt2)
        "numpy>=1.26",
        "gymnasium[mujoco]>=1.1",  # gymnasium.vector.AutoresetMode (collection) came in 1.1
        "mujoco>=3.2",  # 3.1 normalises qpos quaternions at reset: AntMaze starts not as D4RL's
        "ale-py>=0.9",
        "opencv-python-headless>=4.10.0.84",  # AtariPreprocessing resizes with cv2; the first built for numpy 2
        "h5py>=3.11",  # 3.9 crashes closing a file on a full disk; 3.10 is not built for numpy 2
        "google-crc32c>=1.5",  # TFRecord checksums for the RL Unplugged reader (hardware CRC-32C)
        "minari[hf]>=0.5.2",  # hf (from 0.5.2): Minari downloads datasets through huggingface_hub
        "tensorboard>=2.18",  # before, its TensorFlow stub needs np.string_, gone in numpy 2
        "tqdm>=4.60",
        "pillow>=9.3",  # --video-interval's GIF previews; 9.3: the first for Python 3.11
    ],
    entry_points={
        "console_scripts": [
            "offline-rl-d4rl-cql = offline_rl.cli.console:d4rl_cql",
            "offline-rl-d4rl-td3-bc = offline_rl.cli.console:d4rl_td3_bc",
            "offline-rl-d4rl-bc = offline_rl.cli.console:d4rl_bc",
            "offline-rl-d4rl-rebrac = offline_rl.cli.console:d4rl_rebrac",
            "offline-rl-d4rl-iql = offline_rl.cli.console:d4rl_iql",
            "offline-rl-atari-cql = offline_rl.cli.console:atari_cql",
            "offline-rl-atari-qrdqn = offline_rl.cli.console:atari_qrdqn",
            "offline-rl-mujoco-sac = offline_rl.cli.console:mujoco_sac",
            "offline-rl-collect = offline_rl.cli.console:collect",
            "offline-rl-describe = offline_rl.cli.console:describe",
            "offline-rl-convert-d4rl = offline_rl.cli.console:convert_d4rl",
            "offline-rl-convert-minari = offline_rl.cli.console:convert_minari",
            "offline-rl-convert-rl-unplugged = offline_rl.cli.console:convert_rl_unplugged",
            "offline-rl-convert-dqn-replay = offline_rl.cli.console:convert_dqn_replay",
            "offline-rl-sweep = offline_rl.cli.console:sweep",
            "offline-rl-results = offline_rl.cli.console:results",
        ]
    },
    extras_require={
        # TensorFlow writes the RL Unplugged test shards and runs the benchmark's baseline; the converter
        # itself reads shards without it.
        "rlu": ["tensorflow>=2.18"],  # 2.15 to 2.17 pin TensorBoards older than the 2.18 numpy 2 needs
        # Results tables (rliable's IQM and bootstrap intervals) and plots, for sweeps and `offline_rl.results`.
        "results": ["rliable>=1.2", "matplotlib>=3.8"],
        # Sweeps and RL Unplugged conversion on a Ray cluster (`--ray-address`); the local engine never imports it.
        "ray": ["ray>=2.10"],  # 2.9 imports pkg_resources, which setuptools 81 and later lack
        # Gymnasium-Robotics' envs (AntMaze, PointMaze, Adroit, Franka Kitchen): the evaluation envs of
        # Minari's D4RL datasets; registered on first use by offline_rl.envs.make.make_env.
        "robotics": ["gymnasium-robotics>=1.4.2"],  # 1.4.0, 1.4.1: Adroit XML that MuJoCo 4 rejects
        # `--logger wandb`: the curves in Weights & Biases as well as in TensorBoard.
        "wandb": ["wandb>=0.19"],  # tested with 0.31.0 and 0.19.11
        # `--export-policy policy.onnx`: torch's ONNX exporter needs onnx and onnxscript; onnxruntime reads
        # the file back to check it acts as the policy does (onnxscript 0.5.7 lacks torch 2.11+'s API).
        "onnx": ["onnx>=1.17", "onnxscript>=0.6", "onnxruntime>=1.19"],
        # The documentation site (docs/mkdocs.yml): `mkdocs build -f docs/mkdocs.yml`; a test builds it.
        "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5"],
        "test": ["pytest>=8", "pytest-xdist>=3.5", "ruff>=0.5"],
    },
)
