# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Harvester v1.9 end to end, as the lab's LEAST-PRIVILEGE user (issue 27): kvquota_check plans and kvquota_migrate
drains node-1 of scenario h (two VMs of a Harvester namespace whose Rancher limit leaves no room for a migration),
once without and once with Rancher's quota lock-down, while the emulated Harvester v1.9 scales the namespace's
Rancher quota itself (a migratingUID- delta per migrating VM, migratingCompensation after a refusal by quota, the
migratingScalingResyncNeeded flag; docs/emulator.md).

- Without the lock-down kvquota opts the quota out (skipResourceQuotaAutoScaling "true") while it is reserved:
  Harvester writes nothing, neither deltas nor compensation nor its flag.
- With the lock-down the opt-out is refused, and so is every write of Harvester (its ServiceAccount is not
  Rancher's; the emulator logs and retries them): kvquota reserves through the namespace's Rancher limit alone.

Either way the drain succeeds, spec.hard is never above base + the batch's reservation (a sampler reads the quota
every 0.1 s), no Harvester annotation ever appears, and the quota (spec, annotations, labels) and the namespace's
annotations are back byte for byte, with no ledger left. Last, a quota carrying a stale Harvester delta and
compensation under the lock-down (nobody but an administrator can remove them) is refused by name, nothing written.

Run: KVQ_LAB_REQUIRED=1 python3 -m pytest -q -p no:cacheprovider -m lab tests/integration/test_harvester_lab.py
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import json
import threading
import time

import pytest

import modlab as M
from kvqlab import emulator, scenarios

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

NODE = "node-1"
TENANT = "h-tenant"
SKIP = "harvesterhci.io/skipResourceQuotaAutoScaling"
HARVESTER_KEYS = "harvesterhci.io/migrating"   # migratingUID-, migratingCompensation, migratingScalingResyncNeeded
RANCHER_QUOTA = "field.cattle.io/resourceQuota"


class QuotaSampler(threading.Thread):
    """Reads the namespace's quotas every interval s while the module runs; keeps (spec.hard, annotations)."""

    def __init__(self, r, ns, interval=0.1):
        threading.Thread.__init__(self, daemon=True)
        self.r, self.ns, self.interval = r, ns, interval
        self.stopping = threading.Event()
        self.samples = []

    def run(self):
        while not self.stopping.is_set():
            for q in M.quotas(self.r, self.ns):
                self.samples.append((q["metadata"]["name"], dict(q["spec"].get("hard") or {}),
                                     dict(q["metadata"].get("annotations") or {})))
            self.stopping.wait(self.interval)

    def stop(self):
        self.stopping.set()
        self.join(10)


def vms_on(r, node):
    return sorted(v["metadata"]["name"] for v in r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % TENANT)["items"]
                  if (v.get("status") or {}).get("nodeName") == node)


@pytest.mark.parametrize("lockdown", [False, True], ids=["no-lockdown", "rancher-lockdown"])
def test_harvester_v19_drain_restores_everything_and_never_stacks(lab, emu, r, user, lockdown):
    data = copy.deepcopy(scenarios.load("h").data)
    data["emulator"]["rancher_lockdown"] = lockdown
    sc = scenarios.from_dict(data)
    t0 = time.monotonic()
    scenarios.apply(lab, sc, timeout=120)
    try:
        emulator.wait_lockdown(lab, lockdown)
        M.wait(lambda: M.settled(r, TENANT, 2), 60, "scenario h settled")
        print("scenario h applied in %.1fs" % (time.monotonic() - t0))
        (quota,) = M.quotas(r, TENANT)
        name = quota["metadata"]["name"]
        base = dict(quota["spec"]["hard"])
        before_quota = json.dumps([quota["spec"], quota["metadata"].get("annotations"), quota["metadata"].get("labels")],
                                  sort_keys=True)
        before_ns = dict(M.namespace(r, TENANT)["metadata"].get("annotations") or {})
        assert not [k for k in quota["metadata"].get("annotations") or {} if k.startswith(HARVESTER_KEYS)]
        refused_before = emu.count("update of ResourceQuota %s refused" % name)

        plan = M.assert_ok(M.run_module("kvquota_check", {"nodes": [NODE]}, user))
        batches = plan["batches"]
        assert sorted(v for b in batches for v in b["vms"]) == ["%s/h-vm-1" % TENANT, "%s/h-vm-2" % TENANT], batches
        largest = M.largest_batch_need(user, batches).get(TENANT, {})
        assert largest.get("limits.memory", 0) > 0, largest

        sampler = QuotaSampler(r, TENANT)
        sampler.start()
        t1 = time.monotonic()
        try:
            res = M.run_module("kvquota_migrate", {"node": NODE, "batches": batches, "poll_interval": 0.5,
                                                   "top_up_settle_seconds": 5, "ttl": "1h"}, user)
        finally:
            sampler.stop()
        print("drain (lockdown=%s) in %.1fs, %d samples" % (lockdown, time.monotonic() - t1, len(sampler.samples)))
        print(json.dumps(res.get("progress"), indent=1))
        M.assert_ok(res)
        assert res["outcome"] == "succeeded" and res["changed"] is True
        assert vms_on(r, NODE) == []
        assert len(res["migrations_created"]) == 2
        for key in res["migrations_created"]:
            ns, mig = key.split("/")
            assert M.phase(M.vmim(r, ns, mig)) == "Succeeded", key

        # restored byte for byte: the quota's spec, annotations and labels, the namespace's annotations; no ledger
        (after,) = M.quotas(r, TENANT)
        assert json.dumps([after["spec"], after["metadata"].get("annotations"), after["metadata"].get("labels")],
                          sort_keys=True) == before_quota
        assert (M.namespace(r, TENANT)["metadata"].get("annotations") or {}) == before_ns
        assert before_ns[RANCHER_QUOTA] == json.dumps({"limit": data["namespaces"][0]["rancher"]["limit"]},
                                                      sort_keys=True)
        assert [k for k in M.ledgers(r) if k.split("/")[0] == TENANT] == []
        assert res["reservations_held"] == []

        # no stacking: nothing of Harvester's on the quota at any time, spec.hard never above base + the largest
        # batch's reservation; the quota was expanded at some point
        assert len(sampler.samples) > 10
        seen = set(k for _n, _h, a in sampler.samples for k in a if k.startswith(HARVESTER_KEYS))
        assert not seen, seen
        peak = {}
        for _n, hard, annotations in sampler.samples:
            extra = dict((res_name, parse_quantity(hard[res_name]) - parse_quantity(base[res_name]))
                         for res_name in base if res_name in hard)
            for res_name, value in extra.items():
                peak[res_name] = max(peak.get(res_name, 0), value)
                assert value <= largest.get(res_name, 0), (res_name, value, largest)
            if lockdown:
                assert SKIP not in annotations, annotations      # refused: nothing to opt out of
            elif any(v > 0 for v in extra.values()):
                assert annotations.get(SKIP) == "true", annotations   # opted out while reserved
        assert peak.get("limits.memory", 0) > 0, peak
        refused = emu.count("update of ResourceQuota %s refused" % name) - refused_before
        if lockdown:
            # Harvester did try to scale the quota for the drain's migrations, and was refused
            assert refused > 0, "the emulated Harvester never tried to write the quota"
            assert any("Rancher's quota lock-down" in w for w in res.get("warnings") or []), res.get("warnings")
        else:
            assert refused == 0
    finally:
        scenarios.delete(lab, sc)


