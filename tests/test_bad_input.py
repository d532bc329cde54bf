"""Bad input through every entry: the size limits (docs/contract.md, "Limits"), the contract's
malformed inputs through the cluster (in-process roles: no Ray), and the command line
(one line on stderr naming the file's line and the field, exit status 2, no traceback).
After every rejected call nothing has changed and the target keeps serving: the same good
calls afterwards give what rc.Engine gives."""
from __future__ import annotations

import json
import subprocess
import sys
import uuid

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rankcast as rc
from rankcast import cli
from rankcast.kinds.spatial.testing import Call, play
from rankcast.kinds.spatial.columns import SubscriptionBatch
from rankcast.config import Limits, limits
from rankcast.ingest import commands

from tests.test_validation import BAD_MSGS, BAD_SUBS, BAD_TIMES, M, S

BOUNDS = (0, 0, 10, 10)


def _cfg(time_window: bool = False) -> rc.EngineConfig:
    return rc.EngineConfig(bounds=BOUNDS, window_seconds=5.0) if time_window \
        else rc.EngineConfig(bounds=BOUNDS, window=5)


def _cluster(cfg: rc.EngineConfig) -> rc.Cluster:
    return rc.Cluster.start(rc.ClusterConfig(engine=cfg, partitions=2, name=f"bad-input-{uuid.uuid4().hex[:8]}",
                                             options={"runtime": "inproc"}), fresh=True)


def _setup(target) -> None:
    """What test_validation's engines hold: subscription 1, message 100 at t=1."""
    target.subscribe([S(1, 1, 1, text="coffee shop", k=2)])
    target.publish([M(100, 1, 1, text="coffee", t=1.0)])


def _state(target):
    st = target.stats()
    return st["subscriptions"], st["window"], st["published"], target.topk(1)


GOOD = [Call("subscribe", [S(2, 2, 2, text="coffee tea", k=3, alpha=0.3), S(3, 8, 8, terms={"tea": 1.0}, k=1)]),
        Call("publish", [M(101, 2, 2, text="tea and coffee", t=2.0), M(102, 9, 9, text="tea", t=2.5)]),
        Call("unsubscribe", [3]),
        Call("publish", [M(103, 1, 1, text="coffee coffee shop", t=3.0)])]


# ----------------------------------------------------------------------------- limits

@pytest.fixture
def small_limits(monkeypatch):
    monkeypatch.setenv("RANKCAST_MAX_TEXT_CHARS", "40")
    monkeypatch.setenv("RANKCAST_MAX_TERMS", "3")
    monkeypatch.setenv("RANKCAST_MAX_ITEMS", "4")


def test_default_limits_are_the_documented_ones(monkeypatch):
    for key in ("MAX_TEXT_CHARS", "MAX_TERMS", "MAX_ITEMS", "MAX_PREDICATES", "MAX_SET_VALUES"):
        monkeypatch.delenv(f"RANKCAST_{key}", raising=False)
    assert limits() == Limits(max_text_chars=100_000, max_terms=1_000, max_items=1_000_000,
                              max_predicates=1_000, max_set_values=10_000)
    monkeypatch.setenv("RANKCAST_MAX_TERMS", "many")
    with pytest.raises(rc.InvalidInput, match="RANKCAST_MAX_TERMS"):
        limits()
    monkeypatch.setenv("RANKCAST_MAX_TERMS", "0")
    with pytest.raises(rc.InvalidInput, match="max_terms"):
        limits()


def _sub_batch(n_terms: int) -> SubscriptionBatch:
    w = np.full(n_terms, 1 / np.sqrt(n_terms))
    return SubscriptionBatch(np.array([7]), np.array([1.0]), np.array([1.0]), np.array([2]), np.array([0.5]),
                             np.array([0, n_terms]), np.arange(n_terms, dtype=np.int64), w)


def _many_subs(n):
    return [S(10 + i, 1, 1, text="coffee") for i in range(n)]


