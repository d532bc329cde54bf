"""numba's cache directory follows the source: a changed file anywhere in the package means
compiled kernels from before are never loaded (they could inline stale code)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import rankcast
from rankcast.common.jitcache import _source_key


def test_key_follows_every_file(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 1\n")
    k1 = _source_key(tmp_path)
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    k2 = _source_key(tmp_path)
    assert k2 != k1
    (tmp_path / "sub" / "b.py").write_text("y = 1\n")
    assert _source_key(tmp_path) == k1      # content, not time stamps


def _cache_dir(env: dict) -> str:
    code = "import rankcast, numba; print(numba.config.CACHE_DIR)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_numba_gets_the_versioned_directory_unless_the_user_chose(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    key = _source_key(Path(rankcast.__file__).resolve().parent)
    assert _cache_dir(env) == str(tmp_path / "rankcast" / "numba" / key)
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")
    assert _cache_dir(env) == str(tmp_path / "mine")
