# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Object paths and error mapping; no request is made (auth and client configuration: test_connect.py).

API behaviour (errors, conditional writes, events) is tested against a real apiserver in the lab.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import kubernetes
import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client import cluster as C
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
)


# What the API server's discovery lists hold (kubectl get --raw /api/v1, /apis/coordination.k8s.io/v1), trimmed
DISCOVERY = {
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace"},
        {"name": "namespaces/status", "singularName": "", "namespaced": False, "kind": "Namespace"},
        {"name": "resourcequotas", "singularName": "resourcequota", "namespaced": True, "kind": "ResourceQuota"},
        {"name": "configmaps", "singularName": "configmap", "namespaced": True, "kind": "ConfigMap"},
        {"name": "endpoints", "singularName": "endpoints", "namespaced": True, "kind": "Endpoints"},
    ]},
    "/apis/coordination.k8s.io/v1": {"kind": "APIResourceList", "groupVersion": "coordination.k8s.io/v1",
                                     "resources": [{"name": "leases", "singularName": "lease", "namespaced": True,
                                                    "kind": "Lease"}]},
    "/apis/kubevirt.io/v1": {"kind": "APIResourceList", "groupVersion": "kubevirt.io/v1", "resources": [
        {"name": "virtualmachineinstancemigrations", "singularName": "virtualmachineinstancemigration",
         "namespaced": True, "kind": "VirtualMachineInstanceMigration"}]},
}


@pytest.fixture
def discovering():
    """A Cluster whose requests answer the discovery lists above (and record what was asked)."""
    cluster = C.Cluster(kubernetes.client.ApiClient(kubernetes.client.Configuration(host="https://h")))
    asked = []

    def request(method, path, **kwargs):
        asked.append((method, path))
        return DISCOVERY[path]
    cluster.request = request
    cluster.asked = asked
    return cluster


def test_object_paths_come_from_discovery(discovering):
    assert discovering.object_path({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}) == \
        "/api/v1/namespaces/a"
    assert discovering.object_path({"apiVersion": "v1", "kind": "ResourceQuota",
                                    "metadata": {"name": "q", "namespace": "a"}}) == \
        "/api/v1/namespaces/a/resourcequotas/q"
    assert discovering.object_path({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                    "metadata": {"name": "l", "namespace": "a"}}) == \
        "/apis/coordination.k8s.io/v1/namespaces/a/leases/l"
    # plurals no rule derives from the kind: "endpoints", not "endpointss"
    assert discovering.object_path({"apiVersion": "v1", "kind": "Endpoints",
                                    "metadata": {"name": "e", "namespace": "a"}}) == "/api/v1/namespaces/a/endpoints/e"
    assert discovering.object_path({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                                    "metadata": {"name": "m", "namespace": "a"}}) == \
        "/apis/kubevirt.io/v1/namespaces/a/virtualmachineinstancemigrations/m"
    # one request per group/version for the Cluster's life
    assert discovering.asked == [("GET", "/api/v1"), ("GET", "/apis/coordination.k8s.io/v1"),
                                 ("GET", "/apis/kubevirt.io/v1")]


def test_unknown_kind_is_one_clear_error(discovering):
    with pytest.raises(InputError) as err:
        discovering.object_path({"apiVersion": "v1", "kind": "Nothing", "metadata": {"name": "x"}})
    assert str(err.value).startswith("the API server serves no kind Nothing in v1")
    assert "kubectl api-resources" in str(err.value)


def test_unconditional_write_is_refused_before_any_request(discovering):
    with pytest.raises(InputError, match="refusing an unconditional write of ResourceQuota q in namespace a"):
        discovering.replace({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "a"}})
    assert discovering.asked == []


class _Refusal(Exception):
    """What map_error reads from an ApiException: status, reason, body."""

    def __init__(self, status, message):
        super(_Refusal, self).__init__(message)
        self.status = status
        self.reason = "Forbidden"
        self.body = '{"kind": "Status", "message": %s}' % json.dumps(message)


def test_admission_policy_refusal_is_not_reported_as_missing_rbac():
    message = ("resourcequotas \"default-c7k2p\" is forbidden: ValidatingAdmissionPolicy "
               "'kvqlab-rancher-quota-lockdown' with binding 'kvqlab-rancher-quota-lockdown' denied request: "
               "resource quotas labelled ... are managed by Rancher")
    err = C.map_error(_Refusal(403, message), "update resourcequota default-c7k2p in namespace c-tenant")
    assert not isinstance(err, ForbiddenError)
    assert str(err).startswith("an admission policy refused to update resourcequota default-c7k2p in namespace "
                               "c-tenant: resourcequotas")
    assert "kvquota.maintenance.install" not in str(err) and "Fix: read the policy's message" in str(err)
    rbac = C.map_error(_Refusal(403, 'resourcequotas "q" is forbidden: User "u" cannot update resource'), "update q")
    assert isinstance(rbac, ForbiddenError) and "kvquota.maintenance.install" in str(rbac)


# ---------------------------------------------------------------------------
# the one conflict loop

def test_retry_on_conflict_starts_again_until_a_try_goes_through():
    tries, pauses = [], []

    def attempt(number):
        tries.append(number)
        if number < 2:
            raise ConflictError("the object has been modified")
        return "written"
    assert C.retry_on_conflict(attempt, attempts=5, what="update q", sleep=pauses.append) == "written"
    assert tries == [0, 1, 2]
    assert len(pauses) == 2 and all(0 < pause <= 1.0 for pause in pauses)


def test_retry_on_conflict_gives_up_with_one_clear_error():
    def attempt(number):
        raise ConflictError("conflict %d" % number)
    with pytest.raises(ConflictError) as err:
        C.retry_on_conflict(attempt, attempts=3, what="write ns/q", sleep=lambda _seconds: None)
    assert str(err.value).startswith("gave up trying to write ns/q after 3 conflicting concurrent writes (conflict 2")
    assert "Fix: re-run" in str(err.value)


def test_retry_on_conflict_lets_other_errors_through_at_once():
    tries = []

    def attempt(number):
        tries.append(number)
        raise ForbiddenError("forbidden")
    with pytest.raises(ForbiddenError):
        C.retry_on_conflict(attempt, sleep=lambda _seconds: None)
    assert tries == [0]


def test_conditional_update_recomputes_from_a_fresh_read():
    reads, writes = iter([{"v": 1}, {"v": 2}]), []

    def write(new):
        writes.append(new)
        if len(writes) == 1:
            raise ConflictError("changed meanwhile")
        return new
    written, current = C.conditional_update(lambda: next(reads), lambda cur: {"v": cur["v"] + 10}, write,
                                            sleep=lambda _seconds: None)
    assert writes == [{"v": 11}, {"v": 12}] and written == {"v": 12} and current == {"v": 2}
    assert C.conditional_update(lambda: {"v": 1}, lambda cur: None, write) == (None, {"v": 1})
