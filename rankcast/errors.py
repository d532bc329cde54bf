"""The two exceptions of the public contract."""

__all__ = ["InvalidInput", "UnknownSubscription"]


class InvalidInput(ValueError):
    """Malformed input. The message names the item (position and id) and the field;
    the call that raised it changed nothing."""


class UnknownSubscription(KeyError):
    """An id that is not a live subscription."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the sentence readable
        return str(self.args[0]) if self.args else "unknown subscription"
