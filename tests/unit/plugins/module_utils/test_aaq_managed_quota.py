# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The native ResourceQuota AAQ keeps for an ApplicationAwareResourceQuota: owned by AAQ, never written by kvquota,
and a blocker of the namespace when a migration lacks room in it.

Every expected value below is written from AAQ v1.8.0's source and Kubernetes' quota rules, never from kvquota's
output:
- pkg/aaq-controller/rq-controller/rq-controller.go: for each ARQ whose spec.hard has a non-schedulable name the
  controller creates ResourceQuota <arq>-non-schedulable-resources-managed-rq-x (RQSuffix) in the ARQ's namespace,
  labels {aaq.kubevirt.io: "true"} (util.AAQLabel), ownerReferences [metav1.NewControllerRef(arq,
  ApplicationAwareResourceQuotaGroupVersionKind)] (apiVersion aaq.kubevirt.io/v1alpha1, kind
  ApplicationAwareResourceQuota, name and uid of the ARQ, controller true, blockOwnerDeletion true), spec hard =
  util.FilterNonScheduableResources(arq.spec.hard), scopes and scopeSelector the ARQ's; whenever the quota's spec
  differs from that, the controller Updates it back (so a value kvquota wrote would be put back).
- pkg/util/util.go isSchedulableResource: pods, cpu, memory, ephemeral-storage and every requests.* / limits.* name
  except requests.storage are "schedulable" (AAQ gates them itself); all other names stay in the native quota.
- Kubernetes: the API server admits pods against every native ResourceQuota whose scopes match; a pod charges
  count/pods 1; a migration's target pod is a second pod while the source pod runs.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as c
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import registry
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import reservation_calls as V
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_aaq_check import aaq_cr
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import (
    NOW,
    make_quota,
    make_vmi,
    snapshot,
)
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_state_protocol import (
    OPERATOR,
    Clock,
    FakeApi,
)

ARQ_UID = "6c0a4a0e-2f0b-4d5e-9a51-0d3c1f7f0a11"
SUFFIX = "-non-schedulable-resources-managed-rq-x"
GATING_LABEL = "application-aware-quota/enable-gating"


def filter_non_schedulable(hard):
    """util.FilterNonScheduableResources, as AAQ v1.8.0 writes it."""
    def schedulable(name):
        if name in ("pods", "cpu", "memory", "ephemeral-storage"):
            return True
        if name == "requests.storage":
            return False
        return name.startswith("requests.") or name.startswith("limits.")
    return dict((name, value) for name, value in hard.items() if not schedulable(name))


def arq(name="vm-quota", namespace="t", hard=None):
    return {"apiVersion": "aaq.kubevirt.io/v1alpha1", "kind": "ApplicationAwareResourceQuota",
            "metadata": {"name": name, "namespace": namespace, "uid": ARQ_UID},
            "spec": {"hard": dict(hard or {"pods": "10", "limits.cpu": "8", "limits.memory": "16Gi",
                                           "requests.memory": "16Gi", "count/pods": "2", "requests.storage": "50Gi"})}}


def managed_quota(owner, used=None, label=True, ref=None):
    """The ResourceQuota rq-controller.go creates for ARQ owner (status as the quota controller writes it)."""
    hard = filter_non_schedulable(owner["spec"]["hard"])
    quota = make_quota(owner["metadata"]["name"] + SUFFIX, owner["metadata"]["namespace"], hard, used=used,
                       labels={"aaq.kubevirt.io": "true"} if label else {})
    quota["metadata"]["ownerReferences"] = [ref if ref is not None else {
        "apiVersion": "aaq.kubevirt.io/v1alpha1", "kind": "ApplicationAwareResourceQuota",
        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"], "controller": True,
        "blockOwnerDeletion": True}]
    return quota


def namespace():
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t", "labels": {GATING_LABEL: ""}}}


def test_the_fixture_is_what_aaq_creates():
    # count/pods and requests.storage are not "schedulable" for AAQ: they go to the native quota; the rest stays
    assert managed_quota(arq())["spec"]["hard"] == {"count/pods": "2", "requests.storage": "50Gi"}
    assert managed_quota(arq())["metadata"]["name"] == "vm-quota-non-schedulable-resources-managed-rq-x"


# ---------------------------------------------------------------------------
# who owns it

@pytest.mark.parametrize("facts", [{"aaq": True}, {}], ids=["aaq-fact", "no-facts"])
def test_aaqs_managed_quota_is_owned_by_aaq_and_never_writable(facts):
    quota = managed_quota(arq())
    owner = registry.owner_of(quota, namespace(), facts)
    assert owner.name == "aaq" and not owner.writable and owner.written_on is None
    assert registry.spec_owner(quota) == "aaq"
    assert owner.describe()["managed_by"] == {"kind": "ApplicationAwareResourceQuota", "name": "vm-quota",
                                              "uid": ARQ_UID}
    assert any("t/vm-quota" in note and "never writes" in note for note in owner.notes)
    assert "t/vm-quota" in owner.read_only_reason(quota)


