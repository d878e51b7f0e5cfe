# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Release readiness as pure rules over what was read (release_readiness.own_blockers on OwnFacts): no cluster,
no fake API, just the objects a reader would have found."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import release_readiness as RR
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger as L

NOW = 1735689600.0
T0 = "2025-01-01T00:00:00Z"        # NOW
BEFORE = "2024-12-31T23:00:00Z"
AFTER = "2025-01-01T00:00:30Z"


def vmim(name, uid, phase, source=None, created=T0):
    return {"metadata": {"name": name, "namespace": "t", "uid": uid, "creationTimestamp": created},
            "status": {"phase": phase, "migrationState": {"sourcePod": source} if source else {}}}


def launcher(name, uid, vmi_name, vmi_uid, created=BEFORE, node="node-1", phase="Running"):
    return {"metadata": {"name": name, "namespace": "t", "uid": uid, "creationTimestamp": created,
                         "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": vmi_name,
                                              "uid": vmi_uid,
                                              "controller": True}]},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


def vmi(name, uid, node):
    return {"metadata": {"name": name, "namespace": "t", "uid": uid}, "status": {"nodeName": node}}


def entry(migrations=(), source_pods=()):
    return L.Reservation("r1", {"limits.cpu": "1"}, refs={"migrations": list(migrations), "sourcePods": list(source_pods)})


def test_a_migration_under_way_blocks_and_is_named_running():
    facts = RR.OwnFacts(((({"namespace": "t", "name": "m1", "uid": "u1"}), vmim("m1", "u1", "Running")),), (), (), {})
    reasons, running = RR.own_blockers(facts, NOW)
    assert reasons == ["migration t/m1 is Running"] and running == [("t", "m1")]


def test_a_namesake_migration_of_a_tenant_is_not_waited_for():
    facts = RR.OwnFacts((({"namespace": "t", "name": "m1", "uid": "u1"}, vmim("m1", "tenants", "Running")),), (), (), {})
    assert RR.own_blockers(facts, NOW) == ([], [])


def test_a_source_pod_still_counted_blocks_unless_its_vm_still_runs_on_it():
    pod = launcher("virt-launcher-vm-1-abc", "p1", "vm-1", "vmi-1")
    ref = {"namespace": "t", "name": pod["metadata"]["name"], "uid": "p1"}
    moved = RR.OwnFacts((), ((ref, pod),), (), {("t", "vm-1"): vmi("vm-1", "vmi-1", "node-2")})
    assert RR.own_blockers(moved, NOW)[0] == [
        "source pod t/virt-launcher-vm-1-abc (Running) still counts (it ends by itself once its migration completed)"]
    stayed = RR.OwnFacts((), ((ref, pod),), (), {("t", "vm-1"): vmi("vm-1", "vmi-1", "node-1")})
    assert RR.own_blockers(stayed, NOW) == ([], [])


def test_a_pod_a_tenant_created_under_the_source_pods_name_after_the_migration_is_not_waited_for():
    migration = vmim("m1", "u1", "Succeeded", source="virt-launcher-vm-1-abc")
    mig_ref = {"namespace": "t", "name": "m1", "uid": "u1"}
    lingering = RR._lingering(((mig_ref, migration),))
    assert lingering == [{"namespace": "t", "name": "virt-launcher-vm-1-abc", "not_after": NOW}]
    tenants = launcher("virt-launcher-vm-1-abc", "x", "vm-1", "vmi-1", created=AFTER)
    facts = RR.OwnFacts(((mig_ref, migration),), (), ((lingering[0], tenants),), {})
    assert RR.own_blockers(facts, NOW) == ([], [])
    kubevirts = launcher("virt-launcher-vm-1-abc", "p1", "vm-1", "vmi-1", created=BEFORE)
    facts = RR.OwnFacts(((mig_ref, migration),), (), ((lingering[0], kubevirts),), {("t", "vm-1"): None})
    assert len(RR.own_blockers(facts, NOW)[0]) == 1


def test_the_reader_reads_each_claimed_vmi_once_and_only_for_counted_pods():
    pods = {"a": launcher("a", "pa", "vm-1", "vmi-1"), "b": launcher("b", "pb", "vm-1", "vmi-1"),
            "c": launcher("c", "pc", "vm-2", "vmi-2", phase="Succeeded")}
    reads = []

    class Cluster(object):
        def get_pod(self, namespace, name):
            reads.append(("pod", name))
            return pods[name]

        def get_custom(self, group, version, plural, name, namespace=None):
            reads.append((plural, name))
            return vmi(name, "vmi-1", "node-2")

    book = entry(source_pods=[{"namespace": "t", "name": n, "uid": "p" + n} for n in "abc"])
    facts = RR.read_own(Cluster(), book, "t", NOW)
    assert [r for r in reads if r[0] == "virtualmachineinstances"] == [("virtualmachineinstances", "vm-1")]
    assert len(RR.own_blockers(facts, NOW)[0]) == 2


def test_the_usage_read_takes_the_source_pods_the_own_read_read():
    """A release decides over one read of each recorded source pod: read_usage reads the namespace's lists, never
    those pods again."""
    pod = launcher("a", "pa", "vm-1", "vmi-1")
    own = RR.OwnFacts((), (({"namespace": "t", "name": "a", "uid": "pa"}, pod),), (), {})

    class Cluster(object):
        def get_pod(self, namespace, name):
            raise AssertionError("a source pod read twice")

        def list_custom(self, group, version, plural, namespace=None):
            return []

        def list_pods(self, namespace):
            return [pod]

    facts, unreadable = RR.read_usage(Cluster(), own, "t", ["limits.cpu"])
    assert facts.sources == own.sources and facts.pods == (pod,) and unreadable is None


