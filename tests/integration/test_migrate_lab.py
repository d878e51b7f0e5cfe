# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_migrate, run by ansible-playbook as the lab's LEAST-PRIVILEGE user, against the lab (real
kube-apiserver quota admission, quota controller, scheduler; KubeVirt emulated).

Scenario d (20 VMs on node-1, 5 tightly budgeted namespaces): check mode writes nothing; the real run moves
every VM off the node, every quota is back at its base byte for byte with no ledger left, and a sampler that
reads the quotas during the run never sees a namespace's extra above that namespace's largest batch need
(no namespace is expanded for two batches at once, although batches overlap). Tenant moves: a target pod
larger than planned (emulator knob oversize_bytes) is refused while forged FailedCreate Events claim a huge
shortfall, and the top-up stays top_up_cap's share of the computed charge; a pod labelled like a launcher is
not taken for one; a migration carrying this collection's labels but not recorded by UID is not resumed.

Run: KVQ_LAB_REQUIRED=1 python3 -m pytest -q -p no:cacheprovider tests/integration/test_migrate_lab.py
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import threading
import time
from fractions import Fraction

import pytest

import modlab as M
from kvqlab import emulator, scenarios

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import migrate as migrate_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

NODE = "node-1"
TENANTS = ["d-tenant-%d" % i for i in range(1, 6)]
RESOURCES = ("limits.memory", "limits.cpu")


def hard_by_quota(r, namespaces):
    return dict(((q["metadata"]["namespace"], q["metadata"]["name"]), dict(q["spec"]["hard"]))
                for ns in namespaces for q in M.quotas(r, ns))


def ledgers(r, namespaces):
    """The quotas of namespaces kvquota holds a ledger for (in the operator namespace), and any tenant object that
    carries a kvquota ledger annotation (which it must never write)."""
    found = sorted(key for key in M.ledgers(r) if key.split("/")[0] in namespaces)
    for ns in namespaces:
        for q in M.quotas(r, ns):
            if M.LEDGER in (q["metadata"].get("annotations") or {}):
                found.append("annotation on %s/%s" % (ns, q["metadata"]["name"]))
        if M.LEDGER in (M.namespace(r, ns)["metadata"].get("annotations") or {}):
            found.append("annotation on namespace %s" % ns)
    return found


def vms_on(r, node, namespaces):
    return sorted("%s/%s" % (v["metadata"]["namespace"], v["metadata"]["name"])
                  for v in r.get(M.KV + "/virtualmachineinstances")["items"]
                  if v["metadata"]["namespace"] in namespaces and (v.get("status") or {}).get("nodeName") == node)


class ExtraSampler(threading.Thread):
    """Reads the quotas every interval s while the module runs: the largest extra (hard - base) per namespace."""

    def __init__(self, r, base, interval=0.2):
        threading.Thread.__init__(self, daemon=True)
        self.r, self.base, self.interval = r, base, interval
        self.stopping = threading.Event()
        self.peak = {}
        self.samples = 0

    def run(self):
        namespaces = sorted(set(ns for ns, _q in self.base))
        while not self.stopping.is_set():
            extra = {}
            for (ns, name), hard in hard_by_quota(self.r, namespaces).items():
                base = self.base[(ns, name)]
                for res in RESOURCES:
                    if res in hard and res in base:
                        extra.setdefault(ns, {}).setdefault(res, 0)
                        extra[ns][res] += parse_quantity(hard[res]) - parse_quantity(base[res])
            for ns, rl in extra.items():
                for res, value in rl.items():
                    self.peak.setdefault(ns, {})[res] = max(self.peak.get(ns, {}).get(res, 0), value)
            self.samples += 1
            self.stopping.wait(self.interval)

    def stop(self):
        self.stopping.set()
        self.join(10)


@pytest.fixture(scope="module")
def scenario_d(lab, emu, r):
    scenarios.apply(lab, scenarios.load("d"), timeout=180)
    # fast migrations, but source pods that linger: releases overlap the next batch
    emulator.set_knobs(lab, migration_seconds=1.5, source_pod_delay_seconds=1)
    M.wait(lambda: all(M.settled(r, ns, 4) for ns in TENANTS), 60, "scenario d settled")
    return TENANTS


