# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""follow.py and executor_config.py: which migrations KubeVirt runs next (parallel limits, priority then age,
identity by UID), when a scope is idle, the configuration's checks, and a follow run against a fake cluster whose
KubeVirt admits a migration only once a reservation recorded its UID: no migration created, never more reserved at
once than the parallel limits allow, every reservation released, resumed from the ledgers after an
interruption."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import re

import pytest

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import service_fakes
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import follow as f
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as headroom_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import migrate as m
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError, WaitTimeoutError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.executor_config import ExecutorConfig
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.ledger import Reservation
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.timeutil import format_time


_ABSENT = object()


def vmim(ns, name, vmi, uid, created, phase="Pending", source=None, target_pod=None, priority=_ABSENT):
    status = {"phase": phase}
    if source or target_pod:
        status["migrationState"] = dict(sourceNode=source, targetPod=target_pod)
    spec = {"vmiName": vmi}
    if priority is not _ABSENT:
        spec["priority"] = priority
    return {"metadata": {"namespace": ns, "name": name, "uid": uid, "creationTimestamp": created},
            "spec": spec, "status": status}


def vmi(ns, name, node, **status):
    return {"metadata": {"namespace": ns, "name": name, "labels": status.pop("labels", {})},
            "status": dict(status, nodeName=node)}


def everything(_obj, _node):
    return True


# -- which migrations run next -------------------------------------------------------------------------------------

def test_the_oldest_pending_migrations_within_the_per_node_limit_are_next():
    vmis = dict(((v["metadata"]["namespace"], v["metadata"]["name"]), v) for v in
                [vmi("a", "vm-%d" % i, "n1") for i in range(1, 6)])
    queue = [vmim("a", "m%d" % i, "vm-%d" % i, "u%d" % i, "2026-11-24T10:00:0%dZ" % (9 - i)) for i in range(1, 6)]
    chosen = f.pick_next(queue, vmis, set(), 5, 2, everything)
    assert [c["metadata"]["uid"] for c in chosen] == ["u5", "u4"]     # the two oldest, parallelOutbound 2


def test_migrations_in_flight_and_followed_ones_take_their_slots():
    vmis = dict(((v["metadata"]["namespace"], v["metadata"]["name"]), v) for v in
                [vmi("a", "vm-%d" % i, "n1") for i in range(1, 5)] + [vmi("b", "vm-9", "n2")])
    queue = [vmim("a", "m1", "vm-1", "u1", "t1", phase="Running", source="n1", target_pod="p"),   # admitted
             vmim("a", "m2", "vm-2", "u2", "t2"),                                                  # followed
             vmim("a", "m3", "vm-3", "u3", "t3"), vmim("a", "m4", "vm-4", "u4", "t4"),
             vmim("b", "m9", "vm-9", "u9", "t5"),
             vmim("a", "old", "vm-4", "u0", "t0", phase="Succeeded")]
    # n1 has 2 in flight (u1 admitted, u2 followed): nothing more from n1; n2 has a slot
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, {"u2"}, 5, 2, everything)] == ["u9"]
    # the cluster-wide limit counts both nodes
    assert f.pick_next(queue, vmis, {"u2"}, 2, 2, everything) == []


def test_a_namespace_waiting_for_admission_scope_and_missing_vmis_are_skipped():
    vmis = dict(((v["metadata"]["namespace"], v["metadata"]["name"]), v) for v in
                [vmi("a", "vm-1", "n1"), vmi("b", "vm-2", "n1"), vmi("c", "vm-3", "n3")])
    queue = [vmim("a", "m1", "vm-1", "u1", "t1"), vmim("b", "m2", "vm-2", "u2", "t2"),
             vmim("c", "m3", "vm-3", "u3", "t3"), vmim("d", "m4", "gone", "u4", "t0")]

    def on_n1(_obj, node):
        return node == "n1"
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, set(), 5, 2, on_n1, ["a"])] == ["u2"]


# KubeVirt v1.9.0 orders pending migrations by spec.priority (issue 27). Expected orders from its code:
# - pkg/util/migrations/migrations.go PriorityFromMigration: "system-critical" 100, "user-triggered" 50,
#   "system-maintenance" 20; absent or any other value QueuePriorityDefault 0 (an exact match of the string).
# - pkg/virt-controller/watch/migration/migration.go reEnqueueHighestPriorityPendingMigrations (pendings sorted by
#   that priority, highest first) and the controller-runtime priority queue it feeds (vendor/sigs.k8s.io/
#   controller-runtime/pkg/controller/priorityqueue/priorityqueue.go less: priority, then the order added, that is
#   creation for migrations added as they are created); handleTargetPodCreation: a migration at the per-node limit is
#   put back with a delay and the next one is handled, so it does not hold the cluster's slots.
# - drain/evacuation/evacuation.go GenerateNewMigration: system-critical (system-maintenance when the VMI's eviction
#   came from the descheduler); workload-updater/workload-updater.go: system-critical, user-triggered while a hotplug
#   or volume update is in progress; virt-api rest/lifecycle.go (virtctl migrate) and a user's own VMIM: none (the
#   migration create admitter refuses spec.priority from anyone but virt-controller).

def _vmis(*specs):
    return dict(((v["metadata"]["namespace"], v["metadata"]["name"]), v) for v in [vmi(*s) for s in specs])


def test_kubevirt_runs_system_critical_migrations_first_then_by_priority_then_oldest():
    vmis = _vmis(*[("t%d" % i, "vm-%d" % i, "n%d" % i) for i in range(1, 7)])
    queue = [vmim("t1", "kubevirt-migrate-vm-1", "vm-1", "u-user", "2026-11-24T10:00:00Z"),          # virtctl migrate
             vmim("t2", "kubevirt-evacuation-b", "vm-2", "u-desched", "2026-11-24T10:00:01Z",
                  priority="system-maintenance"),                                                   # descheduler
             vmim("t3", "kubevirt-workload-update-c", "vm-3", "u-hotplug", "2026-11-24T10:00:02Z",
                  priority="user-triggered"),                                                       # hotplug
             vmim("t4", "kubevirt-evacuation-d", "vm-4", "u-evac-late", "2026-11-24T10:00:04Z",
                  priority="system-critical"),
             vmim("t5", "kubevirt-workload-update-e", "vm-5", "u-update", "2026-11-24T10:00:03Z",
                  priority="system-critical"),                                                      # launcher update
             vmim("t6", "user-2", "vm-6", "u-user-late", "2026-11-24T10:00:05Z")]
    order = ["u-update", "u-evac-late", "u-hotplug", "u-desched", "u-user", "u-user-late"]
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, set(), 6, 2, everything)] == order
    # two free slots go to the system-critical ones, though the user's migration is older than both
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, set(), 2, 2, everything)] == order[:2]
    assert [f.queue_priority(v) for v in queue] == [0, 20, 50, 100, 100, 0]


@pytest.mark.parametrize("value", [None, "", "System-Critical", "system-critical ", "critical", "1000", 1000, 100,
                                   -1, 1.5, True, ["system-critical"], {"name": "system-critical"}])
