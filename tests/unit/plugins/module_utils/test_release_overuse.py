# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""No expansion outlives its migrations (issue 24, items 4 and 5).

Once a reservation's migrations are final and its source pods gone, release restores the quota's base even when
the namespace now uses more than that (a VM that came back bigger, a pod or PVC a tenant created during the
reservation, a migration the run did not create): Kubernetes keeps a quota below its usage. The over-use is
reported (result "overuse", a warning naming the objects), never kept as headroom. Where the quota's owner refuses
a value below usage (Harvester's namespace webhook), the lowest value it accepts is written and the rest stays in
the ledger as a remainder that the reaper gives back once usage dropped. Quota-controller lag is no over-use: the
release waits for it. Uses the in-memory API server of test_state_protocol.py, with the tenant's pods, PVCs, VMIs
and migrations added.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import json

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import harvester
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import rancher as rancher_owner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger as L
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import release_readiness as RR
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations as R
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import reservation_calls as V
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    KvquotaError,
    NotFoundError,
    WaitTimeoutError,
)

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_state_protocol import (
    OPERATOR,
    RANCHER_ANNOTATION,
    TARGET,
    Clock,
    Crash,
    FakeApi,
    cluster_objects,
)

Gi = 1024 ** 3
NS = "tenant-a"
QUOTA_PATH = "/api/v1/namespaces/tenant-a/resourcequotas/compute"
NAMESPACE_PATH = "/api/v1/namespaces/tenant-a"
PVC_PATH = "/api/v1/namespaces/tenant-a/persistentvolumeclaims"
RID = "node-1-b0"
BEFORE = "2024-12-31T00:00:00Z"     # before the reservation (the clock starts at 2025-01-01T00:00:00Z)
DURING = "2025-01-01T00:00:30Z"     # during it
REFS = {"vms": [{"namespace": NS, "name": "vm-1", "uid": "vmi-1"}],
        "migrations": [{"namespace": NS, "name": "vm-1-kvq", "uid": "mig-1"}],
        "sourcePods": [{"namespace": NS, "name": "virt-launcher-vm-1-src", "uid": "pod-src"}]}


def pod(name, memory, created, owner=None, phase="Running", node="n2", uid=None, managers=()):
    meta = {"name": name, "namespace": NS, "uid": uid or "uid-" + name, "creationTimestamp": created}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                    "name": owner[0], "uid": owner[1], "controller": True}]
    if managers:
        meta["managedFields"] = [{"manager": m, "operation": "Update", "time": created} for m in managers]
    return {"metadata": meta, "status": {"phase": phase},
            "spec": {"nodeName": node, "containers": [{"name": "compute", "resources": {
                "requests": {"memory": memory, "cpu": "100m"}, "limits": {"memory": memory, "cpu": "100m"}}}]}}


def vmi(name, uid, node="n2"):
    return {"metadata": {"name": name, "namespace": NS, "uid": uid}, "status": {"nodeName": node, "phase": "Running"}}


def vmim(name, uid, vmi_name, phase, created=DURING, managers=()):
    meta = {"name": name, "namespace": NS, "uid": uid, "creationTimestamp": created}
    if managers:
        meta["managedFields"] = [{"manager": m, "operation": "Update", "time": created} for m in managers]
    return {"metadata": meta, "spec": {"vmiName": vmi_name}, "status": {"phase": phase}}


class TenantApi(FakeApi):
    """FakeApi with the tenant's pods, VMIs and migrations (PVCs are objects under PVC_PATH); status.used of the
    quota is set by the test (the quota controller, lagging or not)."""

    def __init__(self, objects, harvester=False, clock=None):
        super(TenantApi, self).__init__(objects, clock=clock)
        self.pods, self.vmis, self.vmims = [], [], []
        self.harvester = harvester
        self.events = []

    def list_pods(self, namespace=None, label_selector=None, field_selector=None):
        return copy.deepcopy(self.pods)

    def get_pod(self, namespace, name):
        for item in self.pods:
            if item["metadata"]["name"] == name:
                return copy.deepcopy(item)
        raise NotFoundError("pod %s not found" % name)

    def _custom(self, plural):
        return {"virtualmachineinstances": self.vmis, "virtualmachineinstancemigrations": self.vmims}.get(plural, [])

    def list_custom(self, group, version, plural, namespace=None, label_selector=None):
        return copy.deepcopy(self._custom(plural))

    def get_custom(self, group, version, plural, name, namespace=None):
        for item in self._custom(plural):
            if item["metadata"]["name"] == name:
                return copy.deepcopy(item)
        raise NotFoundError("no %s %s" % (plural, name))

    def create_event(self, involved, reason, message, event_type="Normal", action="Update", namespace=None):
        self.events.append((reason, message))
        return {}

    def facts(self, refresh=False):
        return {"harvester": self.harvester, "rancher_projects": False, "aaq": False, "kubevirt": True}

    def replace(self, obj, what=None):
        if self.harvester and obj.get("kind") == "Namespace":
            # Harvester's namespace webhook: no field.cattle.io/resourceQuota below the quota's status.used
            limit = rancher_owner.rancher_limit(obj)
            used = self.objects[QUOTA_PATH]["status"]["used"]
            for name, value in limit.items():
                if name in used and L._value(value, name) < L._value(used[name], name):
                    raise KvquotaError("admission webhook \"validator.harvesterhci.io\" denied the request: %s %s "
                                       "is below the namespace's usage %s" % (name, value, used[name]), "")
        return super(TenantApi, self).replace(obj, what)

    def set_used(self, **values):
        quota = self.objects[QUOTA_PATH]
        quota["status"]["used"] = dict(quota["status"].get("used") or {}, **values)
        self._bump(quota)