LIMIT_CALLS = [   # (method, argument, the error's words)
    ("subscribe", _many_subs(5), "5 in one call, more than the limit max_items=4"),
    ("subscribe", lambda: (S(10 + i, 1, 1, text="coffee") for i in range(10**12)), "max_items=4"),  # read to the limit only
    ("subscribe", pd.DataFrame({"id": range(10, 15), "x": 1.0, "y": 1.0, "text": "coffee"}), "max_items=4"),
    ("subscribe", {"id": np.arange(10, 15), "x": np.ones(5), "y": np.ones(5), "text": ["a"] * 5}, "max_items=4"),
    ("publish", pa.table({"id": range(10, 15), "x": [1.0] * 5, "y": [1.0] * 5, "text": ["a"] * 5}), "max_items=4"),
    ("unsubscribe", [1, 2, 3, 4, 5], "max_items=4"),
    ("unsubscribe", range(10**12), "max_items=4"),
    ("subscribe", [S(10, 1, 1, text="coffee"), S(11, 1, 1, text="x" * 41)],
     "subscription #1 (id=11): field 'text': 41 characters, more than the limit max_text_chars=40"),
    ("publish", [M(10, 1, 1, text="a " * 21, t=2.0)], "message #0 (id=10): field 'text': 42 characters"),
    ("subscribe", [S(10, 1, 1, text="a b c d")],
     "subscription #0 (id=10): field 'text': 4 distinct terms, more than the limit max_terms=3"),
    ("publish", [M(10, 1, 1, text="a b c d", t=2.0)], "message #0 (id=10): field 'text': 4 distinct terms"),
    ("subscribe", [S(10, 1, 1, terms={"a": 1, "b": 1, "c": 1, "d": 1})],
     "subscription #0 (id=10): field 'terms': 4 terms, more than the limit max_terms=3"),
    ("subscribe", _sub_batch(4), "subscription #0 (id=7): field 'terms': 4 terms"),
]


@pytest.mark.parametrize("call,arg,words", LIMIT_CALLS, ids=[f"{c[0]}{i}" for i, c in enumerate(LIMIT_CALLS)])
def test_limits_are_rejected_atomically_by_the_engine(small_limits, call, arg, words):
    eng = rc.Engine(rc.EngineConfig(bounds=BOUNDS, window=5, vocabulary=rc.Vocabulary.fit(["a b c d"])))
    _setup(eng)
    before = _state(eng), len(eng.encoder.terms)
    with pytest.raises(rc.InvalidInput) as e:
        getattr(eng, call)(arg() if callable(arg) else arg)
    assert words in str(e.value)
    assert (_state(eng), len(eng.encoder.terms)) == before
    # at the limit is fine
    eng.subscribe(_many_subs(4))
    eng.publish([M(10, 1, 1, text="a b c", t=2.0)])
    assert eng.stats()["subscriptions"] == 5


def test_limits_through_the_cluster_and_bulk_batches(small_limits):
    from rankcast.ingest.bulk import iter_batches

    cl = _cluster(_cfg())
    try:
        _setup(cl)
        before = _state(cl)
        for call, arg, words in (LIMIT_CALLS[0], LIMIT_CALLS[7], LIMIT_CALLS[9]):
            with pytest.raises(rc.InvalidInput, match=words.split(":")[-1].strip()[:20]):
                getattr(cl, call)(arg)
            assert _state(cl) == before
        with pytest.raises(rc.InvalidInput, match="field 'batch_rows'.*max_items=4"):
            next(iter_batches(pa.table({"id": [1]}), 5, progress=False))
        table = pa.table({"id": range(10, 19), "x": [1.0] * 9, "y": [1.0] * 9, "text": ["coffee"] * 9})
        assert cl.load_subscriptions(table, batch_rows=4, progress=False) == 9  # batches within the limit
    finally:
        cl.shutdown()


# ----------------------------------------------------------------------------- the cluster