def test_scenario_d_moves_every_vm_and_restores_every_quota(lab, r, user, scenario_d):
    namespaces = scenario_d
    base = hard_by_quota(r, namespaces)
    plan = M.assert_ok(M.run_module("kvquota_check", {"nodes": [NODE]}, user))
    batches = plan["batches"]
    assert len(batches) == 10 and all(len(b["vms"]) == 2 for b in batches), batches
    largest = M.largest_batch_need(user, batches)
    assert set(largest) == set(namespaces), largest

    # check mode: what it would reserve and create, nothing written
    before = M.snapshot(r, set(namespaces))
    dry = M.assert_ok(M.run_module("kvquota_migrate", {"node": NODE, "batches": batches}, user, check=True))
    assert dry["outcome"] == "planned" and dry["changed"] is True
    assert [b["reservation"] for b in dry["batches"]] == ["%s-b%d" % (NODE, i) for i in range(10)]
    assert all(b["headroom"] for b in dry["batches"]), dry["batches"]
    assert dry["migrations_created"] == [] and dry["reservations_released"] == []
    M.assert_unchanged(before, M.snapshot(r, set(namespaces)))
    assert vms_on(r, NODE, namespaces) and not ledgers(r, namespaces)

    sampler = ExtraSampler(r, base)
    sampler.start()
    try:
        res = M.run_module("kvquota_migrate", {"node": NODE, "batches": batches, "poll_interval": 0.5,
                                               "top_up_settle_seconds": 5, "ttl": "1h"}, user)
    finally:
        sampler.stop()
    print(json.dumps(res.get("progress"), indent=1))
    M.assert_ok(res)
    assert res["changed"] is True and res["outcome"] == "succeeded"

    # every VM off the node, every migration of this run Succeeded
    assert vms_on(r, NODE, namespaces) == []
    assert len(res["migrations_created"]) == 20 and res["migrations_reused"] == []
    for key in res["migrations_created"]:
        ns, name = key.split("/")
        assert M.phase(M.vmim(r, ns, name)) == "Succeeded", key
        assert name.endswith("-kvq-" + name.rsplit("-kvq-", 1)[1])
        labels = M.vmim(r, ns, name)["metadata"]["labels"]
        assert labels["kvquota.io/node"] == NODE and labels["app.kubernetes.io/managed-by"] == "kvquota.maintenance"
        assert labels["kvquota.io/reservation"].startswith(NODE + "-b")

    # every quota back at base byte for byte, no ledger, no reservation held
    assert hard_by_quota(r, namespaces) == base
    assert ledgers(r, namespaces) == []
    assert res["reservations_held"] == []
    assert sorted(res["reservations_released"]) == sorted(res["reservations_made"])
    assert len(res["reservations_made"]) == 10

    # batches overlapped (a later batch started before an earlier one was released), one in flight at a time: a
    # batch's migrations are created (launched) only once the earlier batch's are final; its reservation may be
    # made before (prepared while the earlier one migrates), never in a namespace the earlier one holds
    runs = sorted(res["batches"], key=lambda b: b["order"])
    assert [b["state"] for b in runs] == ["released"] * 10
    for earlier, later in zip(runs, runs[1:]):
        assert later["started"] + later["launch_seconds"] >= earlier["started"] + earlier["seconds"] - 0.01, (earlier, later)
        assert not set(v.split("/")[0] for v in later["vms"]) & set(v.split("/")[0] for v in earlier["vms"]) \
            or later["started"] >= earlier["started"] + earlier["released_seconds"] - 0.01, (earlier, later)
    assert any(later["started"] < earlier["started"] + earlier["seconds"] for earlier, later in zip(runs, runs[1:])), \
        "no batch was prepared while the one before it migrated: %s" % runs
    assert any(later["started"] < earlier["started"] + earlier["released_seconds"]
               for earlier, later in zip(runs, runs[1:])), runs

    # no namespace's extra ever above its largest batch need: sampled, and as the module counted it
    assert sampler.samples > 10
    for ns in namespaces:
        for res_name, value in sampler.peak.get(ns, {}).items():
            assert value <= largest[ns].get(res_name, 0), (ns, res_name, value, largest[ns])
        for res_name, text in res["peak_extra"][ns].items():
            assert parse_quantity(text) <= largest[ns][res_name], (ns, res_name, text, largest[ns])
    # ... and the sampler did see the quotas expanded
    assert any(v > 0 for rl in sampler.peak.values() for v in rl.values()), sampler.peak