def reserve(api, clock, delta=None, refs=None):
    return V.reserve(api, RID, {TARGET: delta or {"limits.memory": "2Gi"}}, "job", "drain", 600, clock=clock,
                     sleep=lambda s: None, rancher_sync_timeout=0, lock={"holder": "job-1", "wait_timeout": 0},
                     refs=REFS if refs is None else refs)


def release(api, clock, rid=RID):
    return V.release(api, rid, wait_for_pods=False, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0,
                     lock={"holder": "job-1", "wait_timeout": 0})


def ledger_of(objects):
    for key, obj in objects.items():
        if key.startswith("/api/v1/namespaces/%s/configmaps/" % OPERATOR) and "ledger" in (obj.get("data") or {}):
            return json.loads(obj["data"]["ledger"])
    return None


def migrated(api, target_memory, source_phase="Succeeded"):
    """vm-1 migrated (its migration Succeeded) from a 1Gi source pod to a target pod of target_memory; another
    VM's pod of 6Gi was there before the reservation."""
    api.vmis = [vmi("vm-1", "vmi-1"), vmi("vm-2", "vmi-2", node="n3")]
    api.vmims = [vmim("vm-1-kvq", "mig-1", "vm-1", "Succeeded")]
    api.pods = [pod("virt-launcher-vm-2-a", "6Gi", BEFORE, ("vm-2", "vmi-2"), node="n3"),
                pod("virt-launcher-vm-1-src", "1Gi", BEFORE, ("vm-1", "vmi-1"), phase=source_phase, node="n1",
                    uid="pod-src"),
                pod("virt-launcher-vm-1-tgt", target_memory, DURING, ("vm-1", "vmi-1"))]


# ---------------------------------------------------------------------------------------------------------
# the decision, pure

def test_usage_verdict_waits_for_lag_and_for_what_kubevirt_removes_but_not_for_lasting_use():
    target = {"limits.memory": 8 * Gi, "requests.storage": 1 * Gi, "services": 2}
    used = {"limits.memory": 9 * Gi, "requests.storage": 2 * Gi, "services": 3}
    known = {"limits.memory", "requests.storage"}
    names = sorted(used)
    # status.used above what the objects charge: the quota controller lags, nothing lasts
    assert RR.usage_verdict(used, target, names, {"limits.memory": 7 * Gi, "requests.storage": Gi}, known, {}) \
        == (["services"], ["limits.memory", "requests.storage"])
    # what the running objects charge is above it: lasting; a launcher KubeVirt removes is subtracted first
    assert RR.usage_verdict(used, target, ["limits.memory"], {"limits.memory": 9 * Gi}, known, {}) \
        == (["limits.memory"], [])
    assert RR.usage_verdict(used, target, ["limits.memory"], {"limits.memory": 9 * Gi}, known,
                            {"limits.memory": 1 * Gi}) == ([], ["limits.memory"])


def test_object_names_kind_namespace_owner_creation_and_client():
    grab = pod("grab", "1Gi", DURING, managers=("kubectl-run", "kubectl-label"))
    grab["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-7d9", "controller": True}]
    item = RR.object_facts(grab, "Pod", RR.CREATED_DURING, {"limits.memory": Gi, "limits.cpu": 0}, ["limits.memory"])
    item["reservation_created"] = "2025-01-01T00:00:01Z"
    assert item["owner"] == "ReplicaSet/web-7d9" and item["managers"] == ["kubectl-run", "kubectl-label"]
    assert item["charges"] == {"limits.memory": "1Gi"}
    assert RR.object_text(item) == ("Pod tenant-a/grab (owner ReplicaSet/web-7d9, created %s by kubectl-run, "
                                    "kubectl-label, after the reservation of 2025-01-01T00:00:01Z) charges "
                                    "limits.memory 1Gi" % DURING)


def test_wait_fix_never_says_to_delete_a_vms_pods_and_names_the_migration_to_cancel():
    fix = R._wait_fix([("tenant-a", "vm-1-kvq")], False, True)
    assert "delete them" not in fix and "delete pod" not in fix
    assert "cancel them by name" in fix and "tenant-a/vm-1-kvq" in fix and "ends by itself" in fix
    assert "ansible-playbook kvquota.maintenance.install" in R._wait_fix([], True, False)


