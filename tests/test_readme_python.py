"""README's "Sweep from Python" snippet, run as written: a local Ray, the oracle agent on
one sample task twice, the dataset read back."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"

pytestmark = pytest.mark.integration


def snippet() -> str:
    section = README.read_text().split("## Sweep from Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_sweep_from_python_snippet_runs_as_written(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", snippet()], cwd=tmp_path, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 of 2 ok" in done.stdout and "2 rows" in done.stdout, done.stdout
