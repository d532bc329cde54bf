"""Range top-k subscriptions with the Paint algorithms (docs/contract.md, "Range top-k";
the paper: range top-k continuous queries over a wide-area network; docs/range.md).

A subscription is a closed range [lo, hi] of the objects' x and holds the k live objects of
lowest y in it. The kind is split in two sides that share nothing but message batches:

- the **server** (:mod:`.server`, kernels in :mod:`.objects` and :mod:`.paint`): the objects
  and the structures the algorithms query (``first_k``, ``min_y``, a new range's top-k), and
  the generation of messages. ``RangeServer.process(ids, x, y)`` applies a sequence of object
  updates and returns a :class:`~.server.Messages` batch: numpy columns, each message a closed
  box of (lo, hi) subscription space with one object's value (or, for Unicast, a subscription
  id). It is a pure function of the objects and, for Paint-Sparse and Unicast, of the
  subscription set it was handed (``set_subscriptions(PointIndex)``: the whole set or a
  sketch); it never reads a subscriber's list.
- the **subscriber side** (:mod:`.subscribers`): subscriptions and their top-k lists, rows in
  k-d tree order (:mod:`.points`). ``SubscriberStore.deliver(f, i)`` applies a batch in order
  with the paper's protocol to every subscription inside each box and returns the rows whose
  top-k changed. Any set of subscriptions can be a store (a zone of (lo, hi) space: a
  partition receives the messages whose boxes meet its zone, in batch order).

Both sides snapshot to plain arrays (``state()`` / ``from_state``, ``restore``); the engine
(:mod:`.engine`, ``rc.RangeEngine``) joins them in one process. Unicast, the method Paint is
measured against, is :mod:`.unicast`; the brute-force oracle is :mod:`rankcast.baselines.rangetopk`.
"""
from .engine import RangeEngine
from .server import Messages, RangeServer
from .subscribers import SubscriberStore

__all__ = ["RangeEngine", "RangeServer", "SubscriberStore", "Messages"]