# ---------------------------------------------------------------------------------------------------------
# plain quotas: the base, byte for byte, and the over-use named

def test_a_vm_that_came_back_bigger_gets_its_quota_back_at_base_with_the_growth_named():
    objects, clock = cluster_objects(), Clock()
    api = TenantApi(objects)
    reserve(api, clock)
    migrated(api, "2Gi")
    api.set_used(**{"limits.memory": "8448Mi"})    # 6Gi + 2Gi + the 256Mi of others before: above the 8Gi base
    api.pods.append(pod("sidecar-old", "256Mi", BEFORE))
    result = release(api, clock)
    assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "8Gi"     # the base's own string
    assert ledger_of(objects) is None
    [report] = result["overuse"]
    assert report["resources"]["limits.memory"] == {"used": "8448Mi", "base": "8Gi", "restored": "8Gi",
                                                    "charged": "8448Mi"}
    [grown] = report["objects"]
    assert grown["why"] == RR.GREW and grown["vm"] == "tenant-a/vm-1" and grown["name"] == "virt-launcher-vm-1-tgt"
    assert grown["grew"] == {"limits.memory": "1Gi -> 2Gi"}
    [warning] = [w for w in result["warnings"] if "back at its base" in w]
    assert "VM tenant-a/vm-1 came back larger than before its migration" in warning
    assert "limits.memory 1Gi -> 2Gi" in warning and "raise" not in warning and "delete" not in warning
    # the tenant sees it too: a Warning Event on the quota and on its namespace
    assert [r for r, _m in api.events if r in ("QuotaReleased", "QuotaOverUse")] == ["QuotaReleased"] * 2 + \
        ["QuotaOverUse"] * 2
    # a re-run converges: nothing left to release, nothing written
    again = release(api, clock)
    assert not again["changed"] and objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "8Gi"


def test_quota_controller_lag_is_waited_for_then_a_tenant_pod_is_named_and_the_base_restored():
    objects, clock = cluster_objects(), Clock()
    api = TenantApi(objects)
    reserve(api, clock)
    migrated(api, "1Gi")
    api.set_used(**{"limits.memory": "9Gi"})      # the pods charge 7Gi: status.used has not caught up
    with pytest.raises(WaitTimeoutError) as err:
        release(api, clock)
    assert "the quota controller has not caught up yet" in err.value.message
    assert "delete them" not in err.value.fix and "raise" not in err.value.fix
    assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "10Gi"   # still reserved meanwhile
    # a tenant's pod created during the reservation (no fence) now really holds 2Gi of it
    api.pods.append(pod("grab", "2Gi", DURING, managers=("kubectl-run",)))
    result = release(api, clock)
    assert objects[QUOTA_PATH]["spec"]["hard"] == {"limits.cpu": "4", "limits.memory": "8Gi", "pods": "10"}
    [report] = result["overuse"]
    [grab] = report["objects"]
    assert (grab["kind"], grab["name"], grab["managers"], grab["why"]) == ("Pod", "grab", ["kubectl-run"],
                                                                           RR.CREATED_DURING)
    assert result["captured"][0]["pods"][0].startswith("Pod tenant-a/grab (owner none, created %s by kubectl-run"
                                                       % DURING)
    [warning] = [w for w in result["warnings"] if "back at its base" in w]
    assert "remove Pod tenant-a/grab" in warning and "install the headroom fence (ansible-playbook kvquota.maintenance.install)" \
        in warning


def test_a_pvc_created_during_the_reservation_is_named_and_the_pvc_count_goes_back_to_base():
    objects = cluster_objects()
    quota = objects[QUOTA_PATH]
    quota["spec"]["hard"].update({"persistentvolumeclaims": "1", "requests.storage": "1Gi"})
    quota["status"]["hard"] = dict(quota["spec"]["hard"])
    clock = Clock()
    api = TenantApi(objects)
    reserve(api, clock, {"persistentvolumeclaims": "1", "requests.storage": "10Mi"})
    migrated(api, "1Gi")
    for name, created in (("persistent-state-for-vm-1", BEFORE), ("grab-pvc", DURING)):
        objects["%s/%s" % (PVC_PATH, name)] = {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": created,
                         "managedFields": [{"manager": "kubectl-create", "operation": "Update", "time": created}]},
            "spec": {"resources": {"requests": {"storage": "10Mi"}}}}
    api.set_used(persistentvolumeclaims="2", **{"requests.storage": "20Mi"})
    result = release(api, clock)
    assert objects[QUOTA_PATH]["spec"]["hard"]["persistentvolumeclaims"] == "1"
    assert objects[QUOTA_PATH]["spec"]["hard"]["requests.storage"] == "1Gi"
    [report] = result["overuse"]
    assert [(o["kind"], o["name"]) for o in report["objects"]] == [("PersistentVolumeClaim", "grab-pvc")]
    assert report["resources"]["persistentvolumeclaims"]["charged"] == "2"


