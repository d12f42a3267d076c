"""The deploy/ files hold together: the `ray up` config passes Ray's own launcher
validation, the KubeRay manifest runs `cameo serve` on the head with Ray's token
auth on, and the Grafana dashboard only asks for metrics the service exports.

(The Prometheus config and the dashboard's queries run against a real Prometheus
in test_service.py.) Needs the ray package, starts no Ray.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest
import yaml

from cameo_actors.scheduling.admission import Demand, predict
from cameo_actors.service.metrics import families

pytestmark = pytest.mark.integration

DEPLOY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "deploy")


def load(*parts: str) -> Any:
    with open(os.path.join(DEPLOY, *parts), encoding="utf-8") as f:
        return json.load(f) if parts[-1].endswith(".json") else yaml.safe_load(f)


def test_ray_up_config_passes_rays_launcher_validation() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = load("ray-cluster.yaml")
    validate_config(prepare_config(config))  # raises on a schema error
    head = " ".join(config["head_start_ray_commands"])
    assert "RAY_AUTH_MODE=token" in head and "cameo serve --address auto" in head
    assert "--checkpoint-url" in head and "--ingress-log-dir" in head  # storage every node reaches
    assert all("RAY_AUTH_MODE=token" in c for c in config["worker_start_ray_commands"]
               if "ray start" in c)
    assert "~/.ray/auth_token" in config["file_mounts"]


def test_kuberay_manifest_runs_the_service_on_the_head() -> None:
    rc = load("kuberay", "raycluster.yaml")
    assert (rc["apiVersion"], rc["kind"]) == ("ray.io/v1", "RayCluster")
    assert rc["spec"]["authOptions"]["mode"] == "token"
    assert rc["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    head = rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    script = " ".join(head["args"])
    assert "$KUBERAY_GEN_RAY_START_CMD" in script and "exec cameo serve --address auto" in script
    # The ingress logs on a volume every pod mounts at the same path.
    assert "--checkpoint-url" in script and "--ingress-log-dir /shared/ingress" in script
    worker = rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    for pod, container in ((rc["spec"]["headGroupSpec"]["template"]["spec"], head),
                           (worker, worker["containers"][0])):
        assert {"name": "shared", "mountPath": "/shared"} in container["volumeMounts"]
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "cameo-shared"
    assert {p["containerPort"] for p in head["ports"]} >= {8470}
    assert any(e["name"] == "CAMEO_ADMIN_TOKEN" and "secretKeyRef" in e["valueFrom"]
               for e in head["env"])


def test_dashboard_uses_only_exported_metrics() -> None:
    snapshot = {"dataflows": [{"name": "d", "tenant": "t", "target_ms": 1, "weight": 1,
                               "results": 1, "within_target_count": 1, "sum_ms": 1,
                               "buckets": [1] + [0] * 13, "p50_ms": 1, "p95_ms": 1, "p99_ms": 1,
                               "events_in": 1, "events_out": 1, "backlog": 0,
                               "errors": {"s:k": 1}}],
                "executors": [{"executor": 0, "node": "n", "activations": 1, "backlog": 0,
                               "executed": 1, "slices": 1, "preempted": 0, "overdue": 0, "busy_ms": 1,
                               "overhead_ms": 1, "overhead_us_per_message": 1, "held": 0,
                               "faults": [], "demotions": 1,
                               "tenants": {"t": {"weight": 1.0, "busy_ms": 1.0, "demoted": True,
                                                 "over_share_ms": 60.0, "demotions": 1}}}],
                "overload": predict(1000.0, [Demand("d", "t", 1.0, 1.0, 2000.0, 1.0),
                                             Demand("e", "u", 1.0, 1.0, 10.0, 1.0)]).to_dict()}
    exported = set()
    for fam in families(snapshot):
        for sample in fam.samples:
            exported.add(sample.name)
    dash = load("grafana", "cameo-dashboard.json")
    used = set()
    for panel in dash["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"\bcameo_[a-z_]+", target["expr"]))
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            used |= set(re.findall(r"\bcameo_[a-z_]+", var["definition"]))
    assert used and used <= exported, used - exported
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for must in ("latency percentiles vs target", "within target", "throughput",
                 "executor busy share", "overload"):
        assert must in titles