def test_the_label_alone_is_no_authority():
    """aaq.kubevirt.io=true on a quota without AAQ's controller ownerReference: a plain quota (kvquota writes it)."""
    quota = make_quota("vm-quota" + SUFFIX, "t", {"count/pods": "2"}, labels={"aaq.kubevirt.io": "true"})
    assert registry.owner_of(quota, namespace(), {"aaq": True}).name == "plain"
    assert registry.owner_of(quota, namespace(), {"aaq": True}).writable


def test_the_controller_reference_is_enough_and_a_missing_label_is_noted():
    quota = managed_quota(arq(), label=False)
    owner = registry.owner_of(quota, namespace(), {"aaq": True})
    assert owner.name == "aaq" and not owner.writable
    assert any("label aaq.kubevirt.io is missing" in note for note in owner.notes)


@pytest.mark.parametrize("ref", [
    # not the controller: AAQ's reference is NewControllerRef (controller true)
    {"apiVersion": "aaq.kubevirt.io/v1alpha1", "kind": "ApplicationAwareResourceQuota", "name": "vm-quota",
     "uid": ARQ_UID},
    {"apiVersion": "aaq.kubevirt.io/v1alpha1", "kind": "ApplicationAwareResourceQuota", "name": "vm-quota",
     "uid": ARQ_UID, "controller": False},
    # another API group with a kind of the same name
    {"apiVersion": "example.com/v1", "kind": "ApplicationAwareResourceQuota", "name": "vm-quota", "uid": ARQ_UID,
     "controller": True},
    # the cluster quota keeps ClusterResourceQuotas, never a namespaced ResourceQuota
    {"apiVersion": "aaq.kubevirt.io/v1alpha1", "kind": "ApplicationAwareClusterResourceQuota", "name": "vm-quota",
     "uid": ARQ_UID, "controller": True},
], ids=["no-controller-field", "controller-false", "other-group", "cluster-quota-kind"])
def test_other_owner_references_are_no_aaq_ownership(ref):
    quota = managed_quota(arq(), ref=ref)
    assert registry.owner_of(quota, namespace(), {"aaq": True}).name == "plain"


# ---------------------------------------------------------------------------
# kvquota_check

def check_snapshot(count_pods_hard, count_pods_used="1", extra_quotas=()):
    """Namespace t, gated by AAQ (growth mode), one running VM (its launcher pod counts 1 in count/pods), an ARQ
    with count/pods, and the native quota AAQ keeps for it."""
    owner = arq(hard={"pods": "10", "limits.memory": "64Gi", "count/pods": count_pods_hard})
    quota = managed_quota(owner, used={"count/pods": count_pods_used})
    snap = snapshot({"t": ([quota] + list(extra_quotas), [make_vmi("vm1", "t")])},
                    aaq_quotas={"t": [owner]}, aaq_cluster_quotas=[], aaq_configs=[aaq_cr("VmiPodUsage")])
    snap["namespaces"]["t"]["metadata"]["labels"] = {GATING_LABEL: ""}
    return snap


def test_a_full_aaq_managed_quota_blocks_the_namespace_with_the_arq_as_the_fix():
    # hard count/pods 1, used 1 (the source pod): the target pod makes 2, the API server refuses it
    report = c.evaluate(check_snapshot("1"), {"now": NOW})
    ns = report["namespaces"]["t"]
    assert ns["verdict"] == "blocked"
    (blocker,) = [b for b in ns["blockers"] if b["kind"] == "read_only_quota_lacks_room"]
    name = "vm-quota" + SUFFIX
    assert blocker["quota"] == name and blocker["resource"] == "count/pods" and blocker["owner"] == "aaq"
    assert "count/pods=1" in blocker["message"] and "t/vm-quota" in blocker["message"]
    # the fix raises the ARQ (AAQ copies it into the native quota), to used 1 + the target pod 1
    assert "ApplicationAwareResourceQuota t/vm-quota to 2" in blocker["fix"]
    assert "raise count/pods of quota t/%s" % name not in blocker["fix"]
    (quota_report,) = ns["quotas"]
    assert quota_report["owner"] == "aaq" and quota_report["backend"]["managed_by"]["name"] == "vm-quota"
    assert all("ApplicationAwareResourceQuota t/vm-quota" in text for text in quota_report["fixes"])
    assert report["verdict"] == "blocked"
    assert blocker in report["blockers"]


