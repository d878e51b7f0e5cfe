# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_check with DRA ResourceClaims (issue 27): a migration target's claims from ResourceClaimTemplates are
charged like its pod, only against quotas without scopes that track claim names; a shared claim, a missing or
unreadable template block that VM alone; the templates are read only where a quota charges claims."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import json

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as c
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import inventory as inv
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import test_check as tc
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import (
    NOW,
    make_quota,
    make_vmi,
    snapshot,
)

COUNT = "count/resourceclaims.resource.k8s.io"
NIC = "nic.example.com.deviceclass.resource.k8s.io/devices"
TEMPLATES_PATH = "/apis/resource.k8s.io/v1/namespaces/t/resourceclaimtemplates"


def template(name="nic", namespace="t", count=2):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "nic", "exactly": {"deviceClassName": "nic.example.com", "count": count}}]}}}}


def claim_vmi(name="vm1", namespace="t", entries=None, **kwargs):
    vmi = make_vmi(name, namespace, **kwargs)
    vmi["spec"]["resourceClaims"] = entries if entries is not None else [
        {"name": "nic", "resourceClaimTemplateName": "nic"}]
    return vmi


def claims_snapshot(quotas, vmis, templates=None, problems=None):
    snap = snapshot({"t": (quotas, vmis)})
    snap["claim_templates"] = {"t": dict((t["metadata"]["name"], t) for t in templates or [])} \
        if problems is None else {}
    snap["claim_templates_problems"] = problems or {}
    return snap


def test_a_template_backed_claim_is_charged_against_a_quota_that_tracks_claims():
    # the namespace has one claim of 2 devices (the source's): the target's second claim needs room
    quotas = [make_quota("dra", "t", {COUNT: "1", NIC: "2"}, used={COUNT: "1", NIC: "2"}),
              make_quota("compute", "t", {"limits.memory": "100Gi"})]
    report = c.evaluate(claims_snapshot(quotas, [claim_vmi()], [template()]), {"now": NOW})
    json.dumps(report)
    ns = report["namespaces"]["t"]
    assert ns["verdict"] == "needs_reservation" and ns["blockers"] == []
    dra = next(x for x in ns["quotas"] if x["name"] == "dra")
    assert dra["needed"] == {COUNT: "1", NIC: "2"}
    assert ns["vms"][0]["charge"][COUNT] == "1" and ns["vms"][0]["charge"][NIC] == "2"
    texts = [f["text"] for f in ns["fixes"]]
    assert "raise %s of quota t/dra to 2 for the maintenance window: batch 1 needs 1 more" % COUNT in texts
    assert "raise %s of quota t/dra to 4 for the maintenance window: batch 1 needs 2 more" % NIC in texts


def test_a_scoped_quota_charges_no_claim_and_no_claim_name_no_charge():
    quotas = [make_quota("dra", "t", {COUNT: "1", NIC: "2", "pods": "10"}, used={COUNT: "1", NIC: "2"},
                         scopes=["NotTerminating"])]
    report = c.evaluate(claims_snapshot(quotas, [claim_vmi()], [template()]), {"now": NOW})
    ns = report["namespaces"]["t"]
    assert ns["verdict"] == "ok"
    (dra,) = ns["quotas"]
    assert COUNT not in dra.get("needed", {}) and NIC not in dra["charge_total"]


def test_a_shared_claim_blocks_that_vm_alone():
    quotas = [make_quota("compute", "t", {"limits.memory": "100Gi"})]
    vmis = [claim_vmi("shared", entries=[{"name": "nic", "resourceClaimName": "nic-claim"}]), make_vmi("vm2", "t")]
    report = c.evaluate(claims_snapshot(quotas, vmis, []), {"now": NOW})
    ns = report["namespaces"]["t"]
    (warning,) = [w for w in ns["warnings"] if w["kind"] == "shared_resource_claim"]
    assert warning["vm"] == "shared" and warning["blocks"] == "vm"
    assert "ResourceClaim t/nic-claim" in warning["message"] and "unschedulable" in warning["message"]
    assert "resourceClaimTemplateName" in warning["fix"]
    assert report["batches"][0]["vms"] == ["t/vm2"]


def test_a_shared_claim_of_a_vm_that_cannot_live_migrate_is_no_extra_warning():
    quotas = [make_quota("compute", "t", {"limits.memory": "100Gi"})]
    vmi = claim_vmi("gpu", entries=[{"name": "gpu", "resourceClaimName": "gpu-claim"}], migratable=False)
    report = c.evaluate(claims_snapshot(quotas, [vmi], []), {"now": NOW})
    ns = report["namespaces"]["t"]
    assert [b["kind"] for b in ns["blockers"]] == ["not_live_migratable"]
    assert not [w for w in ns["warnings"] if w["kind"] == "shared_resource_claim"]


