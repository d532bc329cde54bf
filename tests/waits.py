"""Event-based waits for the tests: poll a condition until it holds, with a generous
deadline, and let the test assert the condition itself, never a duration."""
from __future__ import annotations

import time

__all__ = ["wait_until", "listen_until", "wait_actor_gone"]

DEADLINE = 120.0     # seconds: far beyond what any of these waits takes under load


def wait_until(cond, what: str, deadline: float = DEADLINE, poll: float = 0.05):
    """Call ``cond`` until it returns something true, and return that; fail naming
    ``what`` when ``deadline`` seconds pass first."""
    end = time.monotonic() + deadline
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not after {deadline:.0f} s")
        time.sleep(poll)


def listen_until(cl, from_position: int, last: int, deadline: float = DEADLINE) -> list:
    """The deliveries from ``from_position`` on, listened for until one at position ``last``
    or later came (or ``deadline`` seconds passed: then what came, for the test to judge)."""
    end = time.monotonic() + deadline
    got, pos = [], from_position
    while time.monotonic() < end:
        for d in cl.listen(from_position=pos, timeout=0.5):
            got.append(d)
            pos = d.position + 1
        if got and got[-1].position >= last:
            break
    return got


def wait_actor_gone(name: str, namespace: str, deadline: float = DEADLINE) -> None:
    """Wait until Ray no longer knows the named actor (a killed coordinator's name is free)."""
    import ray

    def gone():
        try:
            ray.get_actor(name, namespace=namespace)
        except ValueError:
            return True
        return False
    wait_until(gone, f"the actor {name!r} is gone", deadline)
