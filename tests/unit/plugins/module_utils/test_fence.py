# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The headroom fence: the ConfigMap data it writes (pure), and fence/unfence's conditional writes on a fake API."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import fence as F
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    InputError,
    NotFoundError,
)

UID_A = "4f0c1f0e-0000-4000-8000-00000000000a"
UID_B = "4f0c1f0e-0000-4000-8000-00000000000b"
CM_PATH = "/api/v1/namespaces/kvquota-system/configmaps/kvq-fence"


class FakeCluster(object):
    """The few Cluster methods fence.py uses, over a dict of path -> object, with resourceVersions, 409s on
    stale writes, and an optional concurrent writer that changes the object before the next write."""

    def __init__(self, objects=None, interfere=None):
        self.objects = copy.deepcopy(objects or {})
        self.version = 10
        self.writes = []
        self.interfere = list(interfere or [])

    def _stamp(self, obj):
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(obj)

    def _meddle(self):
        if self.interfere:
            self.interfere.pop(0)(self)

    def get(self, path, what):
        if path not in self.objects:
            raise NotFoundError("cannot %s: not found" % what)
        return copy.deepcopy(self.objects[path])

    def exists(self, path, what):
        try:
            return self.get(path, what)
        except NotFoundError:
            return None

    def create(self, path, body, what):
        self._meddle()
        full = path + "/" + body["metadata"]["name"]
        self.writes.append(("create", full))
        if full in self.objects:
            raise ConflictError("conflict while trying to %s: already exists" % what)
        self.objects[full] = copy.deepcopy(body)
        return self._stamp(self.objects[full])

    def replace(self, obj, what=None):
        self._meddle()
        meta = obj["metadata"]
        full = "/api/v1/namespaces/%s/configmaps/%s" % (meta["namespace"], meta["name"])
        self.writes.append(("replace", full))
        current = self.objects.get(full)
        if current is None or current["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            raise ConflictError("conflict while trying to %s" % what)
        self.objects[full] = copy.deepcopy(obj)
        return self._stamp(self.objects[full])


def configmap(data):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "kvq-fence", "namespace": "kvquota-system", "resourceVersion": "3"}, "data": data}


# ---------------------------------------------------------------------------
# pure

# what a ConfigMap the collection wrote keeps when nothing is fenced: the two controller identities
CONTROLLERS = {"kvquota.controller": F.DEFAULT_CONTROLLER, "kvquota.claim_controller": F.DEFAULT_CLAIM_CONTROLLER}


def test_controller_identity_per_platform():
    assert F.controller_identity("kubevirt") == "system:serviceaccount:kubevirt:kubevirt-controller"
    assert F.controller_identity("harvester-system") == \
        "system:serviceaccount:harvester-system:kubevirt-controller"
    assert F.controller_identity("openshift-cnv") == "system:serviceaccount:openshift-cnv:kubevirt-controller"
    with pytest.raises(InputError, match="not a namespace name"):
        F.controller_identity("Kube Virt")


def test_fence_data_keys_and_controller_default():
    data = F.fence_data({}, "tenant-a", {UID_A: "vm-a"}, "reserved until X")
    # the resourceclaim controller as kube-controller-manager names its client (cmd/kube-controller-manager/app/
    # resource.go: NewClient("resource-claim-controller"), a ServiceAccount in kube-system)
    assert data == {"kvquota.controller": "system:serviceaccount:kubevirt:kubevirt-controller",
                    "kvquota.claim_controller": "system:serviceaccount:kube-system:resource-claim-controller",
                    "ns.tenant-a": "reserved until X",
                    "vmi.tenant-a.%s" % UID_A: "vm-a"}


def test_fence_data_keeps_an_administrators_controller_unless_told():
    start = {"kvquota.controller": "system:serviceaccount:openshift-cnv:kubevirt-controller"}
    kept = F.fence_data(start, "t", {}, "n")
    assert kept["kvquota.controller"] == "system:serviceaccount:openshift-cnv:kubevirt-controller"
    told = F.fence_data(start, "t", {}, "n", controller="system:serviceaccount:harvester-system:kubevirt-controller")
    assert told["kvquota.controller"] == "system:serviceaccount:harvester-system:kubevirt-controller"
    assert start == {"kvquota.controller": "system:serviceaccount:openshift-cnv:kubevirt-controller"}  # not changed