def pod_charge(pod):
    """What a pod charges a quota, per name, from its spec (written by virt-controller when it rendered the pod):
    the larger of the containers' sum and the largest init container."""
    def of(containers, kind, res):
        return [parse_quantity(((c.get("resources") or {}).get(kind) or {}).get(res) or "0") for c in containers]
    charge = {}
    for kind, res in (("limits", "memory"), ("limits", "cpu"), ("requests", "cpu"), ("requests", "memory")):
        values = sum(of(pod["spec"]["containers"], kind, res)) or 0
        charge["%s.%s" % (kind, res)] = max([values] + of(pod["spec"].get("initContainers") or [], kind, res))
    return charge


def ceil_to(value, step):
    return -((-value) // step) * step


FORGED = ('Error creating pod: failed to create vmi migration target pod: pods "virt-launcher-vm-1-forged" is '
          'forbidden: exceeded quota: compute, requested: limits.cpu=20,limits.memory=100Gi, used: '
          'limits.cpu=2,limits.memory=4Gi, limited: limits.cpu=6,limits.memory=5000Mi')


class Forger(threading.Thread):
    """A tenant's move: as soon as a migration in ns is refused by quota, post FailedCreate Events about it that
    look as real as they can (its UID, virt-controller as the source, a future lastTimestamp) and claim a huge
    shortfall; repeated, so that the newest Event is always forged."""

    def __init__(self, r, ns, timeout=120):
        threading.Thread.__init__(self, daemon=True)
        self.r, self.ns, self.timeout = r, ns, timeout
        self.stopping = threading.Event()
        self.posted = []

    def run(self):
        deadline = time.monotonic() + self.timeout
        while not self.stopping.is_set() and time.monotonic() < deadline:
            for m in self.r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % self.ns)["items"]:
                if not M.rejected(m):
                    continue
                md = m["metadata"]
                self.r.create("/api/v1/namespaces/%s/events" % self.ns, {
                    "metadata": {"generateName": md["name"] + ".", "namespace": self.ns},
                    "involvedObject": {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                                       "name": md["name"], "namespace": self.ns, "uid": md["uid"]},
                    "reason": "FailedCreate", "type": "Warning", "message": FORGED,
                    "source": {"component": "virt-controller"}, "count": 99,
                    "firstTimestamp": "2999-01-01T00:00:00Z", "lastTimestamp": "2999-01-01T00:00:00Z"})
                self.posted.append(md["name"])
            self.stopping.wait(0.3)

    def stop(self):
        self.stopping.set()
        self.join(10)


