# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The headroom fence and DRA ResourceClaims (issue 27): the keys that pin a migration's claims (pure), the target
pods the batch runner lists by UID so that their claims may be created, and the VM stopped, named, when its target
pod's claims are not created (a template re-created larger, quota)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import batch_runner as br
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.executor_config import ExecutorConfig
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.migration_state import (
    RUNNING,
    Batch,
    RunRecord,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import fence as F

VMI_A = "4f0c1f0e-0000-4000-8000-00000000000a"
MIG_1 = "7d1e2f3a-0000-4000-8000-000000000001"
POD_1 = "9a9a9a9a-0000-4000-8000-000000000001"
POD_2 = "9a9a9a9a-0000-4000-8000-000000000002"
GPU = "gpu.example.com.deviceclass.resource.k8s.io/devices"
NIC = "nic.example.com.deviceclass.resource.k8s.io/devices"
COUNT = "count/resourceclaims.resource.k8s.io"
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), *([os.pardir] * 4))


# ---------------------------------------------------------------------------
# pure

def test_claims_value_pins_each_claim_by_its_entry_and_class():
    value = F.claims_value({"nic": {"nic.example.com": 1}, "gpu": {"gpu.example.com": 2, "nic.example.com": 1},
                            "plain": {}})
    assert value == "gpu:gpu.example.com=2,nic.example.com=1 nic:nic.example.com=1 plain:"
    assert F.parse_claims_value(value) == {"gpu": {"gpu.example.com": 2, "nic.example.com": 1},
                                           "nic": {"nic.example.com": 1}, "plain": {}}
    assert F.claims_value(None) is None and F.claims_value({}) is None     # no claim: nothing pinned
    for bad in ("", "gpu", "gpu:x", "gpu:x=0", "gpu:x=a", ":x=1", "gpu:x=1 gpu:x=1", "GPU:x=1"):
        assert F.parse_claims_value(bad) is None, bad
    for bad in ({"gpu": {"x": 0}}, {"gpu": {"x": True}}, {"G P U": {}}, {"gpu": {"x": 1.5}}, ["gpu"]):
        with pytest.raises(InputError):
            F.claims_value(bad)


def test_a_migrations_claims_are_listed_with_it_and_go_with_it():
    migrations = F.normalize_migrations("t", [{"name": "m", "uid": MIG_1, "vm": "vm-a", "claims": "gpu:gpu.x=2"}])
    data = F.fence_data({}, "t", {VMI_A: "vm-a"}, "n", migrations=migrations)
    assert data["claims.t.m"] == "gpu:gpu.x=2"
    data, skipped = F.add_claim_pods_data(data, "t", [{"uid": POD_1, "migration": "m"},
                                                      {"uid": POD_2, "migration": "not-listed"}])
    assert data["pod.t.%s" % POD_1] == "m" and skipped == [POD_2]
    assert F.fenced_claim_pods(data, "t") == {POD_1: "m"}
    # nothing listed for a namespace that is not fenced
    assert F.add_claim_pods_data(data, "u", [{"uid": POD_2, "migration": "m"}]) == (data, [POD_2])
    ended = F.end_migrations_data(data, "t", [{"name": "m", "uid": MIG_1}])
    assert not [k for k in ended if k.startswith(("claims.", "pod.", "mig."))]
    assert not [k for k in F.unfence_data(data, "t") if k.startswith(("claims.", "pod.", "ns.", "vmi."))]


def test_bad_claims_and_pods_name_what_is_wrong():
    with pytest.raises(InputError, match="migration t/m: claims 'gpu' is not"):
        F.normalize_migrations("t", [{"name": "m", "uid": MIG_1, "vm": "vm-a", "claims": "gpu"}])
    with pytest.raises(InputError, match="has no valid uid"):
        F.normalize_claim_pods("t", [{"uid": "not a uid", "migration": "m"}])
    with pytest.raises(InputError, match="names no valid migration"):
        F.normalize_claim_pods("t", [{"uid": POD_1, "migration": "M M"}])
    with pytest.raises(InputError, match="must be a list"):
        F.normalize_claim_pods("t", {"uid": POD_1})


