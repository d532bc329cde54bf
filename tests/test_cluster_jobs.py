"""Using a cluster the way Ray users do: attach to it from another process, and submit
`rankcast run` as a Ray job to a head started with `ray start --head`."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import rankcast as rc

BOUNDS = (0.0, 0.0, 10.0, 10.0)
PY = sys.executable

pytestmark = [pytest.mark.ray, pytest.mark.slow]   # Ray heads and drivers in other processes


def test_attach_from_another_process(ray_session):
    """A second driver attaches by name, subscribes with words the cluster never saw, and
    publishes; the first handle sees the same term ids (one dictionary, in the coordinator)."""
    cfg = rc.EngineConfig(bounds=BOUNDS, window=20)
    ccfg = rc.ClusterConfig(engine=cfg, policy="prefix", partitions=2, window_shards=2, actor_cpus=0.05,
                            name="test-attach", namespace="rankcast-attach")
    cl = rc.Cluster.start(ccfg)
    try:
        cl.subscribe([rc.Subscription(1, 2.0, 2.0, text="red fox", k=2)])
        address = ray_session.get_runtime_context().gcs_address
        child = textwrap.dedent(f"""
            import json, rankcast as rc
            cl = rc.Cluster.attach("test-attach", address={address!r}, namespace="rankcast-attach")
            cl.subscribe([rc.Subscription(2, 8.0, 8.0, text="zebra crossing", k=2)])
            ups = cl.publish([rc.Message(10, 8.0, 8.0, text="zebra"), rc.Message(11, 2.0, 2.0, text="fox")])
            print("RESULT", json.dumps([[u.subscription_id, list(map(list, u.topk))] for u in ups]))
        """)
        out = subprocess.run([PY, "-c", child], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
        ups = json.loads(line[len("RESULT "):])
        assert [u[0] for u in ups] == [1, 2]
        assert [m for m, _ in ups[1][1]] == [10]
        # back in this process: "zebra" must have the id the child's call gave it
        ups = cl.publish([rc.Message(12, 8.0, 8.0, text="zebra crossing")])
        assert [u.subscription_id for u in ups] == [2]
        assert [m for m, _ in cl.topk(2)] == [12, 10]
        assert cl.stats()["subscriptions"] == 2
    finally:
        cl.shutdown()


def _free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _stop(proc):
    """Signal the `ray start --block` process group (only what it started), if still there."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)


TOKEN = "rankcast-test-" + os.urandom(16).hex()


