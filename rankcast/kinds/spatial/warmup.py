"""Warm-up of the spatial kind's roles: a few calls through a throw-away engine load, in the
calling process, every kernel a subscription partition or a window shard runs (from numba's
cache), so that none is loaded inside a stream."""
from __future__ import annotations

import numpy as np

from rankcast.config import EngineConfig
from . import skyband as sk

__all__ = ["warm_spatial", "warm_walk", "warm_compact", "warm_cut"]


def warm_spatial(cfg: EngineConfig) -> None:
    """A few calls of random subscriptions and messages through a throw-away Engine of
    ``cfg``: the kernels a subscription partition or a window shard runs (subscription
    index, buffers, window index, re-evaluation, updates as lists and as diffs) are then
    loaded in this process."""
    from .engine import Engine
    from .testing import random_calls

    eng = Engine(cfg)
    for i, call in enumerate(random_calls(0, 25, bounds=cfg.bounds, time_window=cfg.time_window, invalid=False)):
        if call.op == "publish":        # whole lists and diffs (a cluster's roles report either)
            eng.publish(call.arg, updates="diff" if i % 2 else "objects")
        else:
            getattr(eng, call.op)(call.arg)
    eng.core.merge_pending(eng.core.subs.live_slots())      # (an expiry without messages)
    warm_walk(cfg)
    warm_compact()
    warm_cut(eng)


def warm_compact() -> None:
    """One compaction of a tiny buffer pool (``skyband.compact``, the arrays' types as
    ``SkypeCore._maybe_compact`` passes them): the random calls never grow a pool past
    ``SkypeCore.COMPACT_FROM``, so a partition otherwise loads this kernel at its first
    compaction, inside a stream (20-30 ms of CPU from numba's cache, seen in py-spy profiles
    of both partitions of a 2-partition stream; a compile of seconds on a cold cache)."""
    b = sk.BufferState(slots=4, pool=16)
    sk.compact(np.flatnonzero(np.ones(4, np.bool_)), b.bstart, b.blen, b.bcap, b.bi, b.bf)


def warm_cut(eng) -> None:
    """A partition's snapshot of its buffers cut at their k-th scores and its restore from
    one (``skyband.cut_rows``, ``install_rows``), on the throw-away engine ``eng``'s core:
    otherwise a partition loads them at its first checkpoint, and a standby inside a
    recovery (a compile of seconds on a cold cache)."""
    core = eng.core
    live = core.subs.live_slots()
    cut = core.cut_state(live)
    batch = core.subs.batch(live)
    core.remove(batch.ids)
    core.install_cut(core.add(batch), cut)


WARM_TERMS = 16     # terms of each message of warm_walk's window


def warm_walk(cfg: EngineConfig) -> None:
    """A question of one subscription to a window holding more than FLAT_BATCH terms, which
    one kernel call answers (``window._walk``: a partition's few re-evaluations per step in
    a full window) and which random calls on small windows never reach: otherwise its
    kernel is loaded inside the stream, at the first such step (20-30 ms of CPU). A count
    window too small to hold that many terms never asks it either."""
    from .engine import Engine
    from .window import FLAT_BATCH
    from rankcast.model import Message, Subscription

    n = FLAT_BATCH // WARM_TERMS + 2
    if cfg.window is not None and cfg.window < n:
        return
    eng = Engine(cfg)
    x, y = (cfg.bounds[0] + cfg.bounds[2]) / 2, (cfg.bounds[1] + cfg.bounds[3]) / 2
    terms = {f"warm{j}": 1.0 for j in range(WARM_TERMS)}
    eng.publish([Message(i, x, y, terms=terms, t=i * 1e-9) for i in range(n)], updates="none")
    eng.subscribe([Subscription(0, x, y, terms={"warm0": 1.0}, k=5)])