def test_a_stale_harvester_delta_and_compensation_block_under_the_lock_down(lab, emu, r, user):
    """Harvester v1.9 left its delta for a migration and its compensation on a Rancher quota (a Harvester controller
    restart missed the end of the migration); then Rancher's lock-down came: nobody but an administrator can remove
    them (Harvester's own writes are refused too). kvquota_reserve refuses that quota by name before writing
    anything: a one-line message naming both annotations and who removes them."""
    ns = "hv-stale"
    custom_uid = "0d9f3c1e-5b7a-4c2e-9e61-3f1a2b4c5d6e"
    emulator.set_knobs(lab, harvester=True, harvester_version="v1.9.0")
    try:
        r.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"kvqlab/test": "true"}, "annotations": {
            RANCHER_QUOTA: '{"limit":{"limitsCpu":"4","limitsMemory":"4Gi"}}'}}})
        (quota,) = M.wait(lambda: M.quotas(r, ns), 30, "the emulated Rancher's quota")
        name = quota["metadata"]["name"]
        qpath = "/api/v1/namespaces/%s/resourcequotas/%s" % (ns, name)
        r.patch(qpath, {"metadata": {"annotations": {
            "harvesterhci.io/migratingUID-" + custom_uid: '{"limits.cpu":"1","limits.memory":"1405Mi"}',
            "harvesterhci.io/migratingCompensation": '{"limits.memory":"192Mi"}',
            "harvesterhci.io/migratingScalingResyncNeeded": "true"}}})
        # Harvester's quota controller follows them (base + delta + compensation) and clears its flag
        M.wait(lambda: M.quota(r, ns, name)["metadata"]["annotations"].get(
            "harvesterhci.io/migratingScalingResyncNeeded") == "false", 30, "Harvester's quota controller")
        assert parse_quantity(M.quota(r, ns, name)["spec"]["hard"]["limits.memory"]) == (4096 + 1405 + 192) * 2**20
        emulator.set_knobs(lab, rancher_lockdown=True)
        emulator.wait_lockdown(lab, True)
        before = M.snapshot(r, {ns})
        res = M.run_module("kvquota_reserve", {"reservation_id": "stale-h", "ttl": "1h", "headroom": [
            {"namespace": ns, "quota": name, "resources": {"limits.memory": "1Gi"}}]}, user)
        msg = M.assert_one_line_error(res, "%s/%s" % (ns, name), "migratingUID-" + custom_uid,
                                      "migratingCompensation", "an administrator removes them")
        print(msg)
        after = M.snapshot(r, {ns})
        for snap in (before, after):
            snap.pop("leases")   # the namespace's lock, taken and let go: all that was written
        M.assert_unchanged(before, after)
        assert not [k for k in M.ledgers(r) if k.split("/")[0] == ns]
    finally:
        emulator.set_knobs(lab, rancher_lockdown=None, harvester=None, harvester_version=None)
        emulator.wait_lockdown(lab, False)
        M.delete_namespace(r, ns)