def test_a_priority_kubevirt_does_not_know_counts_as_its_default(value):
    """Garbage, another case, a number (even QueuePriorityRunning's 1000) or another type: PriorityFromMigration's
    default 0, never above a known class and never an error."""
    vmis = _vmis(("t1", "vm-1", "n1"), ("t2", "vm-2", "n2"), ("t3", "vm-3", "n3"))
    queue = [vmim("t1", "tenant", "vm-1", "u-odd", "2026-11-24T10:00:00Z", priority=value),
             vmim("t2", "evac", "vm-2", "u-evac", "2026-11-24T10:00:02Z", priority="system-maintenance"),
             vmim("t3", "user", "vm-3", "u-user", "2026-11-24T10:00:01Z")]
    assert f.queue_priority(queue[0]) == 0
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, set(), 3, 2, everything)] == \
        ["u-evac", "u-odd", "u-user"]
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, set(), 1, 2, everything)] == ["u-evac"]
    assert f.queue_priority({"metadata": {}, "spec": None}) == 0 and f.queue_priority({}) == 0


def test_a_higher_priority_migration_at_its_nodes_limit_leaves_the_slot_to_another_node():
    vmis = _vmis(("a", "vm-1", "n1"), ("a", "vm-2", "n1"), ("b", "vm-3", "n2"), ("b", "vm-4", "n2"))
    queue = [vmim("a", "running", "vm-1", "u-run", "t0", phase="Running", source="n1", target_pod="p"),
             vmim("a", "evac", "vm-2", "u-evac", "t2", priority="system-critical"),
             vmim("b", "user", "vm-3", "u-user", "t1"),
             vmim("b", "update", "vm-4", "u-upd", "t3", priority="user-triggered")]
    # n1 is at parallelOutboundMigrationsPerNode 1: its system-critical migration waits, n2's go in priority order
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, set(), 5, 1, everything)] == ["u-upd"]
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, set(), 5, 2, everything)] == \
        ["u-evac", "u-upd", "u-user"]


def test_a_tenants_priority_cannot_outrank_system_critical_migrations_of_other_namespaces():
    """A tenant's migration is at most system-critical (where the webhook lets a user set it at all): it ties with
    evacuations and the older goes first, as in KubeVirt; any other value is the default."""
    vmis = _vmis(("tenant", "vm-1", "n1"), ("tenant", "vm-2", "n2"), ("other", "vm-3", "n3"))
    queue = [vmim("tenant", "a", "vm-1", "u-a", "2026-11-24T10:00:02Z", priority="system-critical"),
             vmim("tenant", "b", "vm-2", "u-b", "2026-11-24T10:00:00Z", priority=10 ** 9),
             vmim("other", "evac", "vm-3", "u-evac", "2026-11-24T10:00:01Z", priority="system-critical")]
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, set(), 1, 2, everything)] == ["u-evac"]
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, set(), 3, 2, everything)] == \
        ["u-evac", "u-a", "u-b"]


def test_idle_means_no_migration_and_no_vmi_marked_in_scope():
    done = [vmim("a", "m1", "vm-1", "u1", "t1", phase="Succeeded", source="n1")]
    calm = {("a", "vm-1"): vmi("a", "vm-1", "n2")}
    draining = f.MoveMarks(cordoned=["n1"], outdated=1)
    assert f.idle_in_scope(done, calm, everything, draining)
    assert not f.idle_in_scope(done + [vmim("a", "m2", "vm-1", "u2", "t2")], calm, everything, draining)
    evacuating = {("a", "vm-1"): vmi("a", "vm-1", "n1", evacuationNodeName="n1")}
    assert not f.idle_in_scope(done, evacuating, everything, draining)
    outdated = {("a", "vm-1"): vmi("a", "vm-1", "n1", labels={f.OUTDATED_LABEL: ""})}
    assert not f.idle_in_scope(done, outdated, everything, draining)
    assert f.idle_in_scope(done, outdated, lambda obj, node: obj["metadata"]["namespace"] == "other", draining)


def test_a_mark_the_control_plane_does_not_back_keeps_no_window_open():
    """A tenant writes its VMI's status and labels (the VMI has no status subresource): an evacuation mark counts
    only while the node it names is cordoned, an outdated-launcher label only while the KubeVirt CR counts outdated
    workloads. Else one forged mark held every window until its deadline (and the reaper behind it)."""
    done = [vmim("a", "m1", "vm-1", "u1", "t1", phase="Succeeded", source="n1")]
    forged = {("a", "vm-1"): vmi("a", "vm-1", "n1", evacuationNodeName="no-such-node-7")}
    assert f.idle_in_scope(done, forged, everything, f.MoveMarks(cordoned=["n1"], outdated=0))
    uncordoned = {("a", "vm-1"): vmi("a", "vm-1", "n1", evacuationNodeName="n1")}
    assert f.idle_in_scope(done, uncordoned, everything, f.MoveMarks(cordoned=[], outdated=0))
    labelled = {("a", "vm-1"): vmi("a", "vm-1", "n1", labels={f.OUTDATED_LABEL: ""})}
    assert f.idle_in_scope(done, labelled, everything, f.MoveMarks(cordoned=["n1"], outdated=0))
    # a second reservation for a moved VM only on a mark the control plane backs
    marks = f.MoveMarks(cordoned=["n2"], outdated=0)
    moved = vmi("a", "vm-1", "n3", evacuationNodeName="n3")
    assert not marks.marked_again(moved)
    assert marks.marked_again(vmi("a", "vm-1", "n2", evacuationNodeName="n2"))
    assert not f.MoveMarks(cordoned=["n2"], outdated=0).marked_again(vmi("a", "vm-1", "n2", labels={f.OUTDATED_LABEL: ""}))
    assert f.MoveMarks(cordoned=[], outdated=3).marked_again(vmi("a", "vm-1", "n2", labels={f.OUTDATED_LABEL: ""}))


# -- configuration ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options,named", [
    ({"mode": "sideways"}, "mode 'sideways'"),
    ({"mode": "follow", "follow_until": "soon"}, "follow_until 'soon'"),
    ({"mode": "follow", "follow_until": "nodes_schedulable"}, "names no node"),
    ({"mode": "follow", "follow_until": "deadline"}, "without deadline_seconds"),
    ({"mode": "follow", "deadline_seconds": -1}, "deadline_seconds -1"),
    ({"colour": "blue"}, "unknown executor option(s) colour"),
])
def test_bad_configurations_are_refused_with_the_option_named(options, named):
    with pytest.raises(InputError) as err:
        ExecutorConfig.build("node-1" if options.get("mode") != "follow" else None, **options)
    assert named in str(err.value)