def _bad_calls(time_window: bool):
    """(call, argument, error type, item, field) of every malformed input of the contract."""
    if time_window:
        return [("publish", m, rc.InvalidInput, where, "'t'") for m, where in BAD_TIMES]
    out = [("subscribe", s, rc.InvalidInput, where, field) for s, where, field in BAD_SUBS]
    out += [("publish", m, rc.InvalidInput, where, field) for m, where, field in BAD_MSGS]
    out += [
        ("publish", [M(2**63, 1, 1, text="a")], rc.InvalidInput, "#0", "'id'"),
        ("publish", [M(1.5, 1, 1, text="a")], rc.InvalidInput, "#0", "'id'"),
        ("publish", [M(1, 1, 1, terms={"": 1.0})], rc.InvalidInput, "#0 (id=1)", "'terms'"),
        ("publish", [M(1, 1, 1, terms={"a": -2.0})], rc.InvalidInput, "#0 (id=1)", "'terms'"),
        ("publish", [M(1, 1, 1)], rc.InvalidInput, "#0 (id=1)", "text/terms"),
        ("publish", [M(1, 1, math_inf := float("inf"), text="a")], rc.InvalidInput, "#0 (id=1)", "'y'"),
        ("publish", [M(1, 1, 1, text="a", t=math_inf)], rc.InvalidInput, "#0 (id=1)", "'t'"),
        ("publish", 42, rc.InvalidInput, "", "expected an iterable"),
        ("publish", "coffee", rc.InvalidInput, "", "expected an iterable"),
        ("publish", pd.DataFrame({"id": [1], "x": [1.0]}), rc.InvalidInput, "", "missing column 'y'"),
        ("subscribe", pd.DataFrame({"id": [7, 8], "x": [1.0, 1.0], "y": [1.0, 1.0], "text": ["a", "b"],
                                    "k": [2, 0]}), rc.InvalidInput, "#1 (id=8)", "'k'"),
        ("unsubscribe", [1, 77], rc.UnknownSubscription, "77", ""),
        ("unsubscribe", ["x"], rc.InvalidInput, "#0", "'id'"),
        ("unsubscribe", [1, 1], rc.InvalidInput, "#1 (id=1)", "duplicate"),
        ("unsubscribe", None, rc.InvalidInput, "", "expected subscription ids"),
    ]
    return out


@pytest.mark.parametrize("time_window", [False, True], ids=["count", "time"])
def test_every_malformed_input_through_the_cluster(time_window):
    """Each bad call raises the engine's error (same type, same message naming the item and
    the field) and changes nothing; then good calls give exactly what rc.Engine gives."""
    cfg = _cfg(time_window)
    eng, cl = rc.Engine(cfg), _cluster(cfg)
    try:
        for target in (eng, cl):
            _setup(target)
        for call, arg, exc, where, field in _bad_calls(time_window):
            before = _state(cl)
            errors = []
            for target in (eng, cl):
                with pytest.raises(exc) as e:
                    getattr(target, call)(arg)
                errors.append(str(e.value))
            assert errors[0] == errors[1], (call, arg)
            assert where in errors[1] and field in errors[1], (errors[1], where, field)
            assert _state(cl) == before == _state(eng), (call, arg)
        with pytest.raises(rc.UnknownSubscription):
            cl.topk(77)
        with pytest.raises(rc.UnknownSubscription):
            cl.topk("1")
        assert play({"engine": eng, "cluster": cl}, GOOD, live={1}) == len(GOOD)
        assert _state(cl) == _state(eng)
    finally:
        cl.shutdown()


# ----------------------------------------------------------------------------- command line

def _rows(bad_line: int | None = None, **bad):
    rows = [{"id": 1001 + i, "x": 1.0 + i, "y": 1.0, "text": "coffee shop", "k": 2, "alpha": 0.5} for i in range(6)]
    if bad_line is not None:
        rows[bad_line - 1].update(bad)
    return rows