def test_a_forged_failed_create_event_does_not_size_the_top_up(lab, emu, r, user):
    """A target pod 64Mi larger than computed is refused by the real quota admission; meanwhile a tenant posts
    FailedCreate Events about that very migration (its UID, virt-controller, a future timestamp) claiming
    limits.cpu=20, limits.memory=100Gi. The top-up is derived from the quota's status and the computed charge
    only: with the default top_up_cap (25%), exactly a quarter of the refused pod's computed charge per
    resource (the pod count never stepped), once; nothing of the forged amounts."""
    ns = "mig-forged"
    M.make_tenant(lab, ns)
    oversize = 64 * 1024 ** 2
    forger = Forger(r, ns)
    try:
        original = M.quota(r, ns, "compute")
        hard = dict((k, parse_quantity(v)) for k, v in original["spec"]["hard"].items())
        used = dict((k, parse_quantity(v)) for k, v in original["status"]["used"].items())
        pod = [p for p in M.launcher_pods(r, ns) if M.phase(p) == "Running"][0]
        charge = pod_charge(pod)    # rendered before the knob: the computed size
        needed = used["limits.memory"] + charge["limits.memory"] - hard["limits.memory"]
        assert needed > 0
        emulator.set_knobs(lab, oversize_bytes=oversize)
        node = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"]
        forger.start()
        res = M.run_module("kvquota_migrate", {"node": node, "batches": [{"vms": ["%s/vm-1" % ns]}],
                                               "reservation_prefix": "forged-%s" % ns, "poll_interval": 0.5,
                                               "top_up_settle_seconds": 3, "ttl": "1h"}, user)
        forger.stop()
        print(json.dumps(res.get("progress"), indent=1))
        M.assert_ok(res)
        assert forger.posted, "the migration was never refused: no forged Event posted"
        (batch,) = res["batches"]
        assert batch["top_ups"] == 1, batch
        (top_up,) = batch["top_up_details"]
        assert top_up["how"] == "step", top_up
        expected = {"limits.memory": ceil_to(charge["limits.memory"] / 4, 1),
                    "limits.cpu": ceil_to(charge["limits.cpu"] / 4, Fraction(1, 1000)),
                    "requests.cpu": ceil_to(charge["requests.cpu"] / 4, Fraction(1, 1000))}
        added = dict((k, parse_quantity(v)) for k, v in top_up["added"]["%s/compute" % ns].items())
        assert added == expected, (added, expected)
        # bounded by the refused pod's computed charge, far from the forged 20 CPU / 100Gi
        assert all(added[k] <= charge[k] for k in added)
        assert parse_quantity(res["peak_extra"][ns]["limits.memory"]) == needed + expected["limits.memory"]
        assert r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"] != node
        assert M.quota(r, ns, "compute")["spec"]["hard"] == original["spec"]["hard"]
        assert ledgers(r, [ns]) == []
    finally:
        forger.stop()
        emulator.set_knobs(lab, oversize_bytes=0)
        M.delete_namespace(r, ns)


def test_a_tenant_pod_labelled_like_a_launcher_is_not_taken_for_one(lab, emu, r, user):
    """A tenant's pod on the VM's node carrying every launcher label of vm-1 (kubevirt.io=virt-launcher,
    kubevirt.io/created-by=<VMI uid>, vm.kubevirt.io/name) and sorting first: the planner's source pod and the
    reservation's refs name the real launcher (owned by the VMI, in its activePods) only."""
    ns = "mig-lookalike"
    M.make_tenant(lab, ns)
    try:
        vmi = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)
        node = vmi["status"]["nodeName"]
        (real,) = [p for p in M.launcher_pods(r, ns) if M.phase(p) == "Running"]
        small = {"cpu": "10m", "memory": "16Mi"}
        r.create("/api/v1/namespaces/%s/pods" % ns, {
            "metadata": {"name": "a-lookalike", "labels": {
                "kubevirt.io": "virt-launcher", "kubevirt.io/created-by": vmi["metadata"]["uid"],
                "vm.kubevirt.io/name": "vm-1", "kubevirt.io/nodeName": node}},
            "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "example.com/not-a-launcher",
                                                       "resources": {"limits": small, "requests": small}}]}})
        M.wait(lambda: M.phase(r.get("/api/v1/namespaces/%s/pods/a-lookalike" % ns)) == "Running", 30,
               "the look-alike running")
        # the VM entries (source_pod) are in the full report only
        plan = M.assert_ok(M.run_module("kvquota_check", {"nodes": [node], "report": "full"}, user))
        (vm,) = [v for v in plan["namespaces"][ns]["vms"] if v["name"] == "vm-1"]
        assert vm["source_pod"] == real["metadata"]["name"], vm
        dry = M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": "lookalike-%s" % ns, "ttl": "1h",
                                                           "vms": [{"namespace": ns, "name": "vm-1"}]}, user,
                                       check=True))
        assert dry["refs"]["sourcePods"] == [{"namespace": ns, "name": real["metadata"]["name"],
                                              "uid": real["metadata"]["uid"]}], dry["refs"]
        assert dry["refs"]["vms"] == [{"namespace": ns, "name": "vm-1", "uid": vmi["metadata"]["uid"]}]
    finally:
        M.delete_namespace(r, ns)