def test_drive_needs_a_node_and_the_defaults_are_filled_in():
    with pytest.raises(InputError):
        ExecutorConfig.build(None)
    config = ExecutorConfig.build("node-1", clock=lambda: 0.0)
    assert (config.reservation_prefix, config.top_up_cap) == ("node-1", "25%")
    # the clock's time and a random part: a tenant cannot create a migration under the name the run will use
    assert re.match(r"^700101000000-[0-9a-f]{6}$", config.token)
    assert ExecutorConfig.build("node-1", clock=lambda: 0.0).token != config.token
    follow = ExecutorConfig.build(None, mode="follow", nodes=["n2", "n1"], clock=lambda: 0.0)
    assert (follow.reservation_prefix, follow.nodes, follow.scope_text()) == ("follow-n1+n2", ("n1", "n2"), "nodes n1, n2")
    with pytest.raises(Exception):
        follow.poll_interval = 3        # frozen


def test_the_default_follow_prefix_stays_short_and_the_same_for_the_same_scope():
    many = ["tenant-%03d" % i for i in range(500)]
    first = ExecutorConfig.build(mode="follow", namespaces=many).reservation_prefix
    again = ExecutorConfig.build(mode="follow", namespaces=list(reversed(many))).reservation_prefix
    other = ExecutorConfig.build(mode="follow", namespaces=many[:-1]).reservation_prefix
    assert first == again != other
    assert first.startswith("follow-tenant-000-") and len(first) <= 60
    assert ExecutorConfig.build(mode="follow").reservation_prefix == "follow-cluster"


# -- a follow run against a fake cluster --------------------------------------------------------------------------

class _Cluster(object):
    """KubeVirt and its quota, faked: a Pending migration is admitted only once a reservation recorded its UID
    (tight quota), runs for 2 s, then its source pod ends after 1 s. Nodes n1 (the VMs), n2."""

    def __init__(self, vms, per_cluster=3, per_node=2):
        self.now = 0.0
        self.vmis = dict((("t%d" % (i % 2), "vm-%d" % i), vmi("t%d" % (i % 2), "vm-%d" % i, "n1")) for i in range(vms))
        self.vmims = []
        self.limits = {"parallelMigrationsPerCluster": per_cluster, "parallelOutboundMigrationsPerNode": per_node}
        self.reserved = {}      # rid -> set of followed UIDs
        self.held = {}          # rid -> {(ns, quota): delta}
        self.peak_held = 0
        self.released = []
        self.admitted_at = {}
        self.created = []
        self.outage_budget = 0
        self.cordoned = False
        self.node_reads = 0
        self.configmaps = {}

    def clock(self):
        return self.now

    def list_pods(self, namespace=None, label_selector=None, field_selector=None):
        return []     # no target pod rendered: nothing to compare with a pin

    def sleep(self, seconds):
        self.now += seconds
        self.tick()

    def evacuate(self, count):
        """The evacuation controller: migrations for the next count VMIs still on n1, created at this time."""
        busy = set(v["spec"]["vmiName"] for v in self.vmims if v["status"]["phase"] not in ("Succeeded", "Failed"))
        for key in sorted(self.vmis)[:]:
            if count and self.vmis[key]["status"]["nodeName"] == "n1" and key[1] not in busy:
                count -= 1
                uid = "u-%s" % key[1]
                self.vmims.append(vmim(key[0], "kubevirt-evacuation-%s" % key[1], key[1], uid, "%09.3f" % self.now))

    def tick(self):
        followed = set(u for uids in self.reserved.values() for u in uids)
        for mig in self.vmims:
            status, uid = mig["status"], mig["metadata"]["uid"]
            if status["phase"] == "Pending" and uid in followed:
                status.update(phase="Running", migrationState={"sourceNode": "n1", "targetPod": "t-" + uid})
                self.admitted_at[uid] = self.now
            elif status["phase"] == "Running" and self.now - self.admitted_at[uid] >= 2:
                status["phase"] = "Succeeded"
                self.vmis[(mig["metadata"]["namespace"], mig["spec"]["vmiName"])]["status"]["nodeName"] = "n2"
        flying = len([v for v in self.vmims if v["status"]["phase"] == "Running"])
        self.evacuate(max(0, self.limits["parallelOutboundMigrationsPerNode"] - flying))

    # the API the executor uses
    def exists(self, path, what):
        if "/configmaps/" in path:
            return self.configmaps.get(path.rsplit("/", 1)[1])
        return {"metadata": {"name": path.rsplit("/", 1)[1]}}

    def get(self, path, what):
        self.node_reads += 1
        return {"metadata": {"uid": "node-uid"}, "spec": {"unschedulable": self.cordoned}}

    # the window record (a ConfigMap of the operator namespace)
    def replace(self, body, what):
        self.configmaps[body["metadata"]["name"]] = body
        return body

    def delete(self, path, what, resource_version=None):
        self.configmaps.pop(path.rsplit("/", 1)[1])

    def list_custom(self, group, version, plural, namespace=None, label_selector=None):
        if plural == "kubevirts":
            return [{"spec": {"configuration": {"migrations": dict(self.limits)}}}]
        if plural == "virtualmachineinstances":
            return [v for k, v in sorted(self.vmis.items()) if namespace in (None, k[0])]
        return [v for v in self.vmims if namespace in (None, v["metadata"]["namespace"])]

    def get_custom(self, group, version, plural, name, namespace=None):
        (found,) = [v for v in self.vmims if (v["metadata"]["namespace"], v["metadata"]["name"]) == (namespace, name)]
        return found

    def create(self, path, body, what):
        if path.endswith("/configmaps"):
            self.configmaps[body["metadata"]["name"]] = dict(body, metadata=dict(body["metadata"], resourceVersion="1"))
            return body
        self.created.append(body)
        raise AssertionError("follow mode created %s" % what)


def _faked(monkeypatch, cluster, ledgers=None):
    def batch_headroom(_c, vms, options=None, planned=None, pins=None):
        needs = {}
        for vm in vms:
            target = (vm["namespace"], "q")
            needs[target] = {"limits.memory": "%dGi" % (int(needs.get(target, {}).get("limits.memory", "0Gi")[:-2]) + 1)}
        return needs, {"vms": [dict(vm, uid="vmi-" + vm["name"]) for vm in vms], "sourcePods": []}, {"namespaces": {}}

    def reserve(_c, rid, headroom, *args, **kwargs):
        cluster.reserved[rid] = set(ref["uid"] for ref in (kwargs.get("refs") or {}).get("migrations") or ())
        cluster.held[rid] = headroom
        # what the held reservations cover that is not over yet: migrations KubeVirt runs (or will run next)
        unfinished = set(v["metadata"]["uid"] for v in cluster.vmims if v["status"]["phase"] != "Succeeded")
        cluster.peak_held = max(cluster.peak_held, sum(len(u & unfinished) for r, u in cluster.reserved.items()
                                                       if r in cluster.held))
        return {"quotas": [{"namespace": t[0], "quota": t[1], "delta": d} for t, d in headroom.items()]}

    def release(_c, rid, **kwargs):
        uids = cluster.reserved[rid]
        pods_gone = all(v["status"]["phase"] == "Succeeded" and cluster.now - cluster.admitted_at[v["metadata"]["uid"]] >= 3
                        for v in cluster.vmims if v["metadata"]["uid"] in uids)
        if not pods_gone:
            raise WaitTimeoutError("source pods still count", "wait", {"result": {"pending": []}})
        del cluster.held[rid]
        cluster.released.append(rid)
        return {}

    monkeypatch.setattr(headroom_mod, "batch_headroom", batch_headroom)
    service_fakes.patch(monkeypatch, "reserve", reserve)
    service_fakes.patch(monkeypatch, "release", release)
    monkeypatch.setattr(reservations, "find_ledgers", lambda c, warnings=None, operator_namespace=None: ledgers or {})