def test_a_missing_template_blocks_that_vm_alone_with_the_fix():
    quotas = [make_quota("dra", "t", {COUNT: "5"})]
    vmis = [claim_vmi("vm1", entries=[{"name": "nic", "resourceClaimTemplateName": "gone"}]), make_vmi("vm2", "t")]
    report = c.evaluate(claims_snapshot(quotas, vmis, [template()]), {"now": NOW})
    ns = report["namespaces"]["t"]
    (warning,) = [w for w in ns["warnings"] if w.get("vm") == "vm1"]
    assert warning["kind"] == "vm_input_invalid" and warning["blocks"] == "vm"
    assert "ResourceClaimTemplate t/gone, which does not exist" in warning["message"]
    assert warning["fix"].startswith("create ResourceClaimTemplate t/gone")
    assert report["batches"][0]["vms"] == ["t/vm2"]


def test_unreadable_templates_block_the_vms_that_need_them():
    quotas = [make_quota("dra", "t", {COUNT: "5"})]
    report = c.evaluate(claims_snapshot(quotas, [claim_vmi()], problems={"t": "not readable: forbidden"}),
                        {"now": NOW})
    ns = report["namespaces"]["t"]
    (warning,) = ns["warnings"]
    assert warning["kind"] == "claim_templates_unreadable" and warning["vm"] == "vm1"
    assert "not readable: forbidden" in warning["message"]
    assert "resourceclaimtemplates.resource.k8s.io" in warning["fix"]


@pytest.mark.parametrize("reason, says", [
    ("DisksNotLiveMigratable", "ReadWriteMany"),
    ("HostDeviceNotLiveMigratable", "host devices"),
    ("SomethingNew", "SomethingNew"),
])
def test_the_fix_of_a_vm_that_cannot_live_migrate_follows_its_reason(reason, says):
    quotas = [make_quota("big", "t", {"limits.memory": "100Gi"})]
    vmi = make_vmi("stuck", "t", migratable=False)
    vmi["status"]["conditions"][1]["reason"] = reason
    report = c.evaluate(snapshot({"t": (quotas, [vmi])}), {"now": NOW})
    (blocker,) = report["namespaces"]["t"]["blockers"]
    assert says in blocker["fix"]


# ---------------------------------------------------------------------------
# inventory: the templates are read only where a quota charges claims

def _objects(quota_hard, vmi_entries=True):
    objs = tc._objects(1, 1)
    for obj in objs["namespaces"]:
        obj["metadata"]["name"] = "t"
    for kind in ("resourcequotas", "virtualmachineinstances", "pods"):
        for obj in objs[kind]:
            obj["metadata"]["namespace"] = "t"
    objs["resourcequotas"][0]["spec"]["hard"] = quota_hard
    if vmi_entries:
        objs["virtualmachineinstances"][0]["spec"] = {"resourceClaims": [{"name": "nic",
                                                                          "resourceClaimTemplateName": "nic"}]}
    objs["resourceclaimtemplates"] = [template(), template("other", "elsewhere")]
    return objs


@pytest.fixture
def served(monkeypatch):
    monkeypatch.setitem(tc.GROUPS, "resourceclaimtemplates", "resource.k8s.io")


def test_inventory_reads_templates_only_where_a_quota_charges_claims(served):
    cluster = tc.FakeCluster(_objects({"limits.cpu": "10"}))
    snap = inv.read_inventory(cluster, {"namespaces": ["t"]})
    assert not cluster.lists(TEMPLATES_PATH) and snap.claim_templates == {}
    cluster = tc.FakeCluster(_objects({COUNT: "3"}, vmi_entries=False))
    inv.read_inventory(cluster, {"namespaces": ["t"]})
    assert not cluster.lists(TEMPLATES_PATH)
    cluster = tc.FakeCluster(_objects({COUNT: "3"}))
    snap = inv.read_inventory(cluster, {"namespaces": ["t"]})
    assert len(cluster.lists(TEMPLATES_PATH)) == 1
    assert list(snap.claim_templates) == ["t"] and list(snap.claim_templates["t"]) == ["nic"]


@pytest.mark.parametrize("how, says", [("forbidden", "not readable"), ("missing", "is not served")])
def test_inventory_notes_templates_it_cannot_read(served, how, says):
    cluster = tc.FakeCluster(_objects({COUNT: "3"}), **{how: ["resourceclaimtemplates"]})
    snap = inv.read_inventory(cluster, {"namespaces": ["t"]})
    assert snap.claim_templates == {} and says in snap.claim_templates_problems["t"]
    assert any("ResourceClaimTemplates of namespace(s) t" in note for note in snap.notes)


def test_inventory_without_the_api_group_reads_nothing():
    cluster = tc.FakeCluster(_objects({COUNT: "3"}))
    snap = inv.read_inventory(cluster, {"namespaces": ["t"]})
    assert not cluster.lists(TEMPLATES_PATH)
    assert "is not served" in snap.claim_templates_problems["t"]


def test_planned_charge_includes_claims_and_survives_the_versioned_plan():
    quotas = [make_quota("dra", "t", {COUNT: "1", NIC: "2"}, used={COUNT: "1", NIC: "2"})]
    snap = claims_snapshot(quotas, [claim_vmi()], [template()])
    scope_plan = c.plan(copy.deepcopy(snap), {"now": NOW})
    (vm,) = scope_plan.namespaces["t"].vms
    assert vm["charge"][COUNT] == 1 and vm["charge"][NIC] == 2
    assert COUNT not in vm["pod_charge"]
    assert q.charged_part(quotas[0], vm["charge"], vm["facts"]) == {COUNT: 1, NIC: 2}
