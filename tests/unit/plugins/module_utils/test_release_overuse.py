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

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import backends as B
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import ledger as L
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import reservations as R
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import store as S
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import (
    KvquotaError,
    NotFoundError,
    WaitTimeoutError,
)

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_state_protocol import (
    OPERATOR,
    RANCHER_ANNOTATION,
    TARGET,
    Clock,
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
            limit = B.rancher_limit(obj)
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


def reserve(api, clock, delta=None, refs=REFS):
    return R.reserve(api, RID, {TARGET: delta or {"limits.memory": "2Gi"}}, "job", "drain", 600, clock=clock,
                     sleep=lambda s: None, rancher_sync_timeout=0, lock={"holder": "job-1", "wait_timeout": 0},
                     refs=refs)


def release(api, clock, rid=RID):
    return R.release(api, rid, wait_for_pods=False, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0,
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
    assert R._usage_verdict(used, target, names, {"limits.memory": 7 * Gi, "requests.storage": Gi}, known, {}) \
        == (["services"], ["limits.memory", "requests.storage"])
    # what the running objects charge is above it: lasting; a launcher KubeVirt removes is subtracted first
    assert R._usage_verdict(used, target, ["limits.memory"], {"limits.memory": 9 * Gi}, known, {}) \
        == (["limits.memory"], [])
    assert R._usage_verdict(used, target, ["limits.memory"], {"limits.memory": 9 * Gi}, known,
                            {"limits.memory": 1 * Gi}) == ([], ["limits.memory"])


def test_object_names_kind_namespace_owner_creation_and_client():
    grab = pod("grab", "1Gi", DURING, managers=("kubectl-run", "kubectl-label"))
    grab["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "web-7d9", "controller": True}]
    item = R._object_facts(grab, "Pod", R.CREATED_DURING, {"limits.memory": Gi, "limits.cpu": 0}, ["limits.memory"])
    item["reservation_created"] = "2025-01-01T00:00:01Z"
    assert item["owner"] == "ReplicaSet/web-7d9" and item["managers"] == ["kubectl-run", "kubectl-label"]
    assert item["charges"] == {"limits.memory": "1Gi"}
    assert R._object_text(item) == ("Pod tenant-a/grab (owner ReplicaSet/web-7d9, created %s by kubectl-run, "
                                    "kubectl-label, after the reservation of 2025-01-01T00:00:01Z) charges "
                                    "limits.memory 1Gi" % DURING)


def test_wait_fix_never_says_to_delete_a_vms_pods_and_names_the_migration_to_cancel():
    fix = R._wait_fix([("tenant-a", "vm-1-kvq")], False, True)
    assert "delete them" not in fix and "delete pod" not in fix
    assert "cancel them by name" in fix and "tenant-a/vm-1-kvq" in fix and "ends by itself" in fix
    assert "kubectl apply -f rbac/fence.yml" in R._wait_fix([], True, False)


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
    assert grown["why"] == R.GREW and grown["vm"] == "tenant-a/vm-1" and grown["name"] == "virt-launcher-vm-1-tgt"
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
                                                                          R.CREATED_DURING)
    assert result["captured"][0]["pods"][0].startswith("Pod tenant-a/grab (owner none, created %s by kubectl-run"
                                                       % DURING)
    [warning] = [w for w in result["warnings"] if "back at its base" in w]
    assert "remove Pod tenant-a/grab" in warning and "install the headroom fence (kubectl apply -f rbac/fence.yml)" \
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
    assert "not created by this run" in R._object_text(item)


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
    assert B.rancher_limit(objects[NAMESPACE_PATH])["limits.memory"] == "10Gi"
    migrated(api, "2Gi")
    api.pods.append(pod("sidecar-old", "512Mi", BEFORE))
    api.set_used(**{"limits.memory": "8704Mi"})       # 512Mi above the 8Gi base, for good
    result = release(api, clock)
    # the lowest value the webhook accepts: the usage, not the base; the rest kept in the ledger
    assert B.rancher_limit(objects[NAMESPACE_PATH])["limits.memory"] == "8704Mi"
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
    reaped = R.release_expired(api, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0)
    assert reaped["deferred"] == [] and [h["held_as"] for h in reaped["held_at_usage"]] == [RID + ".held"]
    assert B.rancher_limit(objects[NAMESPACE_PATH])["limits.memory"] == "8704Mi"
    # usage drops: the reaper restores the base, the Rancher annotation byte for byte, no ledger left
    api.pods = [p for p in api.pods if p["metadata"]["name"] != "sidecar-old"]
    api.set_used(**{"limits.memory": "8Gi"})
    reaped = R.release_expired(api, clock=clock, sleep=lambda s: None, rancher_sync_timeout=0)
    assert [r["id"] for r in reaped["released"]] == [RID + ".held"]
    assert objects[NAMESPACE_PATH]["metadata"]["annotations"][B.RANCHER_QUOTA_ANNOTATION] == RANCHER_ANNOTATION
    assert ledger_of(objects) is None
    assert B.HARVESTER_SKIP_ANNOTATION not in objects[QUOTA_PATH]["metadata"]["annotations"]


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