def _follower(cluster, **options):
    options.setdefault("follow_idle_seconds", 3)
    config = ExecutorConfig.build(None, mode="follow", nodes=["n1"], poll_interval=0.5,
                                  clock=cluster.clock, sleep=cluster.sleep, token="tok", **options)
    return m.Executor(cluster, config)


def test_follow_reserves_just_in_time_within_the_limits_and_releases_everything(monkeypatch):
    cluster = _Cluster(vms=6, per_cluster=3, per_node=2)
    _faked(monkeypatch, cluster)
    cluster.evacuate(6)                       # v1.7 with the priority queue: every migration at once
    result = _follower(cluster).run()
    assert cluster.created == [] and result["migrations_created"] == []
    assert result["outcome"] == "succeeded" and result["ended_by"].startswith("idle")
    assert sorted(result["migrations_reused"]) == sorted("t%d/kubevirt-evacuation-vm-%d" % (i % 2, i) for i in range(6))
    # never reserved for more unfinished migrations at once than parallelOutboundMigrationsPerNode lets KubeVirt run
    # (a finished group's reservation stays until its source pods end: they still count in the quota)
    assert cluster.peak_held == 2
    assert cluster.held == {} and sorted(result["reservations_released"]) == sorted(cluster.reserved)
    assert all(len(uids) <= 2 for uids in cluster.reserved.values())
    assert all(v["status"]["nodeName"] == "n2" for v in cluster.vmis.values())
    assert "group 1 done" in " ".join(result["progress"]) and result["mode"] == "follow"


def test_follow_in_check_mode_reports_what_it_would_reserve_and_writes_nothing(monkeypatch):
    cluster = _Cluster(vms=4)
    _faked(monkeypatch, cluster)
    cluster.evacuate(4)
    calls = []
    service_fakes.patch(monkeypatch, "reserve", lambda _c, rid, headroom, *a, **kw: calls.append((rid, kw)) or {
        "quotas": [{"namespace": t[0], "quota": t[1], "delta": d} for t, d in headroom.items()]})
    result = _follower(cluster, check_mode=True).run()
    assert result["outcome"] == "planned" and len(result["batches"]) == 1
    assert [(rid, kw["check_mode"]) for rid, kw in calls] == [("follow-n1-f0", True)]
    # created at once: oldest first, then namespace and name - both of t0, two at once (parallelOutbound 2)
    assert result["batches"][0]["headroom"] == {"t0/q": {"limits.memory": "2Gi"}}
    assert result["changed"] is True and cluster.reserved == {}


def test_a_rerun_takes_the_groups_an_interrupted_run_left_from_the_ledgers(monkeypatch):
    cluster = _Cluster(vms=2)
    cluster.evacuate(2)
    for mig in cluster.vmims:                 # admitted under the interrupted run's reservation
        mig["status"].update(phase="Running", migrationState={"sourceNode": "n1", "targetPod": "p"})
        cluster.admitted_at[mig["metadata"]["uid"]] = 0.0
    refs = {"vms": [{"namespace": "t0", "name": "vm-0", "uid": "x"}, {"namespace": "t1", "name": "vm-1", "uid": "y"}],
            "migrations": [{"namespace": v["metadata"]["namespace"], "name": v["metadata"]["name"],
                            "uid": v["metadata"]["uid"]} for v in cluster.vmims]}

    class _Ledger(object):
        previous = None      # no write under way

        def __init__(self, ns):
            self.reservations = {"follow-n1-f4": Reservation("follow-n1-f4", {"limits.memory": "1Gi"}, "o", "r", None,
                                                             None, refs)}
    cluster.reserved["follow-n1-f4"] = set(r["uid"] for r in refs["migrations"])
    cluster.held["follow-n1-f4"] = {}
    _faked(monkeypatch, cluster, ledgers={("t0", "q"): _Ledger("t0"), ("t1", "q"): _Ledger("t1")})
    result = _follower(cluster).run()
    assert result["ended_by"] == "idle (no migration left in nodes n1 for 3s)"
    assert result["resumed"]["reservations"] == ["follow-n1-f4"]
    assert result["reservations_released"] == ["follow-n1-f4"] and cluster.held == {}
    assert result["batches"][0]["reservation"] == "follow-n1-f4" and result["outcome"] == "succeeded"
    assert "resuming: groups follow-n1-f4" in result["progress"][0]


def test_a_group_whose_reservation_was_written_in_part_follows_only_where_it_holds(monkeypatch):
    """Found by the interrupt-follow campaign: a run killed while it wrote a group's reservation wrote it for t1
    only; the refs name the migrations of t0 and t1. The re-run's group follows t1's; t0's goes back to the queue
    and a new group reserves for it (it used to read as a refusal of a full VM's worth, past the top-up cap)."""
    cluster = _Cluster(vms=2)
    cluster.evacuate(2)
    refs = {"vms": [{"namespace": "t0", "name": "vm-0", "uid": "x"}, {"namespace": "t1", "name": "vm-1", "uid": "y"}],
            "migrations": [{"namespace": v["metadata"]["namespace"], "name": v["metadata"]["name"],
                            "uid": v["metadata"]["uid"]} for v in cluster.vmims]}

    class _Ledger(object):
        previous = None
        reservations = {"follow-n1-f4": Reservation("follow-n1-f4", {"limits.memory": "1Gi"}, "o", "r", None, None,
                                                    refs)}
    t1_uid = [v["metadata"]["uid"] for v in cluster.vmims if v["metadata"]["namespace"] == "t1"]
    cluster.reserved["follow-n1-f4"] = set(t1_uid)
    cluster.held["follow-n1-f4"] = {}
    _faked(monkeypatch, cluster, ledgers={("t1", "q"): _Ledger()})
    result = _follower(cluster).run()
    assert result["outcome"] == "succeeded" and cluster.held == {}
    said = [line for line in result["progress"] if "holds nothing in t0" in line]
    assert said and "go back to the queue" in said[0]
    resumed = [b for b in result["batches"] if b["reservation"] == "follow-n1-f4"][0]
    assert [m.split("/")[0] for m in resumed["migrations"]] == ["t1"]
    assert any(b["reservation"] != "follow-n1-f4" and [m.split("/")[0] for m in b["migrations"]] == ["t0"]
               for b in result["batches"])


