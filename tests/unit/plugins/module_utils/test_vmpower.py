# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Policy shutdown: the record of stopped VMs and the start/stop subresource calls, against a fake API."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import vmpower as VP
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    InputError,
    NotFoundError,
)

OPS = "kvquota-system"
CM_PATH = "/api/v1/namespaces/kvquota-system/configmaps"


def vmi(ns, name, vm_uid="uid-" + "vm", owner_kind="VirtualMachine", api_version="kubevirt.io/v1", controller=True,
        vm_name=None):
    return {"metadata": {"namespace": ns, "name": name, "ownerReferences": [
        {"apiVersion": api_version, "kind": owner_kind, "name": vm_name or name, "uid": vm_uid,
         "controller": controller}]}}


def vm_path(ns, name):
    return "/apis/kubevirt.io/v1/namespaces/%s/virtualmachines/%s" % (ns, name)


def vms(*keys):
    """VirtualMachine objects by path, for (namespace, name, uid) keys."""
    return dict((vm_path(ns, name), {"metadata": {"name": name, "uid": uid}}) for ns, name, uid in keys)


class FakeCluster(object):
    """Objects by path; records every write and subresource call in order."""

    def __init__(self, objects=None, running=()):
        self.objects = dict(objects or {})
        self.running = set(running)          # (ns, name) of VMs that run
        self.calls = []
        self.version = 10

    def exists(self, path, what):
        return json.loads(json.dumps(self.objects[path])) if path in self.objects else None

    def get_custom(self, group, version, plural, name, namespace=None):
        path = "/apis/%s/%s/namespaces/%s/%s/%s" % (group, version, namespace, plural, name)
        if path not in self.objects:
            raise NotFoundError("not found %s" % path)
        return self.objects[path]

    def _store(self, body):
        self.version += 1
        body = json.loads(json.dumps(body))
        body["metadata"]["resourceVersion"] = str(self.version)
        self.objects["%s/%s" % (CM_PATH, body["metadata"]["name"])] = body
        return body

    def create(self, path, body, what):
        self.calls.append(("create", body["metadata"]["name"]))
        if "%s/%s" % (path, body["metadata"]["name"]) in self.objects:
            raise ConflictError("already exists")
        return self._store(body)

    def replace(self, obj, what=None):
        current = self.objects["%s/%s" % (CM_PATH, obj["metadata"]["name"])]
        self.calls.append(("update", obj["metadata"]["name"]))
        if current["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise ConflictError("changed")
        return self._store(obj)

    def delete(self, path, what, resource_version=None):
        self.calls.append(("delete", path.rsplit("/", 1)[1], resource_version))
        del self.objects[path]

    def request(self, method, path, body=None, what=None):
        parts = path.split("/")
        ns, name, action = parts[5], parts[7], parts[8]
        assert (method, parts[2], parts[3]) == ("PUT", "subresources.kubevirt.io", "v1")
        self.calls.append((action, ns, name))
        if vm_path(ns, name) not in self.objects:
            raise NotFoundError("virtualmachines %s not found" % name)
        if (action == "stop") != ((ns, name) in self.running):
            raise ConflictError("VM is not running" if action == "stop" else "VM is already running")
        (self.running.discard if action == "stop" else self.running.add)((ns, name))


def record(cluster, node="node-1"):
    return json.loads(cluster.objects["%s/kvq-stopped-%s" % (CM_PATH, node)]["data"]["vms"])


def test_record_name_is_a_valid_configmap_name():
    assert VP.record_name("node-1") == "kvq-stopped-node-1"
    long_name = VP.record_name("n" * 253)
    assert len(long_name) <= 253 and long_name.startswith("kvq-stopped-n")
    assert long_name != VP.record_name("n" * 252 + "m")


def test_owner_vm_by_owner_reference_only():
    assert VP.owner_vm(vmi("t", "db", "u1")) == {"namespace": "t", "name": "db", "uid": "u1"}
    with pytest.raises(InputError) as err:
        VP.owner_vm(vmi("t", "bare", owner_kind="ReplicaSet"))
    assert "t/bare has no VirtualMachine" in str(err.value) and "skip" in err.value.fix


@pytest.mark.parametrize("ref", [{"api_version": "x.example/v1"}, {"controller": False}, {"api_version": "v1"},
                                 {"vm_name": "decoy"}])
def test_an_owner_reference_not_of_kubevirt_or_not_the_controller_is_no_vm(ref):
    """An ownerReference is the tenant's to write: a VirtualMachine of another API group (which the garbage
    collector cannot resolve, so the bare VMI stays), one that is not the controller, or another VM of the
    namespace (helper-35 finding 1: a stopped VM "decoy" named by a bare VMI; stopping decoy leaves the VMI
    running) is no VM to stop."""
    with pytest.raises(InputError) as err:
        VP.owner_vm(vmi("t", "ghost", **ref))
    assert "t/ghost has no VirtualMachine of kubevirt.io of its name" in str(err.value)


def test_a_vmi_whose_vm_does_not_exist_refuses_the_list_before_anything_is_stopped():
    """helper-34 finding 3: a tenant's bare VMI naming a VirtualMachine that does not exist (or another uid) after
    another namespace's VM in the list: nothing is recorded or stopped (before, the other VM was stopped, the
    ghost's stop failed, and the run failed on every re-run with the other VM left stopped)."""
    for objects in (vms(("a", "db", "u1")), vms(("a", "db", "u1"), ("t", "ghost", "other-uid"))):
        cluster = FakeCluster(objects, running={("a", "db"), ("t", "ghost")})
        with pytest.raises(InputError) as err:
            VP.stop(cluster, "node-1", [vmi("a", "db", "u1"), vmi("t", "ghost", "u9")])
        assert "t/ghost names VirtualMachine ghost with uid u9 as its owner, which does not exist" in str(err.value)
        assert cluster.calls == [] and ("a", "db") in cluster.running


def test_a_vm_deleted_between_the_check_and_its_stop_is_not_stopped_and_not_an_error():
    cluster = FakeCluster(vms(("t", "db", "u1")), running={("t", "db")})
    original = cluster.request

    def gone(method, path, body=None, what=None):
        cluster.objects.pop(vm_path("t", "db"), None)
        return original(method, path, body, what)
    cluster.request = gone
    out = VP.stop(cluster, "node-1", [vmi("t", "db", "u1")])
    assert out["stopped"] == [] and record(cluster) == [{"namespace": "t", "name": "db", "uid": "u1"}]


@pytest.mark.parametrize("text", ['{"v": 1}', "[1]", '[{"namespace": "t", "name": "db"}]', "not json"])
def test_a_bad_record_is_refused_with_its_name(text):
    with pytest.raises(InputError) as err:
        VP.parse_record({"metadata": {"name": "kvq-stopped-node-1"}, "data": {"vms": text}})
    assert "kvq-stopped-node-1" in str(err.value)


def test_stop_records_first_then_stops_and_start_restarts_and_forgets():
    cluster = FakeCluster({"/apis/kubevirt.io/v1/namespaces/t/virtualmachines/db":
                           {"metadata": {"name": "db", "uid": "u1"}}}, running={("t", "db")})
    out = VP.stop(cluster, "node-1", [vmi("t", "db", "u1")])
    assert cluster.calls == [("create", "kvq-stopped-node-1"), ("stop", "t", "db")]
    assert record(cluster) == [{"namespace": "t", "name": "db", "uid": "u1"}]
    assert out["stopped"] == out["vms"] == [{"namespace": "t", "name": "db", "uid": "u1"}]

    # a re-run after an interruption: already recorded, already stopped (409): no second record entry
    out = VP.stop(cluster, "node-1", [vmi("t", "db", "u1")])
    assert out["stopped"] == [] and record(cluster) == [{"namespace": "t", "name": "db", "uid": "u1"}]

    cluster.calls = []
    out = VP.start(cluster, "node-1")
    assert out["started"] == [{"namespace": "t", "name": "db", "uid": "u1"}] and out["gone"] == []
    assert cluster.calls[0] == ("start", "t", "db") and cluster.calls[1][:2] == ("delete", "kvq-stopped-node-1")
    assert ("t", "db") in cluster.running
    assert VP.start(cluster, "node-1") == {"vms": [], "started": [], "gone": [], "changed": False}


def test_a_second_node_set_is_merged_into_the_current_record():
    cluster = FakeCluster(vms(("t", "a", "ua"), ("t", "b", "ub")), running={("t", "a"), ("t", "b")})
    VP.stop(cluster, "node-1", [vmi("t", "a", "ua")])
    VP.stop(cluster, "node-1", [vmi("t", "b", "ub")])
    assert [vm["name"] for vm in record(cluster)] == ["a", "b"]
    assert ("update", "kvq-stopped-node-1") in cluster.calls


def test_a_vm_recreated_under_the_same_name_is_not_started():
    cluster = FakeCluster(vms(("t", "db", "u1")), running={("t", "db")})
    VP.stop(cluster, "node-1", [vmi("t", "db", "u1")])
    cluster.objects.update(vms(("t", "db", "someone-elses")))
    out = VP.start(cluster, "node-1")
    assert out["started"] == [] and out["gone"] == [{"namespace": "t", "name": "db", "uid": "u1"}]
    assert ("start", "t", "db") not in cluster.calls


def test_check_mode_writes_nothing():
    cluster = FakeCluster(vms(("t", "db", "u1")), running={("t", "db")})
    out = VP.stop(cluster, "node-1", [vmi("t", "db", "u1")], check_mode=True)
    assert out["changed"] and cluster.calls == []