def test_resume_takes_for_its_own_only_migrations_recorded_by_uid(lab, emu, r, user):
    """An interrupted run left reservation <prefix>-b0 and its migration (recorded in the refs with its UID),
    refused by quota; a tenant created a migration carrying this collection's labels for the same node. The
    re-run's resume cancels the recorded one and releases the reservation; the tenant's, never admitted either,
    is left alone."""
    ns = "mig-resume"
    M.make_tenant(lab, ns, vms=2)
    prefix = "resume-%s" % ns
    cluster = M.connect({"kubeconfig": str(user)})
    try:
        original = M.quota(r, ns, "compute")
        vmis = dict((v["metadata"]["name"], v) for v in
                    r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"])
        node = vmis["vm-2"]["status"]["nodeName"]
        emulator.set_knobs(lab, oversize_bytes=64 * 1024 ** 2)   # the run's target pod is refused
        interrupted = migrate_mod.Executor(cluster, migrate_mod.ExecutorConfig.build(
            node, reservation_prefix=prefix, ttl_seconds=3600), [["%s/vm-2" % ns]])
        interrupted.record.per_gib_now, interrupted.record.progress_now = interrupted.runner.timeouts()
        interrupted.runner.start(interrupted.batches[0])    # reserve, create, record; then the job is killed
        (ours,) = interrupted.record.created
        ours_name = ours.split("/")[1]
        M.wait(lambda: M.rejected(M.vmim(r, ns, ours_name)), 30, "our migration refused by quota")
        book = M.ledger(r, M.quota(r, ns, "compute"))
        recorded = book["reservations"]["%s-b0" % prefix]["refs"]["migrations"]
        assert {"namespace": ns, "name": ours_name, "uid": M.vmim(r, ns, ours_name)["metadata"]["uid"]} in recorded
        # the tenant's migration, dressed as ours
        r.create(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns, {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "tenant-made", "labels": {
                "kubevirt.io/vmi-name": "vm-1", "app.kubernetes.io/managed-by": "kvquota.maintenance",
                "kvquota.io/node": node, "kvquota.io/reservation": "%s-b0" % prefix}},
            "spec": {"vmiName": "vm-1"}})
        M.wait(lambda: M.rejected(M.vmim(r, ns, "tenant-made")), 30, "the tenant's migration refused by quota")
        tenant_uid = M.vmim(r, ns, "tenant-made")["metadata"]["uid"]

        rerun = migrate_mod.Executor(cluster, migrate_mod.ExecutorConfig.build(
            node, reservation_prefix=prefix, poll_interval=0.5))
        resumed = rerun.resume()
        assert resumed["cancelled"] == [ours], resumed
        assert resumed["released"] == ["%s-b0" % prefix], resumed
        M.wait(lambda: ours_name not in [m["metadata"]["name"] for m in r.get(
            M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]], 30, "ours cancelled")
        assert M.vmim(r, ns, "tenant-made")["metadata"]["uid"] == tenant_uid
        assert M.quota(r, ns, "compute")["spec"]["hard"] == original["spec"]["hard"]
        assert ledgers(r, [ns]) == []
    finally:
        emulator.set_knobs(lab, oversize_bytes=0)
        M.delete_namespace(r, ns)