def test_a_migration_the_run_did_not_create_is_named_and_not_waited_for():
    objects, clock = cluster_objects(), Clock()
    api = TenantApi(objects)
    reserve(api, clock)
    migrated(api, "1Gi")
    # the tenant migrates the reserved VM again: its target pod (not the VMI's active launcher) holds 2Gi
    api.vmims.append(vmim("mine-again", "mig-tenant", "vm-1", "Scheduling", managers=("kubectl-create",)))
    api.pods.append(pod("virt-launcher-vm-1-again", "2Gi", DURING, ("vm-1", "vmi-1"), node="n4"))
    api.set_used(**{"limits.memory": "9Gi"})
    result = release(api, clock)
    assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "8Gi"
    [item] = result["overuse"][0]["objects"]
    assert (item["kind"], item["name"], item["pod"]) == ("VirtualMachineInstanceMigration", "mine-again",
                                                         "virt-launcher-vm-1-again")
    assert "not created by this run" in RR.object_text(item)


def test_a_source_pod_still_running_keeps_the_reservation_and_the_fix_says_it_ends_by_itself():
    objects, clock = cluster_objects(), Clock()
    api = TenantApi(objects)
    reserve(api, clock)
    migrated(api, "1Gi", source_phase="Running")
    api.set_used(**{"limits.memory": "8Gi"})
    with pytest.raises(WaitTimeoutError) as err:
        release(api, clock)
    assert "source pod tenant-a/virt-launcher-vm-1-src (Running) still counts" in err.value.message
    assert "ends by itself" in err.value.fix and "delete them" not in err.value.fix
    assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "10Gi"


# ---------------------------------------------------------------------------------------------------------
# Harvester: the lowest value its webhook accepts, the rest given back by the reaper once usage drops

