"""The collector's pauses as the roles report them, and ``settle_heap`` (once per role
process: what is alive then is frozen out of the collector's sight)."""
import gc

import pytest


def test_gc_pauses_count_collections_and_keep_the_long_ones():
    from rankcast.runtime import metrics

    before = metrics.gc_pauses()
    junk = [[i] for i in range(200_000)]        # a full collection that takes a while
    gc.collect()
    del junk
    got = metrics.gc_pauses()
    assert got["gc_collections"] > before["gc_collections"]
    assert got["gc_full_collections"] > before["gc_full_collections"]
    assert got["gc_seconds"] > before["gc_seconds"] and got["gc_max_pause_seconds"] > 0
    assert all(len(p) == 3 and p[1] >= metrics.GC_LONG for p in got["gc_long_pauses"])


def test_settle_heap_outside_a_role_process_changes_nothing():
    from rankcast.runtime.metrics import settle_heap

    frozen = gc.get_freeze_count()
    settle_heap()
    assert gc.get_freeze_count() == frozen


@pytest.mark.ray
def test_settle_heap_freezes_a_role_process_once(ray_session):
    import ray

    @ray.remote(num_cpus=0.1)
    class Role:
        def settle(self):
            from rankcast.runtime.metrics import settle_heap
            settle_heap()
            first = gc.get_freeze_count()
            keep = [[i] for i in range(1000)]       # made after: not frozen by a second call
            settle_heap()
            return first, gc.get_freeze_count(), len(keep)

    r = Role.remote()
    first, again, _ = ray.get(r.settle.remote())
    assert first > 10_000 and again == first
    ray.kill(r)


def test_long_pauses_are_a_ring_of_the_latest_oldest_first(monkeypatch):
    """More long pauses than are kept: the latest ones, oldest first; a reader copying them
    while a collection runs sees a list that never changed its size (stats() under load)."""
    from rankcast.runtime import metrics

    monkeypatch.setattr(metrics, "GC_LONG", 0.0)            # every collection counts as long
    for _ in range(metrics.GC_LONG_KEPT + 40):
        gc.collect(0)
    got = metrics.gc_pauses()["gc_long_pauses"]
    assert len(got) == metrics.GC_LONG_KEPT
    times = [t for t, _, _ in got]
    assert times == sorted(times)