def test_a_failed_migration_leaves_its_vm_named_releases_and_a_rerun_converges(lab, emu, r, user):
    ns = "mig-fail"
    M.make_tenant(lab, ns)
    try:
        original = M.quota(r, ns, "compute")
        node = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"]
        args = {"node": node, "batches": [{"vms": ["%s/vm-1" % ns]}], "reservation_prefix": "fail-%s" % ns,
                "poll_interval": 0.5, "ttl": "1h", "stop_release_timeout": 30}
        emulator.set_knobs(lab, fail_migrations="%s/vm-1" % ns)
        try:
            res = M.run_module("kvquota_migrate", args, user)
        finally:
            emulator.set_knobs(lab, fail_migrations="")
        # the VM stays where it is, named with KubeVirt's reason (the run goes on with any other VM)
        res = M.assert_ok(res)
        mine = [v for v in res["vms_left"] if v["namespace"] == ns]     # other tests' VMs may share the node
        assert [v["name"] for v in mine] == ["vm-1"], res["vms_left"]
        assert "failed (migration failed" in mine[0]["left_out"], res["vms_left"]
        # the VM never left: its reservation was released, nothing held
        assert res["reservations_released"] == ["fail-%s-b0" % ns] and res["reservations_held"] == []
        assert M.quota(r, ns, "compute")["spec"]["hard"] == original["spec"]["hard"]
        time.sleep(1)
        again = M.assert_ok(M.run_module("kvquota_migrate", args, user))
        assert again["outcome"] == "succeeded" and len(again["migrations_created"]) == 1
        assert r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"] != node
        assert M.quota(r, ns, "compute")["spec"]["hard"] == original["spec"]["hard"]
        assert ledgers(r, [ns]) == []
    finally:
        M.delete_namespace(r, ns)


def test_check_mode_after_an_interrupted_run_whose_leftover_has_another_size(lab, emu, r, user):
    """A leftover reservation "<prefix>-b0" of an earlier run (here: a different size than the re-run plans, as
    when a batch's composition or the pods' size changed) is released by the real run's resume before b0 is
    reserved again. Check mode (node_maintenance's dry run before the cordon) must see it that way: no
    'already holds' conflict, and nothing written."""
    ns = "mig-leftover"
    M.make_tenant(lab, ns)
    try:
        original = M.quota(r, ns, "compute")
        node = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"]
        prefix = "left-%s" % ns
        M.assert_ok(M.run_module("kvquota_reserve", {
            "reservation_id": "%s-b0" % prefix, "ttl": "1h",
            "headroom": [{"namespace": ns, "quota": "compute", "resources": {"limits.memory": "1234Mi"}}]}, user))
        args = {"node": node, "batches": [{"vms": ["%s/vm-1" % ns]}], "reservation_prefix": prefix,
                "poll_interval": 0.5, "ttl": "1h"}
        before = M.snapshot(r, {ns})
        dry = M.assert_ok(M.run_module("kvquota_migrate", args, user, check=True))
        assert dry["resumed"]["reservations"] == ["%s-b0" % prefix], dry["resumed"]
        M.assert_unchanged(before, M.snapshot(r, {ns}))
        real = M.assert_ok(M.run_module("kvquota_migrate", args, user))
        assert real["resumed"]["released"] == ["%s-b0" % prefix], real["resumed"]
        assert r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"] != node
        assert M.quota(r, ns, "compute")["spec"]["hard"] == original["spec"]["hard"]
        assert ledgers(r, [ns]) == []
    finally:
        M.delete_namespace(r, ns)


