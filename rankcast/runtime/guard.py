"""Client calls that survive the death of a role (:func:`guarded`)."""
from __future__ import annotations

import functools

from rankcast.errors import NoCapacity

from .recovery import is_role_death
from .results import for_client


_NOT_DONE = object()
MAX_RECOVERIES = 3      # deaths in a row one call survives before it gives up


def guarded(fn):
    """A client call that survives the death of a role: on a death the coordinator recovers
    (every role from the checkpoint, then the log replayed) and the call completes. A call
    that reached the log was replayed with it: its result is the replay's. Other calls run
    again. Nested calls pass through; the outermost also takes a checkpoint when one is due."""
    @functools.wraps(fn)
    def call(self, *args, **kw):
        if self._depth:
            return fn(self, *args, **kw)
        self._depth += 1
        self._current = None
        try:
            if self._waiting is not None:         # roles lost with a node wait for room
                try:
                    self._resume_if_room()
                except NoCapacity:
                    if fn.__name__ == "stats":
                        return self._waiting_stats()
                    raise
            for _ in range(MAX_RECOVERIES + 1):
                try:
                    out = fn(self, *args, **kw)
                except Exception as e:
                    if self.store is None or not is_role_death(e):
                        raise
                    results = self._recover(e)
                    if self._current is not None and self._current >= 0:
                        return for_client(results[self._current])     # as the call would return it
                    # not logged, or already in the checkpoint: a call with a client token
                    # that was applied returns its recorded result (_retried)
                    continue
                try:
                    self._maybe_checkpoint()
                except Exception as e:         # the call is complete: its result stands
                    if self.store is None or not is_role_death(e):
                        raise
                    self._recover(e)
                return out
            raise RuntimeError(f"rankcast: {MAX_RECOVERIES + 1} role deaths in one call; giving up")
        except NoCapacity as e:
            # logged: the call takes effect when the cluster resumes (its replay applies it)
            e.accepted = self._current is not None
            if e.accepted:
                e.args = (f"{e.args[0]} This call is in the cluster's log: it takes effect when the cluster "
                          f"resumes (do not send it again).",)
            raise
        finally:
            self._depth -= 1
    return call
