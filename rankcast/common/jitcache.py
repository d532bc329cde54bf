"""Where numba keeps rankcast's compiled kernels: one directory per version of the source.

Numba invalidates a cached kernel only when the file that defines it changes, not when a
function it inlines from another module does (``score`` and ``below`` from ``scoring``, the
chunk layout of ``window``), and pip leaves ``__pycache__`` behind across upgrades. A stale
kernel gives wrong results silently, so the cache directory is keyed by a hash of every
source file of the package: any change to the code starts from a clean cache. A user's own
``NUMBA_CACHE_DIR`` wins. Imported first by ``rankcast/__init__``, before numba is.
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path


def _source_key(root: Path) -> str:
    h = hashlib.blake2b(digest_size=8)
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def configure() -> str | None:
    """Point numba at this source version's cache directory; returns it (None: numba's own
    choice, when the user set one or the directory cannot be written)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rankcast" / "numba"
    path = base / _source_key(Path(__file__).resolve().parents[1])     # the whole package
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK):
            return None
    except OSError:
        return None                                 # numba's default places, as before
    os.environ["NUMBA_CACHE_DIR"] = str(path)      # inherited by Ray workers started from here
    if "numba" in sys.modules:                      # imported before rankcast: tell it directly
        sys.modules["numba"].config.CACHE_DIR = str(path)
    return str(path)