def test_an_administrators_claim_controller_is_kept():
    data = F.fence_data({"kvquota.claim_controller": "system:kube-controller-manager"}, "t", {VMI_A: "vm-a"}, "n")
    assert data["kvquota.claim_controller"] == "system:kube-controller-manager"


def _policy():
    with open(os.path.join(ROOT, "roles", "install", "files", "fence.yml")) as fh:
        return yaml.safe_load(fh)["items"][0]["spec"]


def test_the_shipped_policy_fences_claims_with_the_words_the_runner_names():
    policy = _policy()
    rules = policy["matchConstraints"]["resourceRules"]
    # CREATE, and UPDATE for a change of a claim's owners (a source pod's claim orphaned would outlive it)
    assert {"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
            "resources": ["resourceclaims"]} in rules
    messages = " ".join(" ".join(v["messageExpression"].split()) for v in policy["validations"])
    assert F.CLAIM_REFUSAL in messages
    assert F.outdated({"spec": policy}) is None


def test_an_installed_policy_without_the_claim_check_is_named_outdated():
    policy = _policy()
    policy["variables"] = [v for v in policy["variables"] if v["name"] != F.CLAIM_CHECK_VARIABLE]
    assert "does not fence DRA ResourceClaims" in F.outdated({"spec": policy})


# ---------------------------------------------------------------------------
# the batch runner lists the target pod by UID, then stops the VM when its claims do not come

class _Cluster(object):
    def __init__(self, pods, templates=(), before=()):
        self.pods = pods
        self.templates = list(templates)
        self.before = list(before)      # the namespace's pods when the reservation fenced it
        self.deleted = []

    def list_pods(self, namespace=None, label_selector=None, field_selector=None):
        if label_selector is None:
            assert namespace == "t"
            return self.before
        assert (namespace, label_selector) == ("t", "kubevirt.io/migrationJobUID")
        return self.pods

    def list_custom(self, group, version, plural, namespace=None, **_kw):
        assert (group, plural, namespace) == ("resource.k8s.io", "resourceclaimtemplates", "t")
        return self.templates

    def delete(self, path, what):
        self.deleted.append(path.rsplit("/", 1)[1])


