"""What ``ptm`` prints is its own: the loggers of other packages that chatter at import or under
--verbose are capped by name (``cli.THIRD_PARTY_LEVELS``), and no log line runs past 200
characters."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import TINY, write_corpus

from ptmkit.cli import main


def test_export_prints_no_other_packages_warnings(tmp_path):
    text = write_corpus(tmp_path / "t.txt", docs=20)
    assert main(["pretrain", "bert-tiny", "--data", str(text), "-o", str(tmp_path / "run"), *TINY, "--quiet"]) == 0
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    for argv in (["export", str(tmp_path / "run"), "-o", str(tmp_path / "hf")],
                 ["--verbose", "info", str(tmp_path / "run")]):
        done = subprocess.run([sys.executable, "-m", "ptmkit.cli", *argv], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr[-500:]
        lines = done.stderr.splitlines()
        noise = [line for line in lines if any(k in line for k in ("torchao", "_pytree", "matplotlib", "PIL", "absl"))]
        assert not noise, (argv, noise[:3])
        assert all(len(line) <= 200 for line in lines), [line for line in lines if len(line) > 200][:2]
