# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_migrate mode=follow beside a real `kubectl drain` (issue 12 item 2), as the lab's least-privilege user.

10 VMs in 3 namespaces on one node, each namespace's quota (pods, limits.memory) tightened to exactly what its
VMs use, so that KubeVirt's evacuation migrations (v1.7.4 with MigrationPriorityQueue: every one at once) are all
refused by quota on their own. kvquota_migrate follows them: it creates no migration, reserves just in time for
those KubeVirt runs next, releases each reservation once the source pods are gone. A sampler reads the quotas
during the run: the room reserved and not in use (spec.hard - status.used, in VMs' worth) never exceeds one group
reserved ahead of admission plus one group awaiting its release (2 x parallelOutboundMigrationsPerNode), so never
a reservation for every queued migration; at the end every migration succeeded, every quota is at its base, no
ledger is left.

With KubeVirt v1.9.0 (MigrationPriorityQueue GA, issue 27): a tenant's own migration (no spec.priority) waits,
refused by quota, older than the system-critical evacuation migrations of a drain that then wait with it; follow
mode reserves for the evacuation ones first (KubeVirt's order: priority, then age), the emulated KubeVirt admits
them first, and the tenant's migration runs later, still followed to the end.

Run: KVQ_LAB_REQUIRED=1 python3 -m pytest -q -p no:cacheprovider tests/integration/test_follow_lab.py
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import secrets
import subprocess
import threading
import time
from fractions import Fraction

import pytest

import modlab as M
from kvqlab import scenarios

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

PER_NODE = 2
RESOURCES = ("pods", "limits.memory")


def scenario(tag, counts, version="1.7.4", gates=("MigrationPriorityQueue",)):
    """counts[i] VMs of 1Gi in namespace fl-<tag>-<i>, all on node fl-<tag>-src; KubeVirt `version` with the
    feature `gates` (v1.7+ with MigrationPriorityQueue: evacuation creates every migration at once; before v1.7:
    per node up to the parallel limits)."""
    namespaces = ["fl-%s-%d" % (tag, i) for i in range(len(counts))]
    return scenarios.from_dict({
        "name": "follow-" + tag,
        "kubevirt": {"version": version, "configuration": {
            "evictionStrategy": "LiveMigrate",
            "developerConfiguration": {"featureGates": list(gates)},
            "migrations": {"parallelMigrationsPerCluster": 5, "parallelOutboundMigrationsPerNode": PER_NODE}}},
        "emulator": {"source_pod_delay_seconds": 1, "migration_seconds": 1.0},
        "nodes": [{"name": "fl-%s-src" % tag, "cpu": "64", "memory": "256Gi", "pods": "110"},
                  {"name": "fl-%s-dst-{i}" % tag, "count": 2, "cpu": "64", "memory": "256Gi", "pods": "110"}],
        "namespaces": [{"name": ns, "quotas": [{"name": "q", "hard": {"pods": "50", "limits.memory": "100Gi"}}]}
                       for ns in namespaces],
        "vms": [{"name": "vm-{i}", "count": count, "namespace": ns, "node": "fl-%s-src" % tag, "cpu": 1,
                 "memory": "1Gi", "limits": {"cpu": "1", "memory": "1Gi"}} for ns, count in zip(namespaces, counts)],
    }), namespaces


def quota_numbers(r, ns):
    q = M.quota(r, ns, "q")
    hard = dict((k, parse_quantity(v)) for k, v in (q["spec"].get("hard") or {}).items() if k in RESOURCES)
    used = dict((k, parse_quantity(v)) for k, v in ((q.get("status") or {}).get("used") or {}).items() if k in RESOURCES)
    return hard, used


def tighten(r, namespaces, counts):
    """Once the tenants settled, tighten each quota q to what its VMs use, so that no migration target fits without
    a reservation: ({ns: spec.hard now, the base}, {ns: {resource: one VM's launcher charge}})."""
    base, units = {}, {}
    for ns, count in zip(namespaces, counts):
        M.wait(lambda ns=ns, count=count: M.settled(r, ns, count), 60, "tenant %s settled" % ns)
        _hard, used = quota_numbers(r, ns)
        tight = dict((name, M.quota(r, ns, "q")["status"]["used"][name]) for name in RESOURCES)
        r.patch("/api/v1/namespaces/%s/resourcequotas/q" % ns, {"spec": {"hard": tight}})
        base[ns] = tight
        units[ns] = dict((name, Fraction(used[name]) / count) for name in RESOURCES)
        M.wait(lambda ns=ns, tight=tight: M.quota(r, ns, "q").get("status", {}).get("hard") == tight, 30,
               "quota %s enforced" % ns)
    return base, units


class UnusedRoomSampler(threading.Thread):
    """Every 0.2 s: per namespace, the room its quota has beyond what its pods use (spec.hard - status.used), in
    VMs' worth (units: one VM's launcher charge); the largest total over the namespaces, per resource."""

    def __init__(self, r, namespaces, units):
        threading.Thread.__init__(self, daemon=True)
        self.r, self.namespaces, self.units = r, namespaces, units
        self.stopping = threading.Event()
        self.peak = dict((name, Fraction(0)) for name in RESOURCES)
        self.samples = 0

    def run(self):
        while not self.stopping.is_set():
            total = dict((name, Fraction(0)) for name in RESOURCES)
            for ns in self.namespaces:
                hard, used = quota_numbers(self.r, ns)
                for name in RESOURCES:
                    total[name] += Fraction(hard[name] - used.get(name, 0)) / self.units[ns][name]
            for name in RESOURCES:
                self.peak[name] = max(self.peak[name], total[name])
            self.samples += 1
            time.sleep(0.2)


def kubectl_drain(lab, node, timeout):
    argv = ["/usr/bin/kubectl", "--kubeconfig", str(lab.admin_kubeconfig), "drain", node, "--timeout=%ds" % timeout]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 60, check=False)
    return res.returncode, res.stdout + res.stderr


def test_follow_beside_kubectl_drain_reserves_just_in_time_and_restores_every_quota(lab, emu, r, user):
    tag = secrets.token_hex(2)
    counts = (4, 3, 3)
    sc, namespaces = scenario(tag, counts)
    scenarios.apply(lab, sc, timeout=180)
    source = "fl-%s-src" % tag
    outcome = {}
    try:
        base, units = tighten(r, namespaces, counts)

        def follow():
            outcome["result"] = M.run_module("kvquota_migrate", {
                "mode": "follow", "nodes": [source], "follow_until": "nodes_schedulable", "deadline_seconds": 400,
                "poll_interval": 0.5, "top_up_settle_seconds": 20, "ttl": "30m"}, user, timeout=600)

        follower = threading.Thread(target=follow, daemon=True)
        sampler = UnusedRoomSampler(r, namespaces, units)
        follower.start()
        sampler.start()
        try:
            time.sleep(5)        # the module is up and watching before the drain evicts anything
            code, out = kubectl_drain(lab, source, timeout=300)
            assert code == 0, out
            assert "Eviction triggered evacuation of VMI" in out, out
            lab.kubectl("uncordon", source)
            follower.join(200)
            assert not follower.is_alive(), "kvquota_migrate did not end after the node was uncordoned"
        finally:
            sampler.stopping.set()
            sampler.join()

        result = M.assert_ok(outcome["result"], "kvquota_migrate mode=follow")
        print("\n".join(result["progress"]))
        assert result["mode"] == "follow" and result["ended_by"] == "nodes %s schedulable" % source, result["ended_by"]
        assert result["migrations_created"] == [] and result["reservations_held"] == []
        migrations = []
        for ns in namespaces:
            migrations += r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]
        assert len(migrations) == sum(counts) and all(m["status"]["phase"] == "Succeeded" for m in migrations)
        assert all(m["metadata"]["name"].startswith("kubevirt-evacuation-") for m in migrations)
        # the migrations followed are KubeVirt's (by namespace/name; their UIDs are in the refs), those KubeVirt
        # admitted in a group's room included (adopted). Not asserted to be all of them: one admitted between the
        # poll's read and the release of the group whose room it took runs without a reservation of its own
        names = set("%s/%s" % (m["metadata"]["namespace"], m["metadata"]["name"]) for m in migrations)
        assert result["migrations_reused"] and set(result["migrations_reused"]) <= names, result["migrations_reused"]
        print("followed %d of %d migrations" % (len(result["migrations_reused"]), len(names)))
        vmis = [v for ns in namespaces for v in r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"]]
        assert all(v["status"]["nodeName"] != source for v in vmis)
        # reserved room not in use (spec.hard - status.used) never exceeded, in VMs' worth, one group reserved ahead
        # of KubeVirt's admission (at most parallelOutboundMigrationsPerNode migrations) plus one group whose source
        # pods just ended (released at the next poll): never a reservation for every queued migration (10 queued)
        assert sampler.samples > 10
        assert sampler.peak["pods"] <= 2 * PER_NODE and sampler.peak["limits.memory"] <= 2 * PER_NODE, sampler.peak
        assert sampler.peak["pods"] > 0, "no reservation was ever seen"
        for ns in namespaces:
            M.wait(lambda ns=ns: M.quota(r, ns, "q")["spec"]["hard"] == base[ns], 30, "quota %s at its base" % ns)
        assert [key for key in M.ledgers(r) if key.split("/")[0] in namespaces] == []
    finally:
        lab.kubectl("uncordon", source, check=False)
        scenarios.delete(lab, sc)


def test_follow_reserves_for_system_critical_evacuations_before_an_older_user_migration(lab, emu, r, user):
    """KubeVirt v1.9.0 runs pending migrations by spec.priority, then oldest first (pkg/util/migrations/migrations.go
    PriorityFromMigration, pkg/virt-controller/watch/migration/migration.go reEnqueueHighestPriorityPendingMigrations):
    the evacuation controller's are system-critical (drain/evacuation/evacuation.go GenerateNewMigration), a user's
    own has none (the create admitter refuses it from anyone but virt-controller). The room follow mode reserves
    first goes to evacuation migrations, though the user's migration is older."""
    tag = secrets.token_hex(2)
    counts = (3, 2)
    sc, namespaces = scenario(tag, counts, version="1.9.0", gates=())
    scenarios.apply(lab, sc, timeout=180)
    source = "fl-%s-src" % tag
    outcome, drained = {}, {}
    try:
        base, _units = tighten(r, namespaces, counts)
        own = M.create_vmim(r, namespaces[0], "vm-1", name="tenant-own")     # the VMs are vm-1 .. vm-n
        M.wait(lambda: M.rejected(M.vmim(r, namespaces[0], own)), 60, "the user's migration refused by quota")
        assert "priority" not in M.vmim(r, namespaces[0], own)["spec"]
        time.sleep(1.2)      # creationTimestamp has seconds: the user's migration is strictly the oldest

        def evacuations():
            return [m for ns in namespaces
                    for m in r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]
                    if m["metadata"]["name"].startswith("kubevirt-evacuation-")]

        drainer = threading.Thread(target=lambda: drained.update(out=kubectl_drain(lab, source, timeout=300)),
                                   daemon=True)
        drainer.start()
        # every other VM gets a system-critical evacuation migration, refused by quota like the user's: they all wait
        M.wait(lambda: len(evacuations()) == sum(counts) - 1 and all(M.rejected(m) for m in evacuations()), 120,
               "the evacuation migrations refused by quota")
        assert all(m["spec"].get("priority") == "system-critical" for m in evacuations())
        assert M.phase(M.vmim(r, namespaces[0], own)) == "Pending"

        def follow():
            outcome["result"] = M.run_module("kvquota_migrate", {
                "mode": "follow", "nodes": [source], "follow_until": "nodes_schedulable", "deadline_seconds": 400,
                "poll_interval": 0.5, "top_up_settle_seconds": 20, "ttl": "30m"}, user, timeout=600)

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        drainer.join(360)
        assert not drainer.is_alive(), "kubectl drain did not end"
        code, out = drained["out"]
        assert code == 0, out
        lab.kubectl("uncordon", source)
        follower.join(200)
        assert not follower.is_alive(), "kvquota_migrate did not end after the node was uncordoned"

        result = M.assert_ok(outcome["result"], "kvquota_migrate mode=follow")
        print("\n".join(result["progress"]))
        groups = [line for line in result["progress"] if ": following " in line]
        assert groups, result["progress"]
        first = groups[0].split(": following ", 1)[1].split(" (parallel limits", 1)[0].split(", ")
        # the first room reserved is for PER_NODE evacuation migrations, not for the older user's migration
        assert len(first) == PER_NODE and all("/kubevirt-evacuation-" in name for name in first), groups[0]
        ours = "%s/%s" % (namespaces[0], own)
        assert ours not in groups[0]
        migrations = {}
        for ns in namespaces:
            for m in r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]:
                migrations["%s/%s" % (ns, m["metadata"]["name"])] = m
        assert len(migrations) == sum(counts) and all(m["status"]["phase"] == "Succeeded" for m in migrations.values())
        # a later group that follows the user's migration lists it after any evacuation migration it follows too
        for line in groups:
            named = line.split(": following ", 1)[1].split(" (parallel limits", 1)[0].split(", ")
            assert ours not in named or named[-1] == ours, line
        # KubeVirt's admissions (target pod created), for the record: it too hands a slot to a higher priority
        # migration first, but one that is waiting out a quota refusal's back-off holds none (the apiserver's quota
        # cache can refuse it just after the reservation), and then the user's migration may run in the room first
        # (follow mode adopts it there and gives the evacuation migration back to the queue)
        admitted = sorted((float(m["metadata"]["annotations"]["kvqlab.io/scheduling-since"]), k)
                          for k, m in migrations.items())
        print("admitted in this order: %s" % ", ".join(k for _t, k in admitted))
        assert result["ended_by"] == "nodes %s schedulable" % source and result["reservations_held"] == []
        assert result["migrations_created"] == []
        vmis = [v for ns in namespaces for v in r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"]]
        assert all(v["status"]["nodeName"] != source for v in vmis)
        for ns in namespaces:
            M.wait(lambda ns=ns: M.quota(r, ns, "q")["spec"]["hard"] == base[ns], 30, "quota %s at its base" % ns)
        assert [key for key in M.ledgers(r) if key.split("/")[0] in namespaces] == []
    finally:
        lab.kubectl("uncordon", source, check=False)
        scenarios.delete(lab, sc)