def test_a_rerun_finishes_a_release_an_interrupted_run_left_half_done(monkeypatch):
    """Found by the interrupt-follow campaign: a run killed between a release's ledger write (no reservation left)
    and its quota write left the quota expanded, and no leftover named it. The re-run settles such ledgers in its
    scope (under their Leases) before it follows anything; a ledger outside the scope is not its to touch."""
    cluster = _Cluster(vms=2)

    class _Idle(object):
        reservations = {}
        previous = None

    settled = []
    monkeypatch.setattr(reservations, "_Run", lambda *a, **kw: "run")
    monkeypatch.setattr(reservations, "_settle_ledger", lambda run, target: settled.append(target) or {
        "namespace": target[0], "quota": target[1], "changed": True})
    _faked(monkeypatch, cluster, ledgers={("t0", "q"): _Idle(), ("other", "q"): _Idle()})
    result = _follower(cluster, namespaces=["t0", "t1"]).run()
    assert settled == [("t0", "q")]
    assert "resuming: finished the quota writes an interrupted run left half-done on t0/q" in result["progress"]


def test_a_deadline_before_the_condition_stops_and_says_what_is_held(monkeypatch):
    cluster = _Cluster(vms=2)
    _faked(monkeypatch, cluster)
    cluster.evacuate(2)
    monkeypatch.setattr(cluster, "tick", lambda: None)     # KubeVirt never admits anything
    with pytest.raises(WaitTimeoutError) as err:
        _follower(cluster, deadline_seconds=5).run()
    assert "deadline_seconds 5 passed before idle" in str(err.value)
    # a follower migrates nothing itself: its units are the groups it followed, not batches migrated
    assert "stopped with 1 group(s) of migrations followed, 0 of them over;" in str(err.value)
    assert "batch(es)" not in str(err.value)
    assert err.value.details["result"]["reservations_held"] == ["follow-n1-f0"]
    assert "follows the groups still held" in err.value.fix


def test_nodes_schedulable_means_seen_cordoned_then_uncordoned(monkeypatch):
    cluster = _Cluster(vms=2)
    _faked(monkeypatch, cluster)
    ticks = []

    def drain():                                # cordoned at 3 s, migrations then, uncordoned once the VMs moved
        ticks.append(cluster.now)
        if cluster.now >= 3 and not cluster.vmims:
            cluster.cordoned = True
            cluster.evacuate(2)
        elif cluster.cordoned and all(v["status"]["nodeName"] == "n2" for v in cluster.vmis.values()):
            cluster.cordoned = False
        if cluster.vmims:
            _Cluster.tick(cluster)
    monkeypatch.setattr(cluster, "tick", drain)
    result = _follower(cluster, follow_until="nodes_schedulable", deadline_seconds=60).run()
    assert result["ended_by"] == "nodes n1 schedulable" and cluster.held == {}
    assert len(result["migrations_reused"]) == 2      # not ended before the drain: the node was schedulable then


def test_migrations_off_a_node_never_cordoned_do_not_end_a_nodes_schedulable_window(monkeypatch):
    """Anyone may create a migration in their namespace: migrations off a node (followed, reserved for, released)
    are no evidence that the node was maintained; only its cordon is. The window ends at its deadline instead."""
    cluster = _Cluster(vms=2)
    _faked(monkeypatch, cluster)
    cluster.evacuate(2)                           # never cordoned
    with pytest.raises(WaitTimeoutError) as err:
        _follower(cluster, follow_until="nodes_schedulable", deadline_seconds=30).run()
    assert "deadline_seconds 30 passed before nodes_schedulable" in str(err.value)
    assert err.value.details["result"]["reservations_held"] == []     # the followed groups were all released


def test_a_migration_kubevirt_admits_in_a_groups_room_is_adopted_before_the_release(monkeypatch):
    cluster = _Cluster(vms=4)
    _faked(monkeypatch, cluster)
    ex = _follower(cluster)
    group = m.Batch(0, None, [("t0", "vm-0")], "follow-n1-f0", followed=True)
    group.state, group.final_at, group.deltas = m.FINAL, 1.0, {("t0", "q"): {"limits.memory": 1}}
    group.targets = [("t0", "q")]
    group.migrations = [{"namespace": "t0", "name": "kubevirt-evacuation-vm-0", "uid": "u-vm-0", "vm": "vm-0",
                         "reused": True}]
    ex.record.batches.append(group)
    sneaked = vmim("t0", "kubevirt-evacuation-vm-2", "vm-2", "u-vm-2", "t1", phase="Running", source="n1",
                   target_pod="p")
    elsewhere = vmim("t1", "kubevirt-evacuation-vm-1", "vm-1", "u-vm-1", "t1", phase="Running", source="n1",
                     target_pod="p")
    ledger = type("L", (), {"reservations": {"follow-n1-f0": Reservation("follow-n1-f0", {"limits.memory": "1"}, "o",
                                                                         "r", None, None, {})}})()
    monkeypatch.setattr(reservations, "find_ledgers", lambda c, warnings=None, operator_namespace=None: {
        ("t0", "q"): ledger})
    written = []
    service_fakes.patch(monkeypatch, "reserve", lambda _c, rid, headroom, *a, **kw: written.append(
        (rid, headroom, kw["refs"]["migrations"])) or {})
    vmis = dict((k, v) for k, v in cluster.vmis.items())
    ex.follower._adopt([sneaked, elsewhere], vmis)
    # the same amount again, the adopted migration's UID in the refs; t1 holds no reservation: nothing adopted there
    assert written == [("follow-n1-f0", {("t0", "q"): {"limits.memory": "1"}},
                        [{"namespace": "t0", "name": "kubevirt-evacuation-vm-2", "uid": "u-vm-2"}])]
    assert group.state == m.RUNNING and group.final_at is None
    assert [mig["uid"] for mig in group.migrations] == ["u-vm-0", "u-vm-2"]
    assert "adopted" in ex.log[-1]


class _FirstComeCluster(_Cluster):
    """Quota admission as it is: a namespace's room is what its reservations add (1 Gi per VM); KubeVirt admits
    whichever queued migration of the namespace fits, the newest first here (it does not know whom a reservation
    was made for), within parallelOutboundMigrationsPerNode; the others carry KubeVirt's
    migrationRejectedByResourceQuota condition. A migration holds its room until its source pod ends (1 s after
    it succeeded)."""

    def _uses_room(self, mig):
        uid = mig["metadata"]["uid"]
        return uid in self.admitted_at and (mig["status"]["phase"] == "Running" or self.now - self.admitted_at[uid] < 3)

    def tick(self):
        for mig in self.vmims:
            uid = mig["metadata"]["uid"]
            if mig["status"]["phase"] == "Running" and self.now - self.admitted_at[uid] >= 2:
                mig["status"]["phase"] = "Succeeded"
                self.vmis[(mig["metadata"]["namespace"], mig["spec"]["vmiName"])]["status"]["nodeName"] = "n2"
        for mig in sorted(self.vmims, key=lambda v: v["metadata"]["creationTimestamp"], reverse=True):
            if mig["status"]["phase"] != "Pending":
                continue
            namespace = mig["metadata"]["namespace"]
            room = sum(int(d["limits.memory"][:-2]) for held in self.held.values() for t, d in held.items()
                       if t[0] == namespace)
            used = len([v for v in self.vmims if v["metadata"]["namespace"] == namespace and self._uses_room(v)])
            running = len([v for v in self.vmims if v["status"]["phase"] == "Running"])
            if used < room and running < self.limits["parallelOutboundMigrationsPerNode"]:
                mig["status"] = {"phase": "Running", "migrationState": {"sourceNode": "n1", "targetPod": "t"}}
                self.admitted_at[mig["metadata"]["uid"]] = self.now
            else:
                mig["status"]["conditions"] = [{"type": "migrationRejectedByResourceQuota", "status": "True"}]