def test_an_aaq_managed_quota_with_room_is_a_note():
    report = c.evaluate(check_snapshot("5"), {"now": NOW})
    ns = report["namespaces"]["t"]
    assert ns["verdict"] == "ok" and not ns["blockers"]
    (note,) = [w for w in ns["warnings"] if w["kind"] == "read_only_quota"]
    assert note["quota"] == "vm-quota" + SUFFIX and "t/vm-quota" in note["message"]
    assert "count/pods=1" in note["message"]


def test_usage_already_above_the_aaq_managed_quota_names_the_arq():
    # used 3 above hard 2 (the ARQ was lowered): the permanent fix, too, is on the ARQ
    ns = c.evaluate(check_snapshot("2", count_pods_used="3"), {"now": NOW})["namespaces"]["t"]
    above = [b for b in ns["blockers"] if b["kind"] == "usage_above_hard"]
    assert above and all("ApplicationAwareResourceQuota t/vm-quota to" in b["fix"] for b in above)


def test_the_aaq_report_tells_the_managed_quota_from_the_native_ones():
    compute = make_quota("compute", "t", {"limits.memory": "64Gi"})
    report = c.evaluate(check_snapshot("5", extra_quotas=[compute]), {"now": NOW})
    entry = report["aaq"]["namespaces"]["t"]
    name = "vm-quota" + SUFFIX
    assert sorted(entry["native_quotas"]) == sorted(["compute", name])
    assert entry["aaq_managed_quotas"] == [name]
    (line,) = [w for w in report["warnings"] if w["kind"] == "aaq_present" and w["namespace"] == "t"]
    assert "native ResourceQuota(s) compute still charge" in line["message"]
    assert "%s, which AAQ keeps" % name in line["message"]


# ---------------------------------------------------------------------------
# kvquota_reserve: never written, skipped with the reason

def test_reserve_never_writes_an_aaq_managed_quota():
    objects = {}
    api = FakeApi(objects)
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t", "annotations": {}}}
    operator = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR}}
    quota = managed_quota(arq(), used={"count/pods": "2"})
    for obj in (ns, operator, quota):
        api._bump(obj)
    objects["/api/v1/namespaces/t"] = ns
    objects["/api/v1/namespaces/%s" % OPERATOR] = operator
    path = "/api/v1/namespaces/t/resourcequotas/vm-quota" + SUFFIX
    objects[path] = quota
    before = copy.deepcopy(quota)
    result = V.reserve(api, "drain-1", {("t", "vm-quota" + SUFFIX): {"count/pods": "1"}}, "job", "drain", 600,
                       clock=Clock(), sleep=lambda s: None, rancher_sync_timeout=0,
                       lock={"holder": "job-1", "wait_timeout": 0})
    assert objects[path] == before
    assert not [k for k in objects if "/configmaps/" in k]
    (skipped,) = result["skipped"]
    assert skipped["backend"] == "aaq" and "t/vm-quota" in skipped["reason"]
    assert result["quotas"] == [] and not result["changed"]


def test_hugepages_kept_in_aaqs_quota_need_the_arq_raised_for_the_window():
    """hugepages-<size> (no requests. prefix) is not schedulable for AAQ: it lives in the native quota. A VM backed
    by 1Gi pages with 4Gi of memory charges hugepages-1Gi 4Gi per launcher pod (KubeVirt requests the guest memory
    in hugepages; the pod quota evaluator charges hugepages-<size> itself), so the target pod needs 4Gi more while
    the source pod runs, and no more after it: a window raise of the ARQ, from 4Gi to 8Gi."""
    owner = arq(hard={"limits.memory": "64Gi", "hugepages-1Gi": "4Gi"})
    quota = managed_quota(owner, used={"hugepages-1Gi": "4Gi"})
    assert quota["spec"]["hard"] == {"hugepages-1Gi": "4Gi"}
    vmi = make_vmi("vm1", "t")
    vmi["spec"]["domain"]["memory"] = {"hugepages": {"pageSize": "1Gi"}}
    snap = snapshot({"t": ([quota], [vmi])}, aaq_quotas={"t": [owner]}, aaq_cluster_quotas=[],
                    aaq_configs=[aaq_cr("VmiPodUsage")])
    snap["namespaces"]["t"]["metadata"]["labels"] = {GATING_LABEL: ""}
    ns = c.evaluate(snap, {"now": NOW})["namespaces"]["t"]
    assert ns["verdict"] == "blocked"
    (blocker,) = ns["blockers"]
    assert blocker["kind"] == "read_only_quota_lacks_room" and blocker["resource"] == "hugepages-1Gi"
    assert "hugepages-1Gi=4Gi" in blocker["message"]
    assert blocker["fix"].startswith("raise hugepages-1Gi of ApplicationAwareResourceQuota t/vm-quota to 8Gi for "
                                     "the maintenance window")
