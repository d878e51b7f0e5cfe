# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_migrate, run by ansible-playbook as the lab's LEAST-PRIVILEGE user, against the lab (real
kube-apiserver quota admission, quota controller, scheduler; KubeVirt emulated).

Scenario d (20 VMs on node-1, 5 tightly budgeted namespaces): check mode writes nothing; the real run moves
every VM off the node, every quota is back at its base byte for byte with no ledger left, and a sampler that
reads the quotas during the run never sees a namespace's extra above that namespace's largest batch need
(no namespace is expanded for two batches at once, although batches overlap). A top-up case (emulator knob
oversize_bytes): the target pod is exactly that much larger than planned, admission refuses it, and the
reservation grows once by exactly that shortfall.

Run: KVQ_LAB_REQUIRED=1 python3 -m pytest -q -p no:cacheprovider tests/integration/test_migrate_lab.py
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import threading
import time

import pytest

import modlab as M
from kvqlab import emulator, scenarios

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import cluster as cluster_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import headroom as headroom_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.quantity import parse_quantity

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


def largest_batch_need(user, batches):
    """{namespace: {resource: the largest need of one batch}} from headroom.batch_headroom, before the run."""
    cluster = cluster_mod.connect({"kubeconfig": str(user)}, environ={})
    largest = {}
    for batch in batches:
        vms = [dict(zip(("namespace", "name"), k.split("/", 1))) for k in batch["vms"]]
        needs, _refs, _report = headroom_mod.batch_headroom(cluster, vms)
        per_ns = {}
        for (ns, _quota), rl in needs.items():
            for res, value in rl.items():
                per_ns.setdefault(ns, {}).setdefault(res, 0)
                per_ns[ns][res] += parse_quantity(value)
        for ns, rl in per_ns.items():
            for res, value in rl.items():
                largest.setdefault(ns, {})[res] = max(largest.get(ns, {}).get(res, 0), value)
    return largest


def test_scenario_d_moves_every_vm_and_restores_every_quota(lab, r, user, scenario_d):
    namespaces = scenario_d
    base = hard_by_quota(r, namespaces)
    plan = M.assert_ok(M.run_module("kvquota_check", {"nodes": [NODE]}, user))
    batches = plan["batches"]
    assert len(batches) == 10 and all(len(b["vms"]) == 2 for b in batches), batches
    largest = largest_batch_need(user, batches)
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

    # batches overlapped (a later batch started before an earlier one was released), one in flight at a time
    runs = sorted(res["batches"], key=lambda b: b["order"])
    assert [b["state"] for b in runs] == ["released"] * 10
    for earlier, later in zip(runs, runs[1:]):
        assert later["started"] >= earlier["started"] + earlier["seconds"] - 0.01, (earlier, later)
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


def test_top_up_adds_exactly_the_refused_shortfall_once(lab, emu, r, user):
    ns = "mig-topup"
    M.make_tenant(lab, ns)
    oversize = 64 * 1024 ** 2
    try:
        original = M.quota(r, ns, "compute")
        hard = parse_quantity(original["spec"]["hard"]["limits.memory"])
        used = parse_quantity(original["status"]["used"]["limits.memory"])
        pod = [p for p in M.launcher_pods(r, ns) if M.phase(p) == "Running"][0]
        charge = sum(parse_quantity(c["resources"]["limits"]["memory"]) for c in pod["spec"]["containers"]
                     if "memory" in (c.get("resources") or {}).get("limits", {}))
        needed = used + charge - hard
        assert needed > 0
        emulator.set_knobs(lab, oversize_bytes=oversize)
        node = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"]
        res = M.run_module("kvquota_migrate", {"node": node, "batches": [{"vms": ["%s/vm-1" % ns]}],
                                               "reservation_prefix": "topup-%s" % ns, "poll_interval": 0.5,
                                               "top_up_settle_seconds": 2, "top_up_cap": {"limits.memory": "1Gi"},
                                               "ttl": "1h"}, user)
        print(json.dumps(res.get("progress"), indent=1))
        M.assert_ok(res)
        (batch,) = res["batches"]
        assert batch["top_ups"] == 1, batch
        (top_up,) = batch["top_up_details"]
        assert top_up["added"] == {"%s/compute" % ns: {"limits.memory": "64Mi"}}, top_up
        # the reservation was the planned need plus exactly the refused shortfall
        assert parse_quantity(batch["headroom"]["%s/compute" % ns]["limits.memory"]) == needed + oversize
        assert parse_quantity(res["peak_extra"][ns]["limits.memory"]) == needed + oversize
        events = r.get("/api/v1/namespaces/%s/events" % ns, fieldSelector="reason=QuotaReserved")["items"]
        rid = "topup-%s-b0" % ns
        # one top-up (the quota's and the namespace's Event carry the same message)
        topped = set(e["message"] for e in events if "'%s'" % rid in e["message"] and " topped-up: " in e["message"])
        assert len(topped) == 1, [e["message"] for e in events]
        # moved, and the quota back at its base
        assert r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"] != node
        assert M.quota(r, ns, "compute")["spec"]["hard"] == original["spec"]["hard"]
        assert ledgers(r, [ns]) == []
    finally:
        emulator.set_knobs(lab, oversize_bytes=0)
        M.delete_namespace(r, ns)


def test_a_failed_migration_stops_releases_and_a_rerun_converges(lab, emu, r, user):
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
        msg = M.assert_one_line_error(res, "migration(s) failed", "re-run the playbook")
        assert "fail-%s-b0" % ns in msg
        # the VM never left: its reservation was released at once, nothing held
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
            assert later["started"] >= earlier["started"] + earlier["released_seconds"] - 0.01, (earlier, later)
        assert vms_on(r, node, spaces) == []
        assert hard_by_quota(r, spaces) == base and ledgers(r, spaces) == []
    finally:
        for ns in spaces:
            M.delete_namespace(r, ns)