def test_a_migration_displaced_by_one_kubevirt_ran_in_its_room_goes_back_to_the_queue(monkeypatch):
    """Found by bench_window (scenario d): a group reserved for m1; KubeVirt ran m2 of the same namespace in that
    room (adopted), so m1 stayed refused, and the top-up read its refusal as a full VM's shortfall, past top_up_cap.
    m1 was displaced, not undersized: it goes back to the queue and a later group reserves for it; no top-up."""
    cluster = _FirstComeCluster(vms=6, per_cluster=3, per_node=2)
    _faked(monkeypatch, cluster)
    cluster.evacuate(6)                       # every migration at once, the newest admitted first
    for i, mig in enumerate(cluster.vmims):
        mig["metadata"]["creationTimestamp"] = "%03d" % i
    topped = []
    monkeypatch.setattr(m.BatchRunner, "top_up", lambda self, batch, refused: topped.append(batch.reservation))
    result = _follower(cluster, top_up_settle_seconds=1, deadline_seconds=120).run()
    assert topped == []
    assert result["outcome"] == "succeeded" and cluster.held == {}
    assert all(v["status"]["nodeName"] == "n2" for v in cluster.vmis.values())
    given_back = [line for line in result["progress"] if "back to the queue" in line]
    assert given_back and "no longer fits there" in given_back[0]
    displaced = [mig for b in result["batches"] for mig in b["displaced_migrations"]]
    # each displaced migration was followed again by a later group, or adopted where KubeVirt ran it
    assert displaced and all(any(d in b["migrations"] for b in result["batches"]) for d in displaced)


def test_a_rerun_knows_adopted_and_displaced_migrations_from_the_refs(monkeypatch):
    cluster = _Cluster(vms=2)
    refs = {"migrations": [{"namespace": "t0", "name": "a", "uid": "ua"}, {"namespace": "t0", "name": "b", "uid": "ub"}],
            "adopted": {"ub": "t0/b"}, "displaced": {"ua": "t0/a"}}

    class _Ledger(object):
        previous = None
        reservations = {"follow-n1-f2": Reservation("follow-n1-f2", {"limits.memory": "1Gi"}, "o", "r", None, None,
                                                    refs)}
    _faked(monkeypatch, cluster, ledgers={("t0", "q"): _Ledger()})
    ex = _follower(cluster)
    ex.record.per_gib_now, ex.record.progress_now = 150, 150
    ex.follower.resume()
    (group,) = ex.record.batches
    assert [(mig["uid"], mig["adopted"]) for mig in group.migrations] == [("ub", True)]
    assert [mig["uid"] for mig in group.displaced] == ["ua"]


def test_a_cordon_seen_is_recorded_at_once_and_the_record_deleted_when_the_window_ends(monkeypatch):
    cluster = _Cluster(vms=2)
    _faked(monkeypatch, cluster)
    records = []

    def drain():
        if cluster.now >= 3 and not cluster.vmims:
            cluster.cordoned = True
            cluster.evacuate(2)
        elif cluster.cordoned and all(v["status"]["nodeName"] == "n2" for v in cluster.vmis.values()):
            records.append(dict(cluster.configmaps))      # just before the uncordon
            cluster.cordoned = False
        if cluster.vmims:
            _Cluster.tick(cluster)
    monkeypatch.setattr(cluster, "tick", drain)
    result = _follower(cluster, follow_until="nodes_schedulable", deadline_seconds=60).run()
    assert result["ended_by"] == "nodes n1 schedulable"
    assert sorted(records[0]) == ["kvq-running-follow-n1", "kvq-window-follow-n1"]
    record = records[0]["kvq-window-follow-n1"]
    assert record["metadata"]["name"] == "kvq-window-follow-n1" and '"n1": {"seen": ' in record["data"]["cordoned"]
    assert cluster.configmaps == {}


def test_a_window_says_it_runs_renews_that_and_takes_it_back_however_it_ends(monkeypatch):
    # the event source queues no window behind a running one (event_source.WindowGate) by this record
    cluster = _Cluster(vms=2)
    _faked(monkeypatch, cluster)
    seen = []
    ticked = cluster.tick

    def watch():
        running = cluster.configmaps.get("kvq-running-follow-n1")
        seen.append((cluster.now, dict(running["data"]) if running else None))
        ticked()
    monkeypatch.setattr(cluster, "tick", watch)
    result = _follower(cluster, follow_until="idle", deadline_seconds=600, follow_idle_seconds=70).run()
    assert result["ended_by"].startswith("idle")
    renewals = sorted(set(data["renewed"] for _now, data in seen if data))
    assert seen[0][1] is not None and len(set(data["since"] for _now, data in seen if data)) == 1
    assert len(renewals) >= 2 and cluster.now >= 60       # renewed every 30 s of a window that ran a minute
    assert "kvq-running-follow-n1" not in cluster.configmaps
    # a window that fails (its deadline) says so, then takes it back too (the event source asks for another)
    cluster = _Cluster(vms=2)
    _faked(monkeypatch, cluster)
    said = []
    mark = f.window_record.mark_running
    monkeypatch.setattr(f.window_record, "mark_running",
                        lambda *a, **kw: said.append(kw.get("failed", False)) or mark(*a, **kw))
    with pytest.raises(WaitTimeoutError):
        _follower(cluster, follow_until="nodes_schedulable", deadline_seconds=5).run()
    assert said[0] is False and said[-1] is True
    assert "kvq-running-follow-n1" not in cluster.configmaps
    # a record another window of the same prefix took over stays
    cluster.configmaps["kvq-running-follow-n1"] = {"metadata": {"name": "kvq-running-follow-n1",
                                                                "resourceVersion": "9"},
                                                   "data": {"since": "2030-01-01T00:00:00Z"}}
    assert not f.window_record.unmark_running(cluster, "kvquota-system", "follow-n1", 0)
    assert "kvq-running-follow-n1" in cluster.configmaps


def _recorded(cluster, seen_at, uid="node-uid"):
    cluster.configmaps["kvq-window-follow-n1"] = {"metadata": {"name": "kvq-window-follow-n1", "resourceVersion": "7"},
                                                  "data": {"cordoned": json.dumps({"n1": {"seen": format_time(seen_at),
                                                                                          "uid": uid}})}}