def test_keys_of_two_namespaces_do_not_mix():
    data = F.fence_data({}, "a", {UID_A: "vm-a"}, "n1")
    data = F.fence_data(data, "a-b", {UID_B: "vm-b"}, "n2")
    assert F.fenced_vmis(data, "a") == {UID_A: "vm-a"}
    assert F.fenced_vmis(data, "a-b") == {UID_B: "vm-b"}
    assert F.fenced_namespaces(data) == {"a": {"note": "n1", "vmis": {UID_A: "vm-a"}},
                                         "a-b": {"note": "n2", "vmis": {UID_B: "vm-b"}}}


def test_unfence_data_removes_the_namespace_with_its_last_vmi():
    data = F.fence_data({}, "t", {UID_A: "vm-a", UID_B: "vm-b"}, "n")
    one = F.unfence_data(data, "t", {UID_A})
    assert F.fenced_vmis(one, "t") == {UID_B: "vm-b"} and "ns.t" in one
    none = F.unfence_data(one, "t", {UID_B})
    assert none == CONTROLLERS
    assert F.unfence_data(data, "t") == CONTROLLERS
    assert F.unfence_data(data, "other") == data


def test_normalize_vmis_accepts_objects_and_refuses_what_it_cannot_match():
    assert F.normalize_vmis([{"name": "vm-a", "uid": UID_A},
                             {"metadata": {"name": "vm-b", "uid": UID_B, "namespace": "t"}}]) == \
        {UID_A: "vm-a", UID_B: "vm-b"}
    with pytest.raises(InputError, match="no valid uid"):
        F.normalize_vmis([{"name": "vm-a"}])
    with pytest.raises(InputError, match="not a valid object name"):
        F.normalize_vmis([{"name": "VM A", "uid": UID_A}])
    with pytest.raises(InputError, match="list of"):
        F.normalize_vmis({"name": "vm-a", "uid": UID_A})
    with pytest.raises(InputError, match="given for two VMIs"):
        F.normalize_vmis([{"name": "vm-a", "uid": UID_A}, {"name": "vm-b", "uid": UID_A}])


def test_fence_note_names_the_window_and_who_to_ask():
    assert F.fence_note("2026-01-01T00:00:00Z", "2026-01-01T02:00:00Z", "platform team, #infra") == \
        "reserved from 2026-01-01T00:00:00Z until 2026-01-01T02:00:00Z at the latest; contact: platform team, #infra"
    assert F.fence_note(expires="E") == "reserved until E at the latest"
    assert F.fence_note() == "reservation in progress"


# ---------------------------------------------------------------------------
# API (fake)

def test_fence_creates_the_configmap_with_labels():
    cluster = FakeCluster()
    result = F.fence(cluster, "kvquota-system", "tenant-a", [{"name": "vm-a", "uid": UID_A}], note="window")
    assert result["changed"] and result["vmis"] == {UID_A: "vm-a"}
    created = cluster.objects[CM_PATH]
    assert created["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kvquota.maintenance",
                                             "kvquota.maintenance/fence": "true"}
    assert created["data"]["ns.tenant-a"] == "window"
    assert cluster.writes == [("create", CM_PATH)]
    again = F.fence(cluster, "kvquota-system", "tenant-a", [{"name": "vm-a", "uid": UID_A}], note="window")
    assert not again["changed"] and cluster.writes == [("create", CM_PATH)]


def test_check_mode_reports_and_writes_nothing():
    cluster = FakeCluster({CM_PATH: configmap(dict(CONTROLLERS))})
    result = F.fence(cluster, "kvquota-system", "t", [{"name": "vm-a", "uid": UID_A}], note="n", check_mode=True)
    assert result["changed"] and result["added"] == ["ns.t", "vmi.t.%s" % UID_A]
    assert cluster.writes == [] and cluster.objects[CM_PATH]["data"] == CONTROLLERS
    gone = F.unfence(cluster, "kvquota-system", "t", check_mode=True)
    assert not gone["changed"] and cluster.writes == []


