"""The documentation site builds warning-free, its settings reference holds every flag of every program
as its `setting()` declares it, and the README stays a short front page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT


def test_the_site_builds_strictly_with_every_setting_in_its_reference(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "docs/mkdocs.yml", "-d", str(site)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    reference = (site / "reference" / "settings" / "index.html").read_text(encoding="utf-8")
    from offline_rl.cli.d4rl_cql import D4RLCQLConfig
    from offline_rl.core.settings import flag_of, leaf_fields

    for _, field, _ in leaf_fields(D4RLCQLConfig()):
        assert f"<code>{flag_of(field)}</code>" in reference, flag_of(field)
    assert "CORL's reward normalisation" in reference and "return_reward_range" in reference  # help and details
    algorithm = (site / "algorithms" / "cql-sac" / "index.html").read_text(encoding="utf-8")
    assert "conservative_gap" in algorithm and "UPDATES_PER_EPOCH" in algorithm  # its docstring and its example


def test_the_readme_is_a_short_front_page() -> None:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert not re.search(r"\b\d+ passed\b", text)  # no test counts
    for link in re.findall(r"\]\(((?:docs|examples)/[^)#]+)\)", text):
        assert (REPO_ROOT / link).exists(), link