def _start_head(ray_bin, tmp):
    """`ray start --head --block` on free ports, with token authentication (the documented
    multi-node set-up); returns (proc, dashboard url, env with the token, gcs address, failure)."""
    gcs, dash, agent, agent_grpc, rt_env, metrics, client, nm, om = _free_ports(9)
    env = dict(os.environ, PATH=f"{Path(PY).parent}:{os.environ.get('PATH', '')}", RAY_DEDUP_LOGS="0",
               RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN)
    env.pop("RAY_ADDRESS", None)
    cmd = [ray_bin, "start", "--head", "--block", f"--port={gcs}", f"--temp-dir={tmp}", "--num-cpus=2",
           "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
           f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
           f"--runtime-env-agent-port={rt_env}", f"--metrics-export-port={metrics}",
           f"--ray-client-server-port={client}", f"--node-manager-port={nm}", f"--object-manager-port={om}",
           "--disable-usage-stats"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    url = f"http://127.0.0.1:{dash}"
    deadline = time.time() + 180
    while time.time() < deadline:
        r = subprocess.run([ray_bin, "job", "list", "--address", url], env=env, capture_output=True,
                           text=True, timeout=60)
        if r.returncode == 0:
            return proc, url, env, f"127.0.0.1:{gcs}", None
        if proc.poll() is not None:
            return proc, url, env, None, "ray start --head exited: " + proc.stdout.read()[-3000:]
        time.sleep(2)
    return proc, url, env, None, "the Ray head's job server did not come up"


def _submit(ray_bin, url, env, entrypoint: list[str]) -> subprocess.CompletedProcess:
    """`ray job submit` of ``entrypoint``. The head's job server answers before the node's job
    agent has registered with it (under load, seconds later); until then a submission
    is refused with "No available agent" and nothing runs, so it is tried again."""
    deadline = time.time() + 120
    while True:
        r = subprocess.run([ray_bin, "job", "submit", "--address", url, "--", *entrypoint],
                           env=env, capture_output=True, text=True, timeout=600)
        if r.returncode == 0 or "No available agent" not in r.stdout + r.stderr or time.time() > deadline:
            return r
        time.sleep(3)


@pytest.fixture
def ray_head():
    """A separate Ray head (`ray start --head --block` in a temp dir, non-default ports),
    stopped by signalling that command, which takes down only the processes it started. On a
    loaded 2-core machine the dashboard can miss its own start-up timeout: one more try."""
    ray_bin = str(Path(PY).with_name("ray"))
    failure = None
    for _ in range(2):
        tmp = tempfile.mkdtemp(prefix="rcjob")
        proc, url, env, gcs, failure = _start_head(ray_bin, tmp)
        if failure is None:
            break
        _stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    if failure is not None:
        pytest.fail(failure)
    try:
        yield url, env, gcs
    finally:
        _stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def test_ray_job_submit_rankcast_run(ray_head, tmp_path):
    url, env, _ = ray_head
    ray_bin = str(Path(PY).with_name("ray"))
    subs = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "x": [1.0, 5.0, 9.0], "y": [1.0, 5.0, 9.0],
                     "k": pa.array([2, 2, 3], pa.int32()), "alpha": [0.5, 0.0, 1.0],
                     "text": ["coffee bar", "pizza", "coffee pizza"]})
    texts = ["coffee", "pizza place", "bar", "coffee bar", "tea", "pizza pizza", "coffee shop"]
    msgs = pa.table({"id": pa.array(range(100, 121), pa.int64()),
                     "x": [float(i % 10) for i in range(21)], "y": [float((3 * i) % 10) for i in range(21)],
                     "text": [texts[i % len(texts)] for i in range(21)]})
    pq.write_table(subs, tmp_path / "subs.parquet")
    pq.write_table(msgs, tmp_path / "msgs.parquet")
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({
        "engine": {"bounds": list(BOUNDS), "window": 8},
        "cluster": {"name": "job-cluster", "policy": "prefix", "partitions": 2, "window_shards": 2,
                    "actor_cpus": 0.1, "batch_size": 4}}))
    out_file = tmp_path / "out.json"
    # `rankcast` is the console script of the venv the head runs in (its PATH)
    r = _submit(ray_bin, url, env, ["rankcast", "run", "--config", str(tmp_path / "cluster.yaml"),
                                    "--subscriptions", str(tmp_path / "subs.parquet"),
                                    "--source", str(tmp_path / "msgs.parquet"),
                                    "--batch-rows", "5", "--topk", "1", "2", "3", "--out", str(out_file)])
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    res = json.loads(out_file.read_text())
    assert res["started"] and res["subscriptions_loaded"] == 3 and res["replay"]["messages"] == 21
    eng = rc.Engine(rc.EngineConfig(bounds=BOUNDS, window=8))
    eng.subscribe(subs)
    for a in range(0, 21, 5):
        eng.publish(msgs.slice(a, 5))
    for i in (1, 2, 3):
        assert [tuple(x) for x in res["topk"][str(i)]] == eng.topk(i)


def test_client_without_the_token_cannot_attach(ray_head, tmp_path):
    """The head runs with token authentication: a client with a wrong token, or with none
    (no RAY_AUTH_TOKEN and no token file in its home), is refused with an error that says
    how to present the token; the job API refuses too; with the token, attaching gets as far
    as asking for the cluster by name."""
    url, env, gcs = ray_head
    ray_bin = str(Path(PY).with_name("ray"))
    attach = textwrap.dedent(f"""
        import rankcast as rc
        try:
            rc.Cluster.attach("no-such-cluster", address={gcs!r})
        except Exception as e:
            print("ERROR", type(e).__name__, e)
    """)
    (tmp_path / "home").mkdir()
    wrong = dict(env, RAY_AUTH_TOKEN="not-the-token-" + "0" * 20, HOME=str(tmp_path / "home"))
    none = {k: v for k, v in env.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_MODE")}
    none["HOME"] = str(tmp_path / "home")
    for bad in (wrong, none):
        r = subprocess.run([PY, "-c", attach], env=bad, capture_output=True, text=True, timeout=300)
        line = next((l for l in r.stdout.splitlines() if l.startswith("ERROR")), "")
        assert line.startswith("ERROR ConnectionError") and "RAY_AUTH_TOKEN" in line, (r.stdout + r.stderr)[-3000:]
    r = subprocess.run([ray_bin, "job", "list", "--address", url], env=wrong, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    r = subprocess.run([PY, "-c", attach], env=env, capture_output=True, text=True, timeout=300)
    assert "ERROR RuntimeError no rankcast cluster named 'no-such-cluster'" in r.stdout, (r.stdout + r.stderr)[-3000:]
