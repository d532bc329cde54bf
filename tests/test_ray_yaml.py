"""ray_cluster.yaml passes Ray's own cluster-config validation, and the `rankcast run`
YAML loader turns a config file into a ClusterConfig (rejecting unknown fields)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from rankcast.runtime.commands import cluster_config_from_dict, load_cluster_config
from rankcast.errors import InvalidInput
from rankcast.kinds.spatial.text import Vocabulary

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.ray   # Ray's own validator of cluster configs


def _validate(cfg: dict) -> dict:
    from ray.autoscaler._private.util import prepare_config, validate_config

    full = prepare_config(copy.deepcopy(cfg))
    validate_config(full)
    return full


@pytest.fixture(scope="module")
def launcher():
    with open(ROOT / "ray_cluster.yaml") as f:
        return yaml.safe_load(f)


def test_ray_cluster_yaml_validates(launcher):
    full = _validate(launcher)
    types = full["available_node_types"]
    assert full["head_node_type"] in types and len(types) >= 2
    workers = [t for t in types if t != full["head_node_type"]]
    assert all(types[t]["max_workers"] >= 1 for t in workers)
    setup = " ".join(full["setup_commands"])
    assert "openjdk-17" in setup, "Spark 3.5 / RayDP need Java 17 on every node"
    assert "pip install" in setup and "rankcast" in setup
    assert "JAVA_TOOL_OPTIONS" in setup and "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED" in setup
    assert any("ray start --head" in c for c in full["head_start_ray_commands"])
    assert any("ray start --address" in c for c in full["worker_start_ray_commands"])
    # token authentication on every node, the token shipped to each, the dashboard on loopback
    starts = full["head_start_ray_commands"] + full["worker_start_ray_commands"]
    assert all("RAY_AUTH_MODE=token ray start" in c for c in starts if "ray start" in c)
    assert any(v.endswith("auth_token") for v in full["file_mounts"].values())
    assert "--dashboard-host=127.0.0.1" in " ".join(full["head_start_ray_commands"])
    assert "0.0.0.0" not in json.dumps(full)


@pytest.mark.parametrize("breakage", ["unknown_key", "bad_head", "min_over_max"])
def test_validator_rejects_broken_configs(launcher, breakage):
    """The check is real: the same validator rejects broken variants of the file."""
    bad = copy.deepcopy(launcher)
    if breakage == "unknown_key":
        bad["partitions"] = 4
    elif breakage == "bad_head":
        bad["head_node_type"] = "missing"
    else:
        bad["available_node_types"]["rankcast.worker"]["min_workers"] = 99
    with pytest.raises(Exception):
        _validate(bad)


def test_run_config_loader(tmp_path):
    vocab = Vocabulary.fit(["cafe bar", "bar pizza", "pizza"])
    (tmp_path / "vocab.json").write_text(json.dumps(vocab.to_dict()))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({
        "engine": {"bounds": [-180, -90, 180, 90], "window_seconds": 60.0, "vocabulary": "vocab.json",
                   "leaf_capacity": 500},
        "cluster": {"name": "geo", "policy": "spatial-first", "partitions": 4, "window_shards": 3,
                    "distributors": 2, "options": {"l1": 2}},
    }))
    ccfg = load_cluster_config(tmp_path / "cluster.yaml")
    assert ccfg.name == "geo" and ccfg.policy == "spatial-first" and ccfg.partitions == 4
    assert ccfg.engine.time_window and ccfg.engine.window_seconds == 60.0
    assert ccfg.engine.vocabulary == vocab and ccfg.engine.leaf_capacity == 500
    assert ccfg.options == {"l1": 2}


@pytest.mark.parametrize("d, field", [
    ({"engine": {"bounds": [0, 0, 1, 1]}, "cluster": {"partitons": 3}}, "partitons"),
    ({"engine": {"bounds": [0, 0, 1, 1], "windw": 3}}, "windw"),
    ({"engine": {"window": 5}}, "bounds"),
    ({"engine": {"bounds": [0, 0, 1, 1]}, "clusters": {}}, "clusters"),
    ({"engine": {"bounds": [0, 0, 1, 1]}, "cluster": {"policy": "zigzag"}}, "policy"),
])
def test_run_config_loader_rejects(d, field):
    with pytest.raises(InvalidInput, match=field):
        cluster_config_from_dict(d)