# ---------------------------------------------------------------------------
# DRA ResourceClaims in what really uses the quota (issue 27)

CLAIM_COUNT = "count/resourceclaims.resource.k8s.io"
NIC = "nic.example.com.deviceclass.resource.k8s.io/devices"


def claim(name, pod_uid, created=AFTER, deleting=None, count=1):
    meta = {"name": name, "namespace": "t", "uid": "claim-" + name, "creationTimestamp": created,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "some-pod", "uid": pod_uid,
                                 "controller": True, "blockOwnerDeletion": True}] if pod_uid else []}
    if deleting:
        meta["deletionTimestamp"] = deleting
    return {"metadata": meta, "spec": {"devices": {"requests": [
        {"name": "nic", "exactly": {"deviceClassName": "nic.example.com", "count": count}}]}}}


def claims_quota(scopes=None):
    spec = {"hard": {CLAIM_COUNT: "1", NIC: "2"}}
    if scopes:
        spec["scopes"] = scopes
    return {"metadata": {"name": "dra", "namespace": "t"}, "spec": spec, "status": {"used": {CLAIM_COUNT: "2"}}}


def claims_usage(claims, pods, scopes=None, source_uid="p-src"):
    book = L.new_ledger("t", "dra", uid="q-1")
    reservation = L.Reservation("r1", {CLAIM_COUNT: "1", NIC: "2"}, created=T0, refs={
        "vms": [{"namespace": "t", "name": "vm-1", "uid": "vmi-1"}],
        "sourcePods": [{"namespace": "t", "name": "virt-launcher-vm-1-src", "uid": source_uid}]})
    book.reservations["r1"] = reservation
    sources = tuple((ref, next((p for p in pods if p["metadata"]["uid"] == ref["uid"]), None))
                    for ref in reservation.refs["sourcePods"])
    facts = RR.UsageFacts((vmi("vm-1", "vmi-1", "node-2"),), (), sources, tuple(pods), claims=tuple(claims))
    return RR.usage_now(claims_quota(scopes), book, reservation, "t", [CLAIM_COUNT, NIC], facts, NOW + 60)


def test_the_source_pods_claim_is_settling_once_its_pod_ended_and_the_targets_is_the_vms():
    source = launcher("virt-launcher-vm-1-src", "p-src", "vm-1", "vmi-1", phase="Succeeded")
    target = launcher("virt-launcher-vm-1-tgt", "p-tgt", "vm-1", "vmi-1", created=AFTER, node="node-2")
    usage = claims_usage([claim("src-nic", "p-src", created=BEFORE), claim("tgt-nic", "p-tgt", count=2)],
                         [source, target])
    assert usage["charged"] == {CLAIM_COUNT: 2, NIC: 3}
    assert usage["settling"] == {CLAIM_COUNT: 1, NIC: 1}
    assert usage["known"] >= {CLAIM_COUNT, NIC} and usage["objects"] == []
    assert "ResourceClaim t/src-nic of source pod virt-launcher-vm-1-src" in usage["settling_pods"][0]
    # so the release waits for the claim to go instead of calling it over-use
    lasting, waiting = RR.usage_verdict({CLAIM_COUNT: 2, NIC: 3}, {CLAIM_COUNT: 1, NIC: 2}, [CLAIM_COUNT, NIC],
                                        usage["charged"], usage["known"], usage["settling"])
    assert lasting == [] and waiting == [CLAIM_COUNT, NIC]


def test_the_claim_of_a_source_pod_still_running_is_not_settling():
    source = launcher("virt-launcher-vm-1-src", "p-src", "vm-1", "vmi-1")
    usage = claims_usage([claim("src-nic", "p-src", created=BEFORE)], [source])
    assert usage["settling"] == {} and usage["charged"] == {CLAIM_COUNT: 1, NIC: 1}


def test_a_claim_created_during_the_reservation_that_no_reserved_vm_owns_is_named():
    source = launcher("virt-launcher-vm-1-src", "p-src", "vm-1", "vmi-1", phase="Succeeded")
    tenant = launcher("tenant-pod", "p-tenant", "other", "vmi-other")
    usage = claims_usage([claim("tenant-nic", "p-tenant"), claim("loose", None),
                          # a claim naming the source pod by name only (another UID) is not the source's
                          claim("fake", "not-the-source-uid")], [source, tenant])
    assert sorted(o["name"] for o in usage["objects"]) == ["fake", "loose", "tenant-nic"]
    assert all(o["kind"] == "ResourceClaim" for o in usage["objects"])
    assert usage["settling"] == {}


def test_a_scoped_quota_counts_no_claim():
    usage = claims_usage([claim("tenant-nic", "p-x")], [], scopes=["NotTerminating"])
    assert usage["charged"] == {} and CLAIM_COUNT not in usage["known"]


def test_the_usage_read_lists_claims_only_when_a_claim_name_is_over():
    listed = []

    class Cluster(object):
        def list_custom(self, group, version, plural, namespace=None):
            return []

        def list_pods(self, namespace):
            return []

        def request(self, method, path, query=None, what=None, **kwargs):
            listed.append(path)
            return {"items": [claim("c", "p")], "metadata": {}}

    own = RR.OwnFacts((), (), (), {})
    facts, unreadable = RR.read_usage(Cluster(), own, "t", ["limits.cpu"])
    assert facts.claims is None and listed == []
    facts, unreadable = RR.read_usage(Cluster(), own, "t", [CLAIM_COUNT])
    assert listed == ["/apis/resource.k8s.io/v1/namespaces/t/resourceclaims"] and len(facts.claims) == 1
    assert unreadable is None
