"""The exceptions of the public contract, and the one the command line reports."""

__all__ = ["InvalidInput", "UnknownSubscription", "CommandError"]


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
