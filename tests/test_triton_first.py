"""Triton before TensorFlow: `import offline_rl` loads Triton first where both are installed, warns where
TensorFlow came first, and costs nothing where TensorFlow is absent (offline_rl.core.import_order says why).

Each case runs in its own interpreter, with stand-in `triton` and `tensorflow` packages that record what
was loaded before them, so the order is checked on any machine; the last test runs the real pair where
a CUDA build of torch (which ships Triton) and the `rlu` extra (TensorFlow) are both installed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT


def stand_ins(root: Path) -> Path:
    """Packages `triton` and `tensorflow` that note, as they load, whether the other one was loaded."""
    for name, other in (("triton", "tensorflow"), ("tensorflow", "triton")):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(f"import sys\nLOADED_AFTER_OTHER = {other!r} in sys.modules\n")
    return root


def run(prelude: str, fakes: Path) -> dict:
    """Run `prelude`, then `import offline_rl`, in a fresh interpreter; what it loaded, and its warnings."""
    script = f"""
import json, sys, warnings
sys.path.insert(0, {str(fakes)!r})
{prelude}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import offline_rl
loaded = {{name: sys.modules.get(name) is not None for name in ("triton", "tensorflow")}}
print(json.dumps({{"loaded": loaded, "warnings": [str(w.message) for w in caught if w.category is RuntimeWarning]}}))
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_triton_loads_with_offline_rl_where_tensorflow_is_installed(tmp_path: Path) -> None:
    report = run("", stand_ins(tmp_path))
    assert report == {"loaded": {"triton": True, "tensorflow": False}, "warnings": []}


def test_tensorflow_imported_after_offline_rl_finds_triton_loaded(tmp_path: Path) -> None:
    fakes = stand_ins(tmp_path)
    script = f"import sys; sys.path.insert(0, {str(fakes)!r}); import offline_rl, tensorflow, triton; "
    script += "print(tensorflow.LOADED_AFTER_OTHER, triton.LOADED_AFTER_OTHER)"
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["True", "False"]


def test_tensorflow_loaded_first_gets_a_warning_and_triton_stays_unloaded(tmp_path: Path) -> None:
    report = run("import tensorflow", stand_ins(tmp_path))
    assert report["loaded"] == {"triton": False, "tensorflow": True}  # loading it now would be the crash
    (warning,) = report["warnings"]
    assert "import offline_rl before tianshou and tensorflow" in warning and "\n" not in warning


def test_without_tensorflow_triton_is_left_to_torch(tmp_path: Path) -> None:
    # None in sys.modules: `import tensorflow` raises ImportError, as where it is not installed
    report = run("sys.modules['tensorflow'] = None", stand_ins(tmp_path))
    assert report == {"loaded": {"triton": False, "tensorflow": False}, "warnings": []}


@pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("tensorflow") is None,
    reason="the real pair: a CUDA build of torch (it ships Triton) and the rlu extra (TensorFlow)",
)
def test_an_optimizer_after_tensorflow_does_not_crash_the_process() -> None:
    # torch imports Triton at the first optimizer; after TensorFlow that was a segmentation fault
    script = (
        "import offline_rl, tensorflow, torch; torch.optim.Adam([torch.zeros(1, requires_grad=True)]); "
        "import sys; print(sys.modules['triton'] is not None)"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "True"