def test_strict_mode_starts_each_batch_after_every_earlier_release(lab, emu, r, user):
    """overlap=false: one reservation at a time, batches in plan order."""
    spaces = ["mig-strict-a", "mig-strict-b"]
    for ns in spaces:
        M.make_tenant(lab, ns, vms=2)
    try:
        base = hard_by_quota(r, spaces)
        nodes = dict(("%s/%s" % (ns, v["metadata"]["name"]), v["status"]["nodeName"])
                     for ns in spaces for v in r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"])
        node = sorted(set(nodes.values()), key=lambda n: -list(nodes.values()).count(n))[0]
        keys = sorted(k for k, n in nodes.items() if n == node)
        assert len(keys) >= 2, nodes
        res = M.assert_ok(M.run_module("kvquota_migrate", {
            "node": node, "batches": [[k] for k in keys], "reservation_prefix": "strict-%s" % node,
            "overlap": False, "poll_interval": 0.5, "ttl": "1h"}, user))
        runs = sorted(res["batches"], key=lambda b: b["order"])
        assert [b["index"] for b in runs] == list(range(len(keys)))
        for earlier, later in zip(runs, runs[1:]):
            # three figures rounded to 0.01 each: up to 0.015 apart without any overlap
            assert later["started"] >= earlier["started"] + earlier["released_seconds"] - 0.02, (earlier, later)
        assert vms_on(r, node, spaces) == []
        assert hard_by_quota(r, spaces) == base and ledgers(r, spaces) == []
    finally:
        for ns in spaces:
            M.delete_namespace(r, ns)


def test_a_vm_grown_after_the_plan_is_left_out_and_named_while_the_others_migrate(lab, emu, r, user):
    """Issue 24, attack 2: after the plan a tenant adds three hook sidecars (annotation hooks.kubevirt.io/hookSidecars
    on its running VMI, which virt-api allows) to a Guaranteed VM (each sidecar then charges 200m and 64M). Its
    batch is sized again from a fresh read; the VM's charge is larger than planned, so it is left out of the batch
    and named with both charges and the change, and no reservation covers it; the other VMs of its namespace
    migrate; the result's vms_left says why it is still on the node; every quota is back at its base. (Before:
    the batch reserved the larger size and the VM came back grown, above its quota.)"""
    import secrets
    tag = secrets.token_hex(2)
    node, ns = "grow-node-" + tag, "grow-" + tag
    sc = scenarios.from_dict({
        "name": ns, "kubevirt": M.KUBEVIRT_A, "nodes": [{"name": node, "cpu": "16", "memory": "64Gi"}],
        "namespaces": [{"name": ns, "labels": {"kvqlab/test": "true"}, "quotas": [{
            "name": "compute", "hard": {"limits.memory": "15000Mi", "limits.cpu": "8", "pods": "20"}}]}],
        "vms": [{"name": "vm-%d" % i, "namespace": ns, "node": node, "cpu": 2, "memory": "4Gi",
                 "limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}}
                for i in (1, 2, 3)]})
    scenarios.apply(lab, sc, timeout=120)
    try:
        M.wait(lambda: M.settled(r, ns, 3), 30, "tenant settled")
        original = M.quota(r, ns, "compute")
        check = M.assert_ok(M.run_module("kvquota_check", {"nodes": [node], "plan": True}, user))
        assert sorted(check["plan"]["vms"]) == ["%s/vm-%d" % (ns, i) for i in (1, 2, 3)]
        containers = sorted(c["name"] for p in M.launcher_pods(r, ns) if p["metadata"]["name"].startswith(
            "virt-launcher-vm-1-") for c in p["spec"]["containers"])
        r.patch(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns, {"metadata": {"annotations": {
            "hooks.kubevirt.io/hookSidecars": json.dumps([{"image": "registry.example/hook:%d" % i} for i in range(3)])}}})
        res = M.assert_ok(M.run_module("kvquota_migrate", {
            "node": node, "plan": check["plan"], "reservation_prefix": "grow-%s" % tag, "poll_interval": 0.5,
            "ttl": "1h"}, user))
        print(json.dumps(res.get("progress"), indent=1))
        left = dict((vm["name"], vm) for vm in res["vms_left"] if vm["namespace"] == ns)
        assert sorted(left) == ["vm-1"], res["vms_left"]
        reason = left["vm-1"]["left_out"]
        assert reason.startswith("%s/vm-1: its target pod now charges " % ns), reason
        assert "instead of the planned " in reason and "cpu=" not in reason.replace(".cpu=", "")
        assert "annotation hooks.kubevirt.io/hookSidecars=" in reason and "the VMI (resourceVersion" in reason
        assert any(line.endswith("left out, it stays where it is: " + reason) for line in res["progress"])
        moved = [b["vms"] for b in res["batches"]]
        assert sorted(k for vms in moved for k in vms) == ["%s/vm-2" % ns, "%s/vm-3" % ns]
        assert not [h for b in res["batches"] for h in (b.get("top_up_details") or [])]
        assert vms_on(r, node, [ns]) == ["%s/vm-1" % ns]
        # the VM did not grow: its pod is the one it started with
        assert sorted(c["name"] for p in M.launcher_pods(r, ns) if p["metadata"]["name"].startswith(
            "virt-launcher-vm-1-") and M.phase(p) == "Running" for c in p["spec"]["containers"]) == containers
        assert M.quota(r, ns, "compute")["spec"]["hard"] == original["spec"]["hard"]
        assert ledgers(r, [ns]) == []
    finally:
        scenarios.delete(lab, sc)
        lab.delete_node(node)


def test_a_vm_grown_after_its_batchs_reservation_gets_no_migration_while_its_sibling_migrates(lab, emu, r, user):
    """Issue 24, second review: batch 2 (t/vm-1, t/vm-2) is reserved for while batch 1 (another namespace) migrates
    slowly; then the tenant adds three hook sidecars to vm-1's running VMI. Before, vm-1's larger target pod was
    admitted on vm-2's share and vm-2's top-up paid for the growth. Now the prepared batch is sized again before
    its migrations are created: vm-1 gets none, is named (vms_left, progress), vm-2 migrates with no top-up, and
    every quota ends at its base."""
    import secrets
    tag = secrets.token_hex(2)
    node, slow, ns = "late-node-" + tag, "late-a-" + tag, "late-b-" + tag

    def vm(name, namespace):
        return {"name": name, "namespace": namespace, "node": node, "cpu": 2, "memory": "4Gi",
                "limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}}
    sc = scenarios.from_dict({
        "name": ns, "kubevirt": M.KUBEVIRT_A, "nodes": [{"name": node, "cpu": "16", "memory": "64Gi"}],
        "namespaces": [{"name": n, "labels": {"kvqlab/test": "true"}, "quotas": [{
            "name": "compute", "hard": {"limits.memory": "15000Mi", "limits.cpu": "8", "pods": "20"}}]}
            for n in (slow, ns)],
        "vms": [vm("vm-0", slow), vm("vm-1", ns), vm("vm-2", ns)]})
    scenarios.apply(lab, sc, timeout=120)
    emulator.set_knobs(lab, migration_seconds=12)
    outcome = {}
    try:
        M.wait(lambda: M.settled(r, slow, 1) and M.settled(r, ns, 2), 30, "tenants settled")
        original = M.quota(r, ns, "compute")
        runner = threading.Thread(target=lambda: outcome.update(res=M.run_module("kvquota_migrate", {
            "node": node, "batches": [["%s/vm-0" % slow], ["%s/vm-1" % ns, "%s/vm-2" % ns]],
            "reservation_prefix": "late-%s" % tag, "poll_interval": 0.5, "ttl": "1h"}, user)), daemon=True)
        runner.start()
        # batch 2's reservation exists (prepared ahead) while batch 1 still migrates: the tenant grows vm-1
        M.wait(lambda: "%s/compute" % ns in M.ledgers(r), 90, "batch 2 reserved for")
        assert vms_on(r, node, [slow]) == ["%s/vm-0" % slow], "batch 1 ended before the attack"
        r.patch(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns, {"metadata": {"annotations": {
            "hooks.kubevirt.io/hookSidecars": json.dumps([{"image": "registry.example/hook:%d" % i} for i in range(3)])}}})
        runner.join(300)
        res = M.assert_ok(outcome["res"])
        print(json.dumps(res.get("progress"), indent=1))
        left = dict((vm["name"], vm) for vm in res["vms_left"] if vm["namespace"] == ns)
        assert sorted(left) == ["vm-1"], res["vms_left"]
        reason = left["vm-1"]["left_out"]
        assert reason.startswith("%s/vm-1: its target pod now charges " % ns), reason
        assert "hooks.kubevirt.io/hookSidecars" in reason and "no migration is made for it" in reason, reason
        assert sorted(k for b in res["batches"] for k in b["vms"]) == ["%s/vm-0" % slow, "%s/vm-2" % ns]
        assert not [h for b in res["batches"] for h in (b.get("top_up_details") or [])]
        assert not [m for m in r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]
                    if m["spec"]["vmiName"] == "vm-1"]
        assert vms_on(r, node, [slow, ns]) == ["%s/vm-1" % ns]
        assert M.quota(r, ns, "compute")["spec"]["hard"] == original["spec"]["hard"]
        assert ledgers(r, [slow, ns]) == []
    finally:
        emulator.set_knobs(lab, migration_seconds=None)
        scenarios.delete(lab, sc)
        lab.delete_node(node)
