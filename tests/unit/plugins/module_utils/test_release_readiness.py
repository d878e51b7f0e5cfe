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