def test_a_rerun_after_the_node_was_uncordoned_ends_by_the_record_of_the_cordon(monkeypatch):
    """Found by the interrupt-follow campaign ('between groups'): the run was killed, the drain ended and the node
    was uncordoned before the re-run; the re-run never saw the cordon and waited for its deadline. The window
    record in the operator namespace says that the run it resumes saw it."""
    cluster = _Cluster(vms=2)
    cluster.now = 1000.0
    _faked(monkeypatch, cluster)
    _recorded(cluster, 900)
    result = _follower(cluster, follow_until="nodes_schedulable", deadline_seconds=60).run()
    assert result["ended_by"] == "nodes n1 schedulable" and cluster.now < 1010
    assert any("an earlier run of this window saw n1 cordoned" in line for line in result["progress"])
    assert cluster.configmaps == {}


@pytest.mark.parametrize("seen_at, uid", [(1000.0 - 7201, "node-uid"), (900, "another-node")],
                         ids=["older-than-the-ttl", "another-node-of-that-name"])
def test_an_old_record_or_one_of_another_node_does_not_end_a_new_window(monkeypatch, seen_at, uid):
    cluster = _Cluster(vms=2)
    cluster.now = 1000.0
    _faked(monkeypatch, cluster)
    _recorded(cluster, seen_at, uid)
    with pytest.raises(WaitTimeoutError) as err:
        _follower(cluster, follow_until="nodes_schedulable", deadline_seconds=10).run()
    assert "deadline_seconds 10 passed before nodes_schedulable" in str(err.value)
    assert any("not counted" in line for line in err.value.details["result"]["progress"])


def test_a_corrupt_window_record_is_named_and_ignored(monkeypatch):
    cluster = _Cluster(vms=2)
    _faked(monkeypatch, cluster)
    cluster.configmaps["kvq-window-follow-n1"] = {"metadata": {"name": "kvq-window-follow-n1"},
                                                  "data": {"cordoned": "[1, 2]"}}
    with pytest.raises(WaitTimeoutError) as err:
        _follower(cluster, follow_until="nodes_schedulable", deadline_seconds=5).run()
    warnings = err.value.details["result"]["warnings"]
    assert any("the window record kvq-window-follow-n1 is not a mapping of nodes" in w for w in warnings)


def test_a_room_a_queued_migration_will_take_counts_as_a_slot_in_flight(monkeypatch):
    """Found by bench_window with KubeVirt 1.7.4 (every migration queued at once): a group's migration ended, its
    room waits for the namespace's next queued migration (KubeVirt admits it there once the source pod ends), yet
    the slot looked free and a new group reserved for that namespace again: two VMs' worth for one in flight."""
    cluster = _Cluster(vms=6)
    _faked(monkeypatch, cluster)
    ex = _follower(cluster)
    group = m.Batch(0, None, [("t0", "vm-0")], "follow-n1-f0", followed=True)
    group.state, group.final_at, group.deltas, group.held = m.FINAL, 1.0, {("t0", "q"): {"limits.memory": 1}}, ["t0"]
    group.migrations = [{"namespace": "t0", "name": "done", "uid": "u0", "vm": "vm-0", "reused": True}]
    ex.record.batches.append(group)
    vmims = [vmim("t0", "done", "vm-0", "u0", "t0", phase="Succeeded", source="n1", target_pod="p"),
             vmim("t0", "next", "vm-2", "u2", "t1"), vmim("t1", "other", "vm-1", "u1", "t2"),
             vmim("t1", "last", "vm-3", "u3", "t3")]
    rooms = ex.follower._free_rooms(vmims, cluster.vmis, set(["u0"]))
    assert rooms == {"t0": ("n1", 1)}
    assert [c["metadata"]["uid"] for c in f.pick_next(vmims, cluster.vmis, set(["u0"]), 5, 2, everything)] == ["u2", "u1"]
    # with the room counted: t0's queued migration takes it and one slot is left, for the oldest of another namespace
    assert [c["metadata"]["uid"] for c in f.pick_next(vmims, cluster.vmis, set(["u0"]), 5, 2, everything,
                                                      rooms=rooms)] == ["u1"]
    # no migration queued in t0: the room is only released, it takes no slot
    assert ex.follower._free_rooms([v for v in vmims if v["metadata"]["uid"] != "u2"], cluster.vmis, set(["u0"])) == {}


def test_a_room_whose_source_pod_still_counts_is_not_free_and_the_freed_slot_gets_a_new_group(monkeypatch):
    """The bound ceil(N/p) x T leaves out the seconds a finished migration's source pod takes to end; while it
    counts in the quota, the namespace's next migration cannot take that room. The slot KubeVirt freed goes to a
    new group at once (its own room), instead of the next migration waiting for the source pod."""
    cluster = _Cluster(vms=6)
    _faked(monkeypatch, cluster)
    pods = {("t0", "virt-launcher-vm-0-src"): {"metadata": {"name": "virt-launcher-vm-0-src"},
                                               "status": {"phase": "Running"}}}

    def get_pod(namespace, name):
        if (namespace, name) not in pods:
            raise f.NotFoundError("pod %s/%s not found" % (namespace, name), "")
        return pods[(namespace, name)]
    cluster.get_pod = get_pod
    ex = _follower(cluster)
    group = m.Batch(0, None, [("t0", "vm-0")], "follow-n1-f0", followed=True)
    group.state, group.final_at, group.deltas, group.held = m.FINAL, 1.0, {("t0", "q"): {"limits.memory": 1}}, ["t0"]
    group.migrations = [{"namespace": "t0", "name": "done", "uid": "u0", "vm": "vm-0", "reused": True}]
    ex.record.batches.append(group)
    done = vmim("t0", "done", "vm-0", "u0", "t0", phase="Succeeded", source="n1", target_pod="p")
    done["status"]["migrationState"]["sourcePod"] = "virt-launcher-vm-0-src"
    vmims = [done, vmim("t0", "next", "vm-2", "u2", "t1"), vmim("t1", "other", "vm-1", "u1", "t2")]
    assert ex.follower._free_rooms(vmims, cluster.vmis, set(["u0"])) == {}
    # the source pod is gone: the room waits for t0's next migration and takes a slot
    pods.clear()
    assert ex.follower._free_rooms(vmims, cluster.vmis, set(["u0"])) == {"t0": ("n1", 1)}


def test_the_groups_migrations_are_looked_at_often_while_one_runs(monkeypatch):
    cluster = _Cluster(vms=2)
    _faked(monkeypatch, cluster)
    ex = _follower(cluster)                    # poll_interval 0.5
    monkeypatch.setattr(f, "FAST_POLL_SECONDS", 0.25)
    group = m.Batch(0, None, [("t0", "vm-0")], "follow-n1-f0", followed=True)
    group.state = m.RUNNING
    ex.record.batches.append(group)
    group.phases = {"t0/a": "Pending"}
    assert ex.follower._pause() == 0.5         # nothing runs yet: KubeVirt has not admitted it
    group.phases = {"t0/a": "Running"}
    assert ex.follower._pause() == f.FAST_POLL_SECONDS


