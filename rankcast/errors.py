"""The exceptions of the public contract, and the one the command line reports."""

__all__ = ["InvalidInput", "UnknownSubscription", "CommandError", "NoCapacity"]


class InvalidInput(ValueError):
    """Malformed input. The message names the item (position and id) and the field;
    the call that raised it changed nothing."""


class UnknownSubscription(KeyError):
    """An id that is not a live subscription."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the sentence readable
        return str(self.args[0]) if self.args else "unknown subscription"


class CommandError(Exception):
    """A failure a ``rankcast`` command reports as one line of its own (exit status 2), not a
    traceback: a bad argument, a config file that does not parse, no cluster to attach to."""


class NoCapacity(RuntimeError):
    """A cluster on Ray lost roles (their node died) and no live node has room to recreate
    them. The cluster keeps its durable state and resumes, exactly where it was, at the first
    call after a node with room joins; until then every call raises this error and
    ``stats()`` reports the wait (``stats()["placement"]["waiting"]``). ``accepted``: whether
    the call that raised it is in the cluster's log (it takes effect when the cluster resumes,
    and listeners get its updates then) or changed nothing."""

    accepted = False