def _pod(name, uid, created, claims_made=()):
    return {"metadata": {"namespace": "t", "name": name, "uid": uid, "creationTimestamp": created,
                         "labels": {"kubevirt.io/migrationJobUID": "uid-a"},
                         "annotations": {"kubevirt.io/migrationJobName": "vm-a-kvq-1"},
                         "ownerReferences": [{"kind": "VirtualMachineInstance", "name": "vm-a", "uid": VMI_A,
                                              "controller": True}]},
            "spec": {"containers": [{"name": "compute"}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-tmpl"}]},
            "status": {"phase": "Pending", "resourceClaimStatuses": [
                {"name": entry, "resourceClaimName": "%s-%s-abcde" % (name, entry)} for entry in claims_made]}}


def _template(count):
    return {"metadata": {"namespace": "t", "name": "gpu-tmpl"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.example.com", "count": count}}]}}}}


def _runner(monkeypatch, cluster, now):
    config = ExecutorConfig.build("node-1", clock=lambda: now[0], token="260101000000")
    runner = br.BatchRunner(cluster, config, RunRecord(config, []))
    listed, ended = [], []
    monkeypatch.setattr(reservations, "admit_claim_pods", lambda _c, pods, *a, **kw: listed.append(
        [(p["namespace"], p["uid"], p["migration"]) for p in pods]) or [])
    monkeypatch.setattr(reservations, "end_migrations", lambda _c, migrations, *a, **kw: ended.append(
        [m["name"] for m in migrations]) or [])
    runner.pins = {("t", "vm-a"): {"charge": versioned.amounts({"limits.cpu": 1, GPU: 2, COUNT: 1}),
                                   "what": "the planned", "uid": VMI_A, "claims": {"gpu": {"gpu.example.com": 2}}}}
    runner.targets_checked.add("uid-a")      # the pod's size is not what these tests look at
    batch = Batch(0, 1, [("t", "vm-a")], "node-1-b0")
    batch.vms = [("t", "vm-a")]
    batch.state, batch.vms, batch.launched = RUNNING, [("t", "vm-a")], 0.0
    batch.migrations = [{"namespace": "t", "vm": "vm-a", "reused": False, "name": "vm-a-kvq-1", "uid": "uid-a"}]
    runner._record_reservation(batch, {"fence": [{"namespace": "t"}], "quotas": []})
    seen = {("t", "vm-a-kvq-1"): {"metadata": {"namespace": "t", "name": "vm-a-kvq-1", "uid": "uid-a",
                                               "creationTimestamp": "2026-11-28T10:00:00Z"},
                                  "spec": {"vmiName": "vm-a"}, "status": {"phase": "Scheduling"}}}
    return runner, batch, seen, listed, ended


def test_the_fence_entry_of_a_migration_pins_its_claims_devices(monkeypatch):
    runner, batch, _seen, _listed, _ended = _runner(monkeypatch, _Cluster([]), [0.0])
    assert runner._fence_entry(batch.migrations[0])["claims"] == "gpu:gpu.example.com=2"


def test_only_the_pod_created_since_the_migration_is_listed_and_it_is_done_once_its_claims_exist(monkeypatch):
    decoy = _pod("decoy", POD_2, "2026-11-28T09:59:59Z")         # the tenant's older pod, relabelled
    real = _pod("virt-launcher-vm-a-xyz", POD_1, "2026-11-28T10:00:00Z")
    cluster = _Cluster([decoy, real])
    now = [1.0]
    runner, batch, seen, listed, _ended = _runner(monkeypatch, cluster, now)
    runner._check_target_pods(batch, seen)
    assert listed == [[("t", POD_1, "vm-a-kvq-1")]]
    real["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "virt-launcher-vm-a-xyz-gpu-1"}]
    now[0] = 100.0
    runner._check_target_pods(batch, seen)
    assert "uid-a" in runner.claims_done and cluster.deleted == [] and listed == [[("t", POD_1, "vm-a-kvq-1")]]


def test_a_claim_not_created_in_time_stops_the_vm_named_with_the_template_that_grew(monkeypatch):
    real = _pod("virt-launcher-vm-a-xyz", POD_1, "2026-11-28T10:00:01Z")
    cluster = _Cluster([real], templates=[_template(4)])
    now = [1.0]
    runner, batch, seen, listed, ended = _runner(monkeypatch, cluster, now)
    runner._check_target_pods(batch, seen)
    now[0] = 1.0 + br.CLAIM_GRACE_SECONDS - 1
    runner._check_target_pods(batch, seen)
    assert cluster.deleted == [] and listed == [[("t", POD_1, "vm-a-kvq-1")]]
    now[0] = 1.0 + br.CLAIM_GRACE_SECONDS
    runner._check_target_pods(batch, seen)
    assert cluster.deleted == ["vm-a-kvq-1"] and ended == [["vm-a-kvq-1"]]
    reason = runner.left_out[("t", "vm-a")]
    assert "no ResourceClaim for gpu" in reason and "stopped after its migration was created" in reason
    assert "ResourceClaimTemplate t/gpu-tmpl of claim gpu now asks for gpu.example.com=4, more than the run " \
           "planned (gpu.example.com=2)" in reason


def test_a_claim_refused_within_its_pin_names_the_pods_events(monkeypatch):
    cluster = _Cluster([_pod("virt-launcher-vm-a-xyz", POD_1, "2026-11-28T10:00:01Z")], templates=[_template(2)])
    now = [1.0]
    runner, batch, seen, _listed, _ended = _runner(monkeypatch, cluster, now)
    runner._check_target_pods(batch, seen)
    now[0] = 1.0 + br.CLAIM_GRACE_SECONDS
    runner._check_target_pods(batch, seen)
    assert "quota admission or another admission check refused it (kubectl describe pod -n t " \
           "virt-launcher-vm-a-xyz" in runner.left_out[("t", "vm-a")]


def test_two_pods_created_since_the_migration_are_not_told_apart_and_neither_is_listed(monkeypatch):
    cluster = _Cluster([_pod("virt-launcher-vm-a-xyz", POD_1, "2026-11-28T10:00:00Z"),
                        _pod("lookalike", POD_2, "2026-11-28T10:00:00Z")])
    now = [1.0]
    runner, batch, seen, listed, _ended = _runner(monkeypatch, cluster, now)
    runner._check_target_pods(batch, seen)
    assert listed == []
    now[0] = 1.0 + br.CLAIM_GRACE_SECONDS
    runner._check_target_pods(batch, seen)
    assert "two pods present as its target" in runner.left_out[("t", "vm-a")]


def test_a_target_pod_without_template_claims_needs_nothing_listed(monkeypatch):
    pod = _pod("virt-launcher-vm-a-xyz", POD_1, "2026-11-28T10:00:00Z")
    pod["spec"]["resourceClaims"] = [{"name": "shared", "resourceClaimName": "theirs"}]
    pod["spec"]["nodeName"] = "node-2"
    runner, batch, seen, listed, _ended = _runner(monkeypatch, _Cluster([pod]), [1.0])
    runner._check_target_pods(batch, seen)
    assert listed == [] and "uid-a" in runner.claims_done


def test_a_target_pod_the_fence_keeps_from_its_extended_resource_claim_stops_its_vm(monkeypatch):
    """DRAExtendedResource: kube-scheduler creates the claim of an extended resource a DeviceClass maps; the fence
    refuses it, the scheduler says so in the pod's PodScheduled condition: the VM is stopped, named. A pod pending
    for anything else is not the run's to judge."""
    fenced_out = _pod("virt-launcher-vm-a-xyz", POD_1, "2026-11-28T10:00:00Z")
    fenced_out["spec"]["resourceClaims"] = []
    fenced_out["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulerError",
                                           "message": "running PreBind plugin \"DynamicResources\": ... denied request: "
                                                      "kvquota.maintenance: namespace t is fenced ..."}]
    now = [1.0]
    runner, batch, seen, listed, _ended = _runner(monkeypatch, _Cluster([fenced_out]), now)
    said = []
    runner.record.say = said.append
    runner._check_target_pods(batch, seen)
    assert listed == [] and "uid-a" not in runner.claims_done
    assert said == []       # one pod, nothing to list: no word of two pods
    now[0] = 1.0 + br.CLAIM_GRACE_SECONDS
    runner._check_target_pods(batch, seen)
    assert "extended resource backed by DRA (DRAExtendedResource)" in runner.left_out[("t", "vm-a")]

    elsewhere = _pod("virt-launcher-vm-a-xyz", POD_1, "2026-11-28T10:00:00Z")
    elsewhere["spec"]["resourceClaims"] = []
    elsewhere["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "message": "0/3 nodes fit"}]
    now = [1.0]
    runner, batch, seen, _listed, _ended = _runner(monkeypatch, _Cluster([elsewhere]), now)
    runner._check_target_pods(batch, seen)
    now[0] = 1.0 + br.CLAIM_GRACE_SECONDS
    runner._check_target_pods(batch, seen)
    assert runner.left_out == {} and "uid-a" in runner.claims_done


def test_a_pod_that_existed_when_the_namespace_was_fenced_is_never_listed(monkeypatch):
    """The tenant's decoy, made before the fence and dressed up as the target pod of a migration the run follows
    (created earlier than the decoy): left out, even as the only candidate; a pod owned by another VMI UID too."""
    decoy = _pod("decoy", POD_2, "2026-11-28T10:00:05Z")
    cluster = _Cluster([decoy], before=[decoy])
    now = [1.0]
    runner, batch, seen, listed, _ended = _runner(monkeypatch, cluster, now)
    runner._check_target_pods(batch, seen)
    assert listed == [] and runner.pre_fence_pods == {"t": {POD_2}}
    other = _pod("virt-launcher-vm-a-xyz", POD_1, "2026-11-28T10:00:06Z")
    other["metadata"]["ownerReferences"][0]["uid"] = "another-vmi"
    cluster.pods = [decoy, other]
    runner._check_target_pods(batch, seen)
    assert listed == []
    real = _pod("virt-launcher-vm-a-abc", "9a9a9a9a-0000-4000-8000-000000000003", "2026-11-28T10:00:07Z")
    cluster.pods = [decoy, other, real]
    runner._check_target_pods(batch, seen)
    assert listed == [[("t", "9a9a9a9a-0000-4000-8000-000000000003", "vm-a-kvq-1")]]