def test_write_is_conditional_and_retried_against_a_concurrent_change():
    def other_run_fences_b(cluster):
        obj = cluster.objects[CM_PATH]
        obj["data"]["ns.b"] = "other run"
        obj["data"]["vmi.b.%s" % UID_B] = "vm-b"
        cluster._stamp(obj)

    cluster = FakeCluster({CM_PATH: configmap({"kvquota.controller": F.DEFAULT_CONTROLLER})},
                          interfere=[other_run_fences_b])
    F.fence(cluster, "kvquota-system", "a", [{"name": "vm-a", "uid": UID_A}], note="n")
    data = cluster.objects[CM_PATH]["data"]
    # the first PUT carried the old resourceVersion and lost; the retry kept the other run's namespace
    assert [w[0] for w in cluster.writes] == ["replace", "replace"]
    assert F.fenced_vmis(data, "a") == {UID_A: "vm-a"} and F.fenced_vmis(data, "b") == {UID_B: "vm-b"}


def test_two_creators_race_and_both_namespaces_end_up_fenced():
    def other_run_creates(cluster):
        cluster.objects[CM_PATH] = configmap({"kvquota.controller": F.DEFAULT_CONTROLLER, "ns.b": "x"})

    cluster = FakeCluster(interfere=[other_run_creates])
    F.fence(cluster, "kvquota-system", "a", [], note="n")
    assert [w[0] for w in cluster.writes] == ["create", "replace"]
    assert set(F.fenced_namespaces(cluster.objects[CM_PATH]["data"])) == {"a", "b"}


def test_unfence_some_then_all():
    cluster = FakeCluster()
    F.fence(cluster, "kvquota-system", "t", [{"name": "vm-a", "uid": UID_A}, {"name": "vm-b", "uid": UID_B}],
            note="n")
    partly = F.unfence(cluster, "kvquota-system", "t", [{"name": "vm-a", "uid": UID_A}])
    assert partly["changed"] and partly["fenced"] and partly["vmis"] == {UID_B: "vm-b"}
    done = F.unfence(cluster, "kvquota-system", "t")
    assert done["changed"] and not done["fenced"] and done["removed"] == ["ns.t", "vmi.t.%s" % UID_B]
    assert F.fences(cluster, "kvquota-system") == {}
    assert not F.unfence(cluster, "kvquota-system", "t")["changed"]


def test_unfence_without_configmap_is_a_no_op():
    cluster = FakeCluster()
    assert F.unfence(cluster, "kvquota-system", "t") == {"changed": False, "namespace": "t", "vmis": {},
                                                         "fenced": False, "added": [], "removed": []}
    assert cluster.writes == []


def test_bad_inputs_name_problem_and_fix():
    cluster = FakeCluster()
    with pytest.raises(InputError, match="operator_namespace 'Kvquota System' is not a namespace name. Fix: give"):
        F.fence(cluster, "Kvquota System", "t", [])
    with pytest.raises(InputError, match="not a username"):
        F.fence(cluster, "kvquota-system", "t", [], controller="two words")
    assert cluster.writes == []


def test_installed():
    policy = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/kvquota-headroom-fence"
    binding = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/kvquota-headroom-fence"
    bound = {"metadata": {"name": "kvquota-headroom-fence"},
             "spec": {"paramRef": {"name": "kvq-fence", "namespace": "kvquota-system"}}}
    assert not F.installed(FakeCluster())
    assert not F.installed(FakeCluster({policy: {"metadata": {}}}))
    assert F.installed(FakeCluster({policy: {"metadata": {}}, binding: bound}))
    with pytest.raises(InputError, match="reads configmap kvquota-system/kvq-fence, not ops/kvq-fence"):
        F.installed(FakeCluster({policy: {"metadata": {}}, binding: bound}), "ops")


def test_an_installed_fence_from_an_older_fence_yml_is_named_outdated():
    import os
    import yaml
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), *([os.pardir] * 4))
    with open(os.path.join(root, "roles", "install", "files", "fence.yml")) as fh:
        shipped = yaml.safe_load(fh)["items"][0]
    assert F.outdated(shipped) is None
    older = {"spec": {"variables": [v for v in shipped["spec"]["variables"] if v["name"] != "withinPin"]}}
    assert "apply it again: as an administrator, ansible-playbook kvquota.maintenance.install" in F.outdated(older)
