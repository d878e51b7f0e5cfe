# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What quota charges for a pod, judged by the real quota controller of the lab's Kubernetes release: the sum of
model.quotas.pod_usage over the pods as the API server stored them equals the quota's status.used.

It runs on the oldest supported release (make lab-tests, v1.33.13) and on the newest (make lab-tests-newest,
v1.37.2). Pod-level resources (KEP-2837; feature gate PodLevelResources, beta and on by default since 1.34, still
beta in v1.37.2's kube_features.go): the API server keeps a pod's spec.resources and quota counts it instead of the
containers'; 1.33 (the gate alpha, off) drops the field, and quota counts the containers. Sidecars (restartable
init containers), regular init containers and a RuntimeClass's pod overhead are charged on both. The pods are
never scheduled (a node selector no node has), as quota charges them from creation.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import secrets

import pytest

import modlab as M

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as Q  # noqa: E402

pytestmark = pytest.mark.lab   # make lab-tests and make lab-tests-newest (conftest.py: one marker per lab test)

NAMES = ("requests.cpu", "requests.memory", "limits.cpu", "limits.memory", "pods", "count/pods")


def _container(name, requests=None, limits=None, restart_policy=None):
    container = {"name": name, "image": "registry.invalid/none:1"}
    resources = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    if resources:
        container["resources"] = resources
    if restart_policy:
        container["restartPolicy"] = restart_policy
    return container


def _pod(ns, name, containers, init_containers=(), resources=None, runtime_class=None):
    spec = {"containers": list(containers), "nodeSelector": {"kvqlab.io/no-such-node": "true"}}
    if init_containers:
        spec["initContainers"] = list(init_containers)
    if resources:
        spec["resources"] = resources
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def _minor(r):
    return int("".join(ch for ch in r.get("/version")["minor"] if ch.isdigit()))


def test_pod_usage_is_what_the_quota_controller_charges(lab, r):
    ns = "qsem-" + secrets.token_hex(3)
    runtime_class = "kvq-overhead-" + secrets.token_hex(3)
    r.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    r.create("/apis/node.k8s.io/v1/runtimeclasses", {
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": runtime_class},
        "handler": "kvq", "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}}})
    r.create("/api/v1/namespaces/%s/resourcequotas" % ns, {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "all"},
        "spec": {"hard": {"requests.cpu": "100", "requests.memory": "100Gi", "limits.cpu": "100",
                          "limits.memory": "100Gi", "pods": "100", "count/pods": "100"}}})
    M.wait(lambda: (M.quota(r, ns, "all").get("status") or {}).get("hard"), 30, "the quota's status.hard")

    small = {"cpu": "100m", "memory": "64Mi"}
    pods = [
        _pod(ns, "two-containers", [_container("a", {"cpu": "200m", "memory": "128Mi"}, {"cpu": "1", "memory": "1Gi"}),
                                    _container("b", small, {"cpu": "300m", "memory": "256Mi"})]),
        # max(sum of containers + sidecars, each init container + the sidecars started before it)
        _pod(ns, "init-and-sidecar", [_container("main", small, small)],
             init_containers=[_container("sidecar", {"cpu": "50m", "memory": "32Mi"}, {"cpu": "50m", "memory": "32Mi"},
                                         restart_policy="Always"),
                              _container("setup", {"cpu": "2", "memory": "3Gi"}, {"cpu": "2", "memory": "3Gi"})]),
        # pod-level resources: counted instead of the containers' where the release keeps them (1.37)
        # (the containers carry their own too: 1.33 drops spec.resources, and its quota wants every container's)
        _pod(ns, "pod-level", [_container("a", small, {"cpu": "500m", "memory": "512Mi"}),
                               _container("b", small, {"cpu": "500m", "memory": "512Mi"})],
             resources={"requests": {"cpu": "1500m", "memory": "1536Mi"}, "limits": {"cpu": "3", "memory": "2Gi"}}),
        # the RuntimeClass admission plugin writes spec.overhead; quota adds it to the requests and the limits
        _pod(ns, "with-overhead", [_container("a", {"cpu": "400m", "memory": "200Mi"}, {"cpu": "400m", "memory": "1Gi"})],
             runtime_class=runtime_class),
    ]
    try:
        for pod in pods:
            r.create("/api/v1/namespaces/%s/pods" % ns, pod)
        stored = r.get("/api/v1/namespaces/%s/pods" % ns)["items"]
        by_name = dict((pod["metadata"]["name"], pod) for pod in stored)
        assert by_name["with-overhead"]["spec"]["overhead"] == {"cpu": "250m", "memory": "120Mi"}
        # which release is this: the pod-level test case says something only where the field is kept
        kept = bool(by_name["pod-level"]["spec"].get("resources"))
        assert kept == (_minor(r) >= 34), (_minor(r), by_name["pod-level"]["spec"])

        expected = {}
        for pod in stored:
            for name, value in Q.pod_usage(pod).items():
                if name in NAMES:
                    expected[name] = expected.get(name, 0) + value

        def used():
            status = M.quota(r, ns, "all").get("status") or {}
            return dict((name, parse_quantity(value)) for name, value in (status.get("used") or {}).items()
                        if name in NAMES)
        M.wait(lambda: used() == expected, 30, "status.used to equal the pods' pod_usage %s" % expected)
        if kept:
            # the pod-level values, not the containers' (100m + 100m)
            assert Q.pod_usage(by_name["pod-level"])["requests.cpu"] == parse_quantity("1500m")
    finally:
        r.request("DELETE", "/api/v1/namespaces/%s" % ns)
        r.request("DELETE", "/apis/node.k8s.io/v1/runtimeclasses/%s" % runtime_class)


def test_the_modules_connection_knows_the_api_servers_release(lab, r, user):
    """What the connection's discovery read of GET /version, as the least-privilege identity: the release whose
    quota rules the core follows for existing pods (quotas.pod_usage), on both ends of the tested range."""
    cluster = M.connect({"kubeconfig": str(user)})
    assert cluster.kubernetes_minor == _minor(r)
    assert cluster.server_version["gitVersion"] == r.get("/version")["gitVersion"]