def _write(path, rows):
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".csv":
        cols = list(rows[0])
        path.write_text(",".join(cols) + "\n" + "".join(",".join(str(r[c]) for c in cols) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture
def attached(monkeypatch):
    """The load/replay commands attached to an in-process cluster instead of one on Ray."""
    cl = _cluster(rc.EngineConfig(bounds=(0, 0, 10, 10), window=10))
    monkeypatch.setattr(commands, "_attach", lambda args: cl)
    yield cl
    cl.shutdown()


@pytest.mark.parametrize("name,where", [("bad.jsonl", "bad.jsonl, line 4"),
                                        ("bad.csv", "bad.csv, line 5"),          # the header is line 1
                                        ("bad.parquet", "bad.parquet, row 4")])
def test_load_names_the_line_and_loads_nothing(attached, tmp_path, capsys, name, where):
    path = _write(tmp_path / name, _rows(4, alpha=2.0))
    assert cli.main(["load", "subscriptions", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"rankcast load: error: {tmp_path / where}: subscription #3 (id=1004): field 'alpha': " \
           f"must be in [0, 1], got 2.0" in err
    assert "Traceback" not in err
    assert attached.stats()["subscriptions"] == 0
    good = _write(tmp_path / ("good" + path.suffix), _rows())
    assert cli.main(["load", "subscriptions", str(good)]) == 0            # and it keeps serving
    assert attached.stats()["subscriptions"] == 6


def test_load_names_an_id_already_live(attached, tmp_path, capsys):
    attached.subscribe([S(1005, 1, 1, text="tea")])
    path = _write(tmp_path / "subs.jsonl", _rows())
    text = path.read_text()
    path.write_text("\n" + text)              # a blank first line: rows and lines differ
    assert cli.main(["load", "subscriptions", str(path)]) == 2
    err = capsys.readouterr().err
    assert "subs.jsonl, line 6: subscription #4 (id=1005): field 'id': already subscribed" in err
    assert attached.stats()["subscriptions"] == 1


def test_replay_names_the_line_of_a_later_batch(attached, tmp_path, capsys):
    rows = [{"id": i, "x": 1.0, "y": 1.0, "text": "coffee"} for i in range(10)]
    rows[7]["x"] = 50.0
    path = _write(tmp_path / "msgs.jsonl", rows)
    assert cli.main(["replay", str(path), "--batch-rows", "3"]) == 2
    err = capsys.readouterr().err
    assert "msgs.jsonl, line 8: message #7 (id=7): field 'x': must be finite and within bounds" in err
    assert attached.stats()["published"] == 6                        # the two batches before it
    attached.publish([M(50, 1, 1, text="coffee")])
    assert attached.stats()["published"] == 7


def _rankcast(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "rankcast", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_bad_files_fail_before_any_cluster_is_reached(tmp_path):
    """No Ray runs here: these errors are found while the file is read, before attaching."""
    path = _write(tmp_path / "bad.jsonl", _rows(4, alpha="high"))
    out = _rankcast("load", "subscriptions", str(path))
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        f"rankcast load: error: {path}, line 4: subscription #3 (id=1004): field 'alpha': "
        f"must be a real number, got 'high'"]
    out = _rankcast("replay", str(tmp_path / "missing.csv"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"rankcast replay: error: message table: no such file or folder: " \
                                 f"{tmp_path / 'missing.csv'}"


CONFIGS = [   # (YAML text, the error's words)
    ("engine:\n  bounds: [0, 0, 10, 10]\n  window: [1\n", "bad.yaml, line 4, column 1: not valid YAML"),
    ("engine: {bounds: [0, 0, 10, 10], windw: 3}\n", "section 'engine': unknown field(s) ['windw']"),
    ("engine: {bounds: [0, 0, 10, 10]}\nclustr: {}\n", "unknown section(s) ['clustr']"),
    ("engine: {window: 3}\n", "field 'bounds' is required"),
    ("engine: {bounds: [0, 0, 0, 10]}\n", "section 'engine': EngineConfig: field 'bounds'"),
    ("engine: {bounds: [0, 0, 1, 1]}\ncluster: {partitions: 0}\n", "section 'cluster': ClusterConfig: field 'partitions'"),
    ("engine: {bounds: [0, 0, 1, 1]}\ncluster: {actor_cpus: lots}\n", "field 'actor_cpus': expected float, got 'lots'"),
    ("engine: {bounds: [0, 0, 1, 1], vocabulary: none.json}\n", "field 'vocabulary'"),
    ("engine: [1, 2]\n", "section 'engine': expected a mapping"),
    ("- 1\n", "expected a mapping with 'engine' and 'cluster' sections"),
]


@pytest.mark.parametrize("text,words", CONFIGS)
def test_bad_config_file_is_one_line(tmp_path, capsys, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert cli.main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rankcast run: error: {path}") and words in err, err
    assert len(err.strip().splitlines()) == 1


def test_bad_config_file_in_a_real_process(tmp_path):
    (tmp_path / "bad.yaml").write_text(CONFIGS[0][0])
    out = _rankcast("run", "--config", "bad.yaml", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "rankcast run: error: bad.yaml, line 4, column 1: not valid YAML: expected ',' or ']', "
        "but got '<stream end>'"]
    out = _rankcast("run", "--config", "missing.yaml", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr and "missing.yaml" in out.stderr