def test_harvester_release_stops_at_usage_and_the_reaper_restores_the_base_once_usage_drops():
    objects, clock = cluster_objects(rancher=True), Clock()
    api = TenantApi(objects, harvester=True)
    reserve(api, clock)
    assert rancher_owner.rancher_limit(objects[NAMESPACE_PATH])["limits.memory"] == "10Gi"
    migrated(api, "2Gi")
    api.pods.append(pod("sidecar-old", "512Mi", BEFORE))
    api.set_used(**{"limits.memory": "8704Mi"})       # 512Mi above the 8Gi base, for good
    result = release(api, clock)
    # the lowest value the webhook accepts: the usage, not the base; the rest kept in the ledger
    assert rancher_owner.rancher_limit(objects[NAMESPACE_PATH])["limits.memory"] == "8704Mi"
    ledger = ledger_of(objects)
    assert sorted(ledger["reservations"]) == [RID + ".held"]
    held = ledger["reservations"][RID + ".held"]
    assert held["delta"] == {"limits.memory": "512Mi"} and held["remainder"] is True
    assert ledger["released"][-1]["id"] == RID
    [item] = result["quotas"]
    assert item["outcome"] == L.HELD_AT_USAGE and item["held"] == {"limits.memory": "512Mi"}
    [warning] = [w for w in result["warnings"] if "back at its base" in w]
    assert "Harvester's namespace webhook" in warning and "limits.memory=512Mi" in warning
    # the reaper while usage is still there: stays at usage, reported, not deferred, no failure
    reaped = V.release_expired(api, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0)
    assert reaped["deferred"] == [] and [h["held_as"] for h in reaped["held_at_usage"]] == [RID + ".held"]
    assert rancher_owner.rancher_limit(objects[NAMESPACE_PATH])["limits.memory"] == "8704Mi"
    # usage drops: the reaper restores the base, the Rancher annotation byte for byte, no ledger left
    api.pods = [p for p in api.pods if p["metadata"]["name"] != "sidecar-old"]
    api.set_used(**{"limits.memory": "8Gi"})
    reaped = V.release_expired(api, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0)
    assert [r["id"] for r in reaped["released"]] == [RID + ".held"]
    assert objects[NAMESPACE_PATH]["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION] == RANCHER_ANNOTATION
    assert ledger_of(objects) is None
    assert harvester.HARVESTER_SKIP_ANNOTATION not in objects[QUOTA_PATH]["metadata"]["annotations"]


class RecordingApi(TenantApi):
    """TenantApi that records, after every write, the quota's limits.memory, its opt-out and whether a ledger
    exists (the order the release leaves things in, as Harvester's controller would see them between writes)."""

    def __init__(self, *args, **kwargs):
        super(RecordingApi, self).__init__(*args, **kwargs)
        self.seen = []

    def _write(self, apply):
        try:
            return super(RecordingApi, self)._write(apply)
        finally:
            quota = self.objects[QUOTA_PATH]
            self.seen.append((quota["spec"]["hard"]["limits.memory"],
                              quota["metadata"]["annotations"].get(harvester.HARVESTER_SKIP_ANNOTATION),
                              ledger_of(self.objects) is not None))


def test_harvester_opt_out_comes_off_only_once_the_base_is_back_and_the_ledger_goes_after_it():
    """Between any two writes of a release, a quota above its base carries the opt-out (Harvester must never add
    its deltas on top of a reservation), and the ledger that remembers the opt-out's previous value outlives it."""
    objects, clock = cluster_objects(rancher=True), Clock()
    api = RecordingApi(objects, harvester=True)
    reserve(api, clock)
    assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "10Gi"
    assert objects[QUOTA_PATH]["metadata"]["annotations"][harvester.HARVESTER_SKIP_ANNOTATION] == "true"
    migrated(api, "1Gi")
    api.set_used(**{"limits.memory": "7Gi"})
    api.seen = []
    release(api, clock)
    for memory, opt_out, ledger in api.seen:
        if memory != "8Gi":
            assert opt_out == "true", api.seen
        if opt_out is None:
            assert memory == "8Gi", api.seen
        if opt_out == "true":
            assert ledger, api.seen     # the opt-out's previous value (absent) is still on record
    assert api.seen[-1] == ("8Gi", None, False), api.seen
    assert objects[NAMESPACE_PATH]["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION] == \
        RANCHER_ANNOTATION


@pytest.mark.parametrize("after", [False, True], ids=["before-write", "after-write"])
def test_harvester_release_killed_at_any_write_converges_with_the_opt_out_put_back(after):
    def reserved():
        objects, clock = cluster_objects(rancher=True), Clock()
        api = TenantApi(objects, harvester=True)
        reserve(api, clock)
        migrated(api, "1Gi")
        api.set_used(**{"limits.memory": "7Gi"})
        api.writes = 0
        return objects, clock, api

    _objects, clock, api = reserved()
    release(api, clock)
    assert 4 <= api.writes < 12, api.writes     # every write of an uninterrupted release is a crash point below
    for crash_at in range(1, api.writes + 1):
        objects, clock, api = reserved()
        api.crash_at, api.after = crash_at, after
        try:
            release(api, clock)
        except Crash:
            pass
        api.crash_at = None
        release(api, clock)
        V.release_expired(api, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0)
        annotations = objects[QUOTA_PATH]["metadata"]["annotations"]
        assert harvester.HARVESTER_SKIP_ANNOTATION not in annotations, (crash_at, annotations)
        assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "8Gi", crash_at
        assert ledger_of(objects) is None, (crash_at, ledger_of(objects))
        assert objects[NAMESPACE_PATH]["metadata"]["annotations"][rancher_owner.RANCHER_QUOTA_ANNOTATION] == \
            RANCHER_ANNOTATION, crash_at


def test_a_cluster_without_kubevirt_is_released_with_its_over_use_named():
    """A plain quota on a cluster that serves no KubeVirt API (a reservation made by hand): the lists of VMIs and
    migrations are 404; the release must not fail on them."""
    objects, clock = cluster_objects(), Clock()

    class NoKubevirt(TenantApi):
        def list_custom(self, group, version, plural, namespace=None, label_selector=None):
            raise NotFoundError("cannot list %s.%s: not found (404 page not found)" % (plural, group))

    api = NoKubevirt(objects)
    reserve(api, clock, refs=None)
    api.pods = [pod("before", "7Gi", BEFORE), pod("grab", "2Gi", DURING)]
    api.set_used(**{"limits.memory": "9Gi"})
    result = release(api, clock)
    assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "8Gi"
    assert [o["name"] for o in result["overuse"][0]["objects"]] == ["grab"]


# ---------------------------------------------------------------------------------------------------------
# only what KubeVirt itself named for the reservation is waited for (a tenant writes ownerReferences and names)

def test_a_pod_that_claims_a_reserved_vm_as_its_owner_is_over_use_not_a_launcher_to_wait_for():
    """A tenant's pod with a controller ownerReference to its own reserved VMI, on another node, made before the
    window: neither the VM's active pod nor named by KubeVirt for the reservation. It used to be taken for a
    launcher pod its migration left ("KubeVirt removes it"): the reservation was kept until the timeout, the
    reaper only deferred. Now it is over-use, named as a pod claiming to be the VM's launcher."""
    objects, clock = cluster_objects(), Clock()
    api = TenantApi(objects)
    reserve(api, clock)
    migrated(api, "2Gi")
    api.pods.append(pod("decoy", "256Mi", BEFORE, owner=("vm-1", "vmi-1"), node="n9", managers=("kubectl-create",)))
    api.set_used(**{"limits.memory": "8448Mi"})     # 6Gi + 2Gi + the decoy's 256Mi: above the 8Gi base for good
    result = release(api, clock)
    assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "8Gi"
    assert ledger_of(objects) is None and result["pending"] == []
    [report] = result["overuse"]
    decoy = [o for o in report["objects"] if o["name"] == "decoy"]
    assert [(o["kind"], o["why"], o["vm"], o["owner"]) for o in decoy] == [
        ("Pod", RR.CLAIMS_LAUNCHER, "tenant-a/vm-1", "VirtualMachineInstance/vm-1")]
    [warning] = [w for w in result["warnings"] if "back at its base" in w]
    assert ("Pod tenant-a/decoy (owner VirtualMachineInstance/vm-1, created %s by kubectl-create) claims to be a "
            "launcher pod of VM tenant-a/vm-1, but KubeVirt does not name it" % BEFORE) in warning
    assert "remove Pod tenant-a/decoy" in warning and "KubeVirt removes" not in warning
    assert "Pod tenant-a/decoy" in result["captured"][0]["pods"][0]


def failed_migration(api, target_phase="Running", target_deleted=None):
    """vm-1's migration vm-1-kvq failed at 00:00:40: vm-1 still runs on n1 (its source pod, 1Gi), the target pod
    virt-launcher-vm-1-tgt (1Gi, created 00:00:31 on n2) is named in the migration's status; vm-2 uses 7Gi."""
    api.vmis = [vmi("vm-1", "vmi-1", node="n1"), vmi("vm-2", "vmi-2", node="n3")]
    failed = vmim("vm-1-kvq", "mig-1", "vm-1", "Failed")
    failed["status"].update(
        migrationState={"sourcePod": "virt-launcher-vm-1-src", "targetPod": "virt-launcher-vm-1-tgt",
                        "failed": True},
        phaseTransitionTimestamps=[{"phase": "Scheduling", "phaseTransitionTimestamp": DURING},
                                   {"phase": "Failed", "phaseTransitionTimestamp": "2025-01-01T00:00:40Z"}])
    api.vmims = [failed]
    target = pod("virt-launcher-vm-1-tgt", "1Gi", "2025-01-01T00:00:31Z", ("vm-1", "vmi-1"), phase=target_phase,
                 uid="pod-tgt")
    if target_deleted:
        target["metadata"].update(deletionTimestamp=target_deleted, deletionGracePeriodSeconds=30)
    api.pods = [pod("virt-launcher-vm-2-a", "7Gi", BEFORE, ("vm-2", "vmi-2"), node="n3"),
                pod("virt-launcher-vm-1-src", "1Gi", BEFORE, ("vm-1", "vmi-1"), node="n1", uid="pod-src"),
                target]


def test_the_target_pod_kubevirt_is_removing_is_waited_for_but_not_a_tenant_pod_under_its_name():
    objects, clock = cluster_objects(), Clock()
    api = TenantApi(objects)
    reserve(api, clock)
    api.set_used(**{"limits.memory": "9Gi"})
    # KubeVirt's own target pod of the failed migration, being deleted: about to go, so the release waits
    failed_migration(api, target_deleted="2025-01-01T00:00:41Z")
    with pytest.raises(WaitTimeoutError) as err:
        release(api, clock)
    assert "tenant-a/virt-launcher-vm-1-tgt (Running, terminating) of VM vm-1" in err.value.message
    assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "10Gi"
    # KubeVirt's pod is gone; the tenant creates one under the same name and owner, after the migration ended,
    # and deletes it with a long grace period on a node that never confirms: not KubeVirt's, so over-use
    fake = pod("virt-launcher-vm-1-tgt", "1Gi", "2025-01-01T00:00:50Z", ("vm-1", "vmi-1"), node="n9",
               uid="pod-fake")
    fake["metadata"].update(deletionTimestamp="2025-01-01T00:00:55Z", deletionGracePeriodSeconds=86400)
    api.pods = api.pods[:2] + [fake]
    result = release(api, clock)
    assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "8Gi" and ledger_of(objects) is None
    [item] = result["overuse"][0]["objects"]
    assert (item["name"], item["why"]) == ("virt-launcher-vm-1-tgt", RR.CLAIMS_LAUNCHER)
    # what the wait named: KubeVirt's pod, and why it was waited for
    assert "the target pod of its migration vm-1-kvq still counts" in err.value.message


def test_a_target_pod_a_final_migration_left_that_nothing_removes_is_over_use():
    """Only a pod being removed is waited for: one KubeVirt named that stays is named, and the base restored."""
    objects, clock = cluster_objects(), Clock()
    api = TenantApi(objects)
    reserve(api, clock)
    api.set_used(**{"limits.memory": "9Gi"})
    failed_migration(api)
    result = release(api, clock)
    assert objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "8Gi" and ledger_of(objects) is None
    [item] = result["overuse"][0]["objects"]
    assert (item["name"], item["why"], item["named"]) == ("virt-launcher-vm-1-tgt", RR.LEFT_OVER,
                                                          "the target pod of its migration vm-1-kvq")
    [warning] = [w for w in result["warnings"] if "back at its base" in w]
    assert "although that migration is final, and nothing is removing it" in warning
    assert "is KubeVirt's to remove" in warning and "remove Pod" not in warning


def test_a_pod_created_under_the_source_pods_name_after_the_migration_is_not_waited_for():
    """The migration's status names its source pod by name only: a pod a tenant creates under that name once
    KubeVirt's source pod is gone (newer than the migration) is no source pod, and never holds the release."""
    objects, clock = cluster_objects(), Clock()
    api = TenantApi(objects)
    reserve(api, clock)
    migrated(api, "1Gi")
    api.vmims[0]["status"]["migrationState"] = {"sourcePod": "virt-launcher-vm-1-src",
                                                "targetPod": "virt-launcher-vm-1-tgt"}
    api.pods = [p for p in api.pods if p["metadata"]["name"] != "virt-launcher-vm-1-src"]
    api.pods.append(pod("virt-launcher-vm-1-src", "256Mi", "2025-01-01T00:00:50Z", node="n1", uid="pod-tenant"))
    api.set_used(**{"limits.memory": "7424Mi"})
    result = release(api, clock)
    assert result["pending"] == [] and objects[QUOTA_PATH]["spec"]["hard"]["limits.memory"] == "8Gi"
    # KubeVirt's own source pod (older than the migration), still running after it, is waited for as before, also
    # when the reservation recorded no source pod (found through the migration's status only)
    objects2, clock2 = cluster_objects(), Clock()
    api2 = TenantApi(objects2)
    reserve(api2, clock2, refs=dict(REFS, sourcePods=[]))
    migrated(api2, "1Gi", source_phase="Running")
    api2.vmims[0]["status"]["migrationState"] = {"sourcePod": "virt-launcher-vm-1-src"}
    api2.set_used(**{"limits.memory": "8Gi"})
    with pytest.raises(WaitTimeoutError, match="source pod tenant-a/virt-launcher-vm-1-src"):
        release(api2, clock2)


# ---------------------------------------------------------------------------------------------------------
# Harvester: a remainder held at usage keeps its namespace fenced until the reaper restores the base

FENCE_PATH = "/api/v1/namespaces/%s/configmaps/kvq-fence" % OPERATOR
ADMISSION = "/apis/admissionregistration.k8s.io/v1/"


def install_fence(objects):
    """roles/install/files/fence.yml as installed: the policy and its binding reading kvq-fence of the operator namespace."""
    objects[ADMISSION + "validatingadmissionpolicies/kvquota-headroom-fence"] = {"metadata": {}}
    objects[ADMISSION + "validatingadmissionpolicybindings/kvquota-headroom-fence"] = {
        "metadata": {}, "spec": {"paramRef": {"name": "kvq-fence", "namespace": OPERATOR}}}


def fence_keys(objects):
    """The fence ConfigMap's keys of tenant-a (ns., vmi., mig.), with the namespace's note."""
    data = (objects.get(FENCE_PATH) or {}).get("data") or {}
    return dict((k, v) for k, v in data.items() if k.split(".", 2)[:2] in (["ns", NS], ["vmi", NS], ["mig", NS]))


def reap(api, clock):
    return V.release_expired(api, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0)


def test_harvester_remainder_keeps_the_namespace_fenced_until_the_reaper_restores_the_base():
    """Harvester keeps the quota at the namespace's usage (above its base) as '<id>.held'. Unfenced, the tenant
    could replace every pod that ends up to that value, so usage would never drop and the reaper never restore
    the base. So the namespace stays fenced (no VMI, no migration listed: nothing new is admitted) while the
    remainder is held, and is unfenced when the reaper restores the base."""
    objects, clock = cluster_objects(rancher=True), Clock()
    install_fence(objects)
    api = TenantApi(objects, harvester=True)
    reserve(api, clock)
    assert fence_keys(objects).get("vmi.tenant-a.vmi-1") == "vm-1" and "ns.tenant-a" in fence_keys(objects)
    migrated(api, "2Gi")
    api.pods.append(pod("sidecar-old", "512Mi", BEFORE))
    api.set_used(**{"limits.memory": "8704Mi"})
    result = release(api, clock)
    assert result["quotas"][0]["outcome"] == L.HELD_AT_USAGE
    kept = fence_keys(objects)
    assert sorted(kept) == ["ns.tenant-a"]                     # the VM and its migration unlisted: nothing admitted
    assert "'node-1-b0.held'" in kept["ns.tenant-a"] and "nothing new is admitted" in kept["ns.tenant-a"]
    [outcome] = result["fence"]
    assert outcome["fenced"] and outcome["held"] == [RID + ".held"] and outcome["vmis"] == {}
    # the reaper with usage still above the base: the remainder stays, and so does the fence
    reaped = reap(api, clock)
    assert [h["held_as"] for h in reaped["held_at_usage"]] == [RID + ".held"] and reaped["unfenced"] == []
    assert sorted(fence_keys(objects)) == ["ns.tenant-a"]
    # usage drops to the base: the reaper restores it and lifts the fence
    api.pods = [p for p in api.pods if p["metadata"]["name"] != "sidecar-old"]
    api.set_used(**{"limits.memory": "8Gi"})
    reaped = reap(api, clock)
    assert [r["id"] for r in reaped["released"]] == [RID + ".held"] and ledger_of(objects) is None
    assert fence_keys(objects) == {}


def test_a_later_reservation_in_a_held_namespace_is_fenced_for_its_vms_and_its_release_keeps_the_fence():
    objects, clock = cluster_objects(rancher=True), Clock()
    install_fence(objects)
    api = TenantApi(objects, harvester=True)
    reserve(api, clock)
    migrated(api, "2Gi")
    api.pods.append(pod("sidecar-old", "512Mi", BEFORE))
    api.set_used(**{"limits.memory": "8704Mi"})
    release(api, clock)
    assert sorted(fence_keys(objects)) == ["ns.tenant-a"]
    # a later maintenance reserves for vm-2 in the same namespace: fenced with its own VMI, the window's note
    refs = {"vms": [{"namespace": NS, "name": "vm-2", "uid": "vmi-2"}],
            "migrations": [{"namespace": NS, "name": "vm-2-kvq", "uid": "mig-2"}]}
    V.reserve(api, "node-3-b0", {TARGET: {"limits.memory": "1Gi"}}, "job", "drain", 600, clock=clock,
              sleep=lambda s: None, rancher_sync_timeout=0, lock={"holder": "job-1", "wait_timeout": 0}, refs=refs)
    later = fence_keys(objects)
    assert later.get("vmi.tenant-a.vmi-2") == "vm-2" and "reserved from" in later["ns.tenant-a"]
    # its release unlists vm-2, but the namespace stays fenced while the remainder is held
    result = release(api, clock, rid="node-3-b0")
    assert [q["outcome"] for q in result["quotas"]] == [L.RELEASED]
    kept = fence_keys(objects)
    assert sorted(kept) == ["ns.tenant-a"] and "'node-1-b0.held'" in kept["ns.tenant-a"]
    assert sorted(ledger_of(objects)["reservations"]) == [RID + ".held"]
    # and the reaper lifts it once the base is restored
    api.pods = [p for p in api.pods if p["metadata"]["name"] != "sidecar-old"]
    api.set_used(**{"limits.memory": "8Gi"})
    reap(api, clock)
    assert fence_keys(objects) == {} and ledger_of(objects) is None


def test_a_vmi_another_active_reservation_names_stays_fenced_when_one_reservation_is_released():
    """Two reservations of the same VM in one namespace (a re-run's batch beside a kept one): releasing one must
    not unlist the VMI the other still holds headroom for (its target pods would be refused)."""
    objects, clock = cluster_objects(), Clock()
    install_fence(objects)
    api = TenantApi(objects)
    reserve(api, clock)
    V.reserve(api, "node-1-b1", {TARGET: {"limits.memory": "1Gi"}}, "job", "drain", 600, clock=clock,
              sleep=lambda s: None, rancher_sync_timeout=0, lock={"holder": "job-1", "wait_timeout": 0},
              refs={"vms": REFS["vms"]})
    migrated(api, "1Gi")
    api.set_used(**{"limits.memory": "7Gi"})
    release(api, clock)
    assert fence_keys(objects).get("vmi.tenant-a.vmi-1") == "vm-1" and "ns.tenant-a" in fence_keys(objects)
    release(api, clock, rid="node-1-b1")
    assert fence_keys(objects) == {}


def test_the_reaper_unfences_only_under_the_namespace_lock_on_a_fresh_read(monkeypatch):
    # found by an attack: the rulebook runs the reaper beside a window; a window reserving in x fences x first,
    # then writes its ledger, under x's lock. A reaper that read the ledgers before and unfenced x after would
    # open the window's fresh headroom to the tenant's own pods.
    import contextlib
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations as R
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import fence as fence_mod

    class Entry(object):
        def __init__(self, namespace, reservations):
            self.namespace, self.reservations = namespace, reservations

    events = []

    class Store(object):
        namespace = "kvquota-system"

        def list(self, warnings):
            events.append("read ledgers")
            return {"u1": (Entry("x", {"eda-f3": {}}), None), "u2": (Entry("y", {}), None)}

    class Run(object):
        cluster, store, check_mode, warnings = None, Store(), False, []

        def fence_installed(self):
            return True

        @contextlib.contextmanager
        def locked(self, namespaces):
            events.append("lock %s" % ",".join(namespaces))
            yield
            events.append("unlock")

    monkeypatch.setattr(fence_mod, "fences", lambda cluster, ns: {"x": {}, "y": {}})
    monkeypatch.setattr(fence_mod, "unfence", lambda cluster, ns, namespace, vmis, check: (
        events.append("unfence %s" % namespace) or {"changed": True, "namespace": namespace}))
    # the scan at the reaper's start saw no reservation in x or y (active is empty)
    unfenced = R._unfence_idle(Run(), set())   # pylint: disable=protected-access
    assert [u["namespace"] for u in unfenced] == ["y"]
    assert events == ["lock x", "read ledgers", "unlock", "lock y", "read ledgers", "unfence y", "unlock"]
