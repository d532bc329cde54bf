"""Fault injection for the tests on Ray: a planned SIGKILL of one role's process, checked to
have happened, and the recoveries that followed it, counted.

A kill is only as good as its evidence: :class:`Kill` records the moment it sent the signal
and fails the test when the process was already gone (a missed kill is not a kill), and
:func:`assert_one_recovery` then makes every role answer (``Cluster.warm``: a death that no
call has met yet is met there) and requires exactly one recovery since the kill: each kill
is checked before the next one is planned, so no recovery can cover two deaths.
"""
from __future__ import annotations

import os
import random
import signal
import threading
import time

__all__ = ["Kill", "assert_one_recovery", "recoveries_since"]


class Kill(threading.Thread):
    """SIGKILL of one process of ``role`` (the one at ``index``, or one drawn with ``seed``),
    ``delay`` seconds after :meth:`start` (0: at once; in a thread, so that it lands at a
    moment of the calls the test makes meanwhile). ``at``: when the signal was sent;
    ``missed``: the error when the process was gone already."""

    def __init__(self, cl, role: str, *, delay: float = 0.0, index: int | None = None, seed=None):
        super().__init__(daemon=True)
        pids = cl.pids()[role]
        assert pids, f"no {role} process to kill"
        self.role = role
        self.pid = pids[index] if index is not None else random.Random(seed).choice(pids)
        self.delay = delay
        self.at: float | None = None
        self.missed: BaseException | None = None

    def run(self):
        if self.delay:
            time.sleep(self.delay)          # the moment of the kill, not a wait for a result
        self.at = time.time()
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError as e:
            self.missed = e

    def now(self) -> "Kill":
        """The kill, in this thread."""
        self.run()
        return self.happened()

    def happened(self) -> "Kill":
        """Wait for the kill, and fail unless the signal reached a living process."""
        if self.ident is not None:           # started as a thread
            self.join(60)
        assert self.at is not None, f"the planned kill of {self.role} (pid {self.pid}) never ran"
        assert self.missed is None, f"the planned kill of {self.role} (pid {self.pid}) found no process"
        return self


def recoveries_since(cl, t: float) -> list[dict]:
    """The cluster's recovery records that ended after time ``t`` (a restarted coordinator
    keeps no record of the recoveries before its own death: read them before the next
    kill)."""
    return [r for r in cl.stats()["recovery"]["recoveries"] if r["time"] >= t]


def assert_one_recovery(cl, kill: Kill) -> dict:
    """``kill`` happened and exactly one recovery followed it (a coordinator's is its
    restart; another role's is not); returns its record. Every role answers first
    (``Cluster.warm``), so a death that no call met yet is met and recovered now, and the
    role's process is a new one."""
    kill.happened()
    cl.warm()
    recs = recoveries_since(cl, kill.at)
    assert len(recs) == 1, f"{len(recs)} recoveries after the kill of {kill.role} (pid {kill.pid}): {recs}"
    assert (recs[0]["cause"] == "restart") == (kill.role == "coordinator"), recs
    assert kill.pid not in cl.pids()[kill.role], f"{kill.role} pid {kill.pid} still serves"
    return recs[0]