# -- a window reserves once per VM (issue 24: a tenant's later migrations of a VM that left the node) -------------

def test_a_later_migration_of_a_vm_this_window_moved_gets_no_reservation_but_still_counts_in_flight():
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.migration_state import Batch

    class Runner(object):
        left_out_migrations = {"u-grown"}

    class Record(object):
        batches = []

    moved = Batch(1, None, [("a", "vm-1")], "w-f1", followed=True)
    moved.migrations = [{"namespace": "a", "name": "evac-1", "uid": "u-evac", "vm": "vm-1", "reused": True,
                         "vmi_uid": "vmi-1"}]
    moved.phases = {"a/evac-1": "Succeeded"}
    failed = Batch(2, None, [("a", "vm-2")], "w-f2", followed=True)
    failed.migrations = [{"namespace": "a", "name": "evac-2", "uid": "u-evac2", "vm": "vm-2", "reused": True,
                          "vmi_uid": "vmi-2"}]
    failed.phases = {"a/evac-2": "Failed"}
    Record.batches = [moved, failed]
    follower = f.Follower.__new__(f.Follower)
    follower.record, follower.runner, follower.skipped_named = Record(), Runner(), set()
    Record.say = lambda self, line: said.append(line)
    said = []
    vmis = {("a", "vm-1"): dict(vmi("a", "vm-1", "n2"), metadata={"namespace": "a", "name": "vm-1", "uid": "vmi-1"}),
            ("a", "vm-2"): dict(vmi("a", "vm-2", "n1"), metadata={"namespace": "a", "name": "vm-2", "uid": "vmi-2"}),
            ("a", "vm-3"): dict(vmi("a", "vm-3", "n1"), metadata={"namespace": "a", "name": "vm-3", "uid": "vmi-3"})}
    queue = [vmim("a", "tenant-again", "vm-1", "u-t1", "t1"),      # the tenant migrates the moved VM again
             vmim("a", "retry-2", "vm-2", "u-r2", "t2"),           # KubeVirt retries a failed one: reserved
             vmim("a", "evac-3", "vm-3", "u-e3", "t3"),
             vmim("a", "grown", "vm-3", "u-grown", "t0")]
    marks = f.MoveMarks(cordoned=["n1", "n2"])
    skip = follower._never_reserved(queue, vmis, marks)
    assert skip == {"u-t1", "u-grown"}
    assert len(said) == 1 and "tenant-again" in said[0]          # named once
    follower._never_reserved(queue, vmis, marks)
    assert len(said) == 1
    # KubeVirt marks the moved VM again (a second node of the window drained, where it landed): reserved again
    vmis[("a", "vm-1")]["status"].update(evacuationNodeName="n2")
    assert follower._never_reserved(queue, vmis, marks) == {"u-grown"}
    # the same mark written by the tenant while n2 is not cordoned wins nothing
    assert follower._never_reserved(queue, vmis, f.MoveMarks(cordoned=["n1"])) == {"u-t1", "u-grown"}
    # a mark for another node than the one it runs on is not one
    vmis[("a", "vm-1")]["status"].update(evacuationNodeName="n1")
    assert follower._never_reserved(queue, vmis, marks) == {"u-t1", "u-grown"}
    vmis[("a", "vm-1")]["status"].pop("evacuationNodeName")
    chosen = f.pick_next(queue, vmis, set(), 5, 5, everything, skip=skip)
    assert [c["metadata"]["uid"] for c in chosen] == ["u-r2", "u-e3"]
    # once admitted elsewhere (its namespace no longer fenced) it takes a slot as KubeVirt counts it
    queue[0] = vmim("a", "tenant-again", "vm-1", "u-t1", "t1", phase="Running", source="n2", target_pod="p")
    assert [c["metadata"]["uid"] for c in f.pick_next(queue, vmis, set(), 2, 5, everything, skip=skip)] == ["u-r2"]


def test_a_migration_no_group_will_reserve_for_keeps_no_window_open():
    """The always-on rulebook's tenant storm (test_eda_lab): a tenant migrates a VM this window moved already, quota
    refuses it, no group ever reserves for it (quota admission decides on it alone). It must not hold the window
    open until its deadline: the scope is idle without it. A migration KubeVirt may still get a reservation for
    keeps the window open as before."""
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.migration_state import Batch

    class Runner(object):
        left_out_migrations = set()

    class Record(object):
        batches = []
        started = 0.0

        @staticmethod
        def say(_line):
            pass

    moved = Batch(1, None, [("a", "vm-1")], "w-f1", followed=True)
    moved.migrations = [{"namespace": "a", "name": "evac-1", "uid": "u-evac", "vm": "vm-1", "reused": True,
                         "vmi_uid": "vmi-1"}]
    moved.phases = {"a/evac-1": "Succeeded"}
    moved.state = "released"
    Record.batches = [moved]
    follower = f.Follower.__new__(f.Follower)
    follower.record, follower.runner, follower.skipped_named, follower.idle_since = Record(), Runner(), set(), None
    follower.in_scope = everything
    follower.config = ExecutorConfig.build(None, mode="follow", follow_idle_seconds=10)
    vmis = {("a", "vm-1"): dict(vmi("a", "vm-1", "n2"), metadata={"namespace": "a", "name": "vm-1", "uid": "vmi-1"}),
            ("a", "vm-2"): dict(vmi("a", "vm-2", "n1"), metadata={"namespace": "a", "name": "vm-2", "uid": "vmi-2"})}
    again = vmim("a", "tenant-again", "vm-1", "u-t1", "t1")
    assert follower._ended([again], vmis, 100.0) is None                  # idle from now on
    assert follower._ended([again], vmis, 110.0).startswith("idle")
    follower.idle_since = None
    other = vmim("a", "evac-2", "vm-2", "u-e2", "t2")                      # KubeVirt's, still to reserve for
    assert follower._ended([again, other], vmis, 200.0) is None
    assert follower._ended([again, other], vmis, 300.0) is None


def test_the_window_records_of_a_prefix_that_is_no_name_part_are_still_configmap_names():
    # make test 21:23: the default prefix of a window over namespaces joins them with '+', and the API server
    # refused to create kvq-running-follow-a+b+c
    name = f.window_record.running_name("follow-fl-8e61-0+fl-8e61-1+fl-8e61-2")
    assert re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name) and name.startswith("kvq-running-follow-fl-8e61-0-")
    assert name != f.window_record.running_name("follow-fl-8e61-0-fl-8e61-1+fl-8e61-2")
    assert f.window_record.running_name("eda") == "kvq-running-eda"
    assert f.window_record.record_name("follow-n1") == "kvq-window-follow-n1"
    assert re.match(r"^[a-z0-9-]+$", f.window_record.record_name("follow-A+b"))
