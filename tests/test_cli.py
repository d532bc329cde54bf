"""The command line: demo, bench engine (in-process and with a worker per method), and how
commands contributed by other modules are registered or reported missing."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from rankcast import cli


def test_help_lists_the_commands():
    out = subprocess.run([sys.executable, "-m", "rankcast", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for name in ("demo", "bench"):
        assert name in out
    out = subprocess.run([sys.executable, "-m", "rankcast", "bench", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for name in ("engine", "cluster", "ingest"):
        assert name in out


def test_missing_extension_fails_with_a_clear_message(monkeypatch, capsys):
    monkeypatch.setattr(cli, "EXTENSIONS", {"rankcast.no_such_commands": ("frobnicate",)})
    parser = cli.build_parser()
    assert "rankcast.no_such_commands" in parser.epilog
    assert cli.main(["frobnicate", "--anything"]) == 2
    assert "rankcast.no_such_commands" in capsys.readouterr().err


def test_extension_registers_its_commands(monkeypatch, tmp_path, capsys):
    (tmp_path / "fake_rankcast_cmds.py").write_text(textwrap.dedent("""
        def register(sub):
            p = sub.add_parser("hello")
            p.add_argument("--name", default="world")
            p.set_defaults(func=lambda a: print("hello", a.name) or 0)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "EXTENSIONS", {"fake_rankcast_cmds": ("hello",)})
    assert cli.main(["hello", "--name", "ray"]) == 0
    assert "hello ray" in capsys.readouterr().out


def test_broken_extension_is_not_silenced(monkeypatch, tmp_path):
    """Only absence is tolerated: a module whose own import fails raises."""
    (tmp_path / "broken_rankcast_cmds.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(cli, "EXTENSIONS", {"broken_rankcast_cmds": ("x",)})
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency_xyz"):
        cli.build_parser()


def _check_bench_report(out, methods):
    report = json.loads((out / "engine.json").read_text())
    assert (out / "engine.png").stat().st_size > 0
    res = report["results"]["tweets"]
    assert set(res) == set(methods)
    for key, r in res.items():
        if key == "forms":
            continue
        assert "error" not in r, (key, r)
        assert r["amp_us"] > 0 and r["throughput"] > 0 and r["peak_rss_mb"] > 0
        assert r["avg_buffer"] > 0
    # every method ends with the same top-k lists as the brute-force engine
    exact = report["summary"]["tweets"]["same_results_as_brute"]
    assert exact and all(exact.values()), exact
    return report


@pytest.mark.slow
def test_bench_engine_in_process(tmp_path):
    methods = ["igpt", "brute", "ipt", "ciq", "kmax", "skyband", "sparse", "igpt-arrow"]
    rc = cli.main(["bench", "engine", "--dataset", "tweets", "--subs", "400", "--window", "400",
                   "--messages", "150", "--batch", "50", "--in-process",
                   "--methods", ",".join(methods), "--forms", "arrow,diff,objects", "--out", str(tmp_path)])
    assert rc == 0
    report = _check_bench_report(tmp_path, methods + ["forms"])
    forms = report["results"]["tweets"]["forms"]
    assert forms["diff"]["lists_changed_per_message"] == forms["arrow"]["lists_changed_per_message"] \
        == forms["objects"]["lists_changed_per_message"] > 0
    assert forms["diff"]["rows_per_message"] > 0 and forms["arrow"]["rows_per_message"] > 0
    assert report["summary"]["tweets"]["updates_forms"]["throughput"] > 0
    assert report["workloads"]["tweets"]["subscriptions"] == 400
    assert report["results"]["tweets"]["kmax"]["avg_buffer"] >= report["results"]["tweets"]["igpt"]["avg_buffer"] / 10
    res = report["results"]["tweets"]
    assert res["igpt-arrow"]["updates"] == res["igpt"]["updates"] == res["sparse"]["updates"] > 0
    assert report["summary"]["tweets"]["time_sparse_over_igpt"] > 0


@pytest.mark.slow
def test_bench_engine_worker_per_method(tmp_path):
    """The default isolation: one subprocess per method, each reporting its own peak RSS."""
    out = subprocess.run([sys.executable, "-m", "rankcast", "bench", "engine", "--dataset", "tweets",
                          "--subs", "200", "--window", "200", "--messages", "60", "--batch", "30",
                          "--methods", "igpt,brute", "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    report = _check_bench_report(tmp_path, ["igpt", "brute"])
    assert json.loads(out.stdout)["summary"] == report["summary"]


def test_bench_engine_rejects_unknown_methods(tmp_path, capsys):
    assert cli.main(["bench", "engine", "--methods", "igpt,nope", "--out", str(tmp_path)]) == 2
    assert "rankcast bench engine: error: unknown method" in capsys.readouterr().err


@pytest.mark.ray
@pytest.mark.spark
@pytest.mark.slow
def test_demo_small(tmp_path, capsys):
    rc = cli.main(["demo", "--messages", "3000", "--subs", "600", "--window", "1000",
                   "--batch", "500", "--match-events", "300", "--match-exprs", "2000", "--range-objects", "3000",
                   "--range-subs", "500", "--range-updates", "2000", "--out", str(tmp_path)])
    assert rc == 0
    summary = json.loads((tmp_path / "demo.json").read_text())
    assert (tmp_path / "demo.png").stat().st_size > 0
    assert summary["engine"]["messages"] == 3000
    assert summary["engine"]["throughput_msg_s"] > 0
    assert summary["engine"]["stats"]["window"] == 1000
    rm = summary["ranked_matching"]
    assert rm["events"] == 300 and rm["expressions"] == 2000 and rm["events_with_matches"] > 0
    assert rm["cluster_equal_to_matcher"] and rm["spark_agreement"] == 100.0 and rm["recovery_seconds"] > 0
    assert rm["be_tree"]["equal_to_interval_indexes"] and rm["be_tree"]["cnodes"] > 0
    rt = summary["range_topk"]
    assert rt["objects"] > 2500 and rt["ranges"] == 500 and rt["updates"] == 5000 and rt["calls"] > 1
    assert rt["cluster_equal_to_engine"] and rt["exact_against_brute_force"]
    assert rt["cluster"]["messages_generated"] > 0 and 0 < rt["cluster"]["partitions_reached_per_update"]
    assert len(rt["watched"]) == 3 and all(len(w["topk"]) == 10 for w in rt["watched"])
    watched = summary["watched"]
    assert len(watched) == 3
    printed = capsys.readouterr().out
    for w in rt["watched"]:
        pops = [r["population"] for r in w["topk"]]
        assert pops == sorted(pops, reverse=True) and w["topk"][0]["name"] in printed
    for w in watched:
        assert w["keywords"] and len(w["topk"]) <= w["k"]
        scores = [r["score"] for r in w["topk"]]
        assert scores == sorted(scores, reverse=True)
        for r in w["topk"][:5]:
            assert r["name"] and r["name"] in printed       # places shown by name
