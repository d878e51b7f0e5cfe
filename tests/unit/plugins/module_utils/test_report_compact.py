# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_check's compact report (report.compact): what grows with the VMs is left out, what the roles and the
preflight read stays, and the full report is not changed."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import json

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as c
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import report as render
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import (
    NOW,
    make_quota,
    make_vmi,
    snapshot,
)

NODES = ["node-%02d" % i for i in range(20)]
NAMESPACE_KEYS = {"verdict", "summary", "quotas", "quotas_not_matching", "needed"}
QUOTA_KEYS = {"name", "owner", "hard", "used", "free", "needed", "over_after", "status_synced", "fixes"}


def cluster(namespaces, vms_per_namespace, room=True):
    """A snapshot of namespaces x vms_per_namespace running VMs (1 CPU, 1Gi) spread over 20 nodes, each namespace
    with a limits quota (plenty of room, or too little: every namespace then needs a reservation) and a pod-count
    quota with room."""
    spec = {}
    for n in range(namespaces):
        ns = "t%03d" % n
        vmis = [make_vmi("vm-%04d" % (n * vms_per_namespace + i), ns, node=NODES[(n + i) % len(NODES)], cpu=1,
                         memory="1Gi") for i in range(vms_per_namespace)]
        # a VM's pod charges about 1.41Gi limits.memory: usage fits, one more pod does not
        memory = "%dGi" % (2 * vms_per_namespace + 8 if room else vms_per_namespace * 3 // 2 + 1)
        spec[ns] = ([make_quota("limits", ns, {"limits.cpu": str(2 * vms_per_namespace + 8), "limits.memory": memory}),
                     make_quota("count", ns, {"pods": "1000", "count/pods": "1000"})], vmis)
    return snapshot(spec)


def without_batches(report):
    return dict((key, value) for key, value in report.items() if key != "batches")


def test_compact_keeps_what_the_roles_read_and_drops_the_per_vm_parts():
    full = c.evaluate(cluster(3, 4, room=False), {"now": NOW})
    before = copy.deepcopy(full)
    compact = render.compact(full)
    assert full == before                                    # the full report is not changed
    for key in ("verdict", "scope", "kubevirt", "batches", "blockers", "warnings", "fixes", "notes", "summary",
                "requests", "capacity"):
        assert compact[key] == full[key], key
    assert compact["verdict"] == "needs_reservation" and compact["summary"]["migrating_vms"] == 12
    assert sorted(vm for batch in compact["batches"] for vm in batch["vms"]) == sorted(
        "t%03d/vm-%04d" % (n, n * 4 + i) for n in range(3) for i in range(4))
    assert sorted(compact["namespaces"]) == ["t000", "t001", "t002"]
    for name, ns in compact["namespaces"].items():
        assert set(ns) == NAMESPACE_KEYS, name
        assert ns["summary"] == {"vms": 4, "migrating_vms": 4, "not_running": 0, "blockers": 0}
        assert ns["verdict"] == full["namespaces"][name]["verdict"] == "needs_reservation"
        assert ns["needed"] == full["namespaces"][name]["needed"] and "limits" in ns["needed"]
        for quota, full_quota in zip(ns["quotas"], full["namespaces"][name]["quotas"]):
            assert set(quota) == QUOTA_KEYS
            assert quota == dict((k, v) for k, v in full_quota.items() if k in QUOTA_KEYS)
        limits = [quota for quota in ns["quotas"] if quota["name"] == "limits"][0]
        assert limits["needed"] and limits["fixes"]          # the preflight's table: needed and the fix
    json.dumps(compact)


def test_full_namespaces_carry_the_same_summary_as_the_compact_ones():
    snap = cluster(1, 3)
    snap["vmis"]["t000"].append(make_vmi("stopped", "t000", phase="Succeeded"))
    snap["vmis"]["t000"].append(make_vmi("pinned", "t000", migratable=False))
    full = c.evaluate(snap, {"now": NOW, "non_migratable": "fail"})
    ns = full["namespaces"]["t000"]
    assert ns["summary"] == {"vms": 4, "migrating_vms": 3, "not_running": 1, "blockers": 1}
    assert len(ns["vms"]) == 4 and len(ns["not_running"]) == 1 and len(ns["blockers"]) == 1
    assert render.compact(full)["namespaces"]["t000"]["summary"] == ns["summary"]
    assert full["blockers"] == ns["blockers"]                # the compact report keeps them at the top level


def test_compact_size_follows_namespaces_and_quotas_not_vms():
    """5,000 VMs or 50 in the same 50 namespaces and 100 quotas: apart from the batches (one "namespace/name" per
    migrating VM: the plan the roles follow) the compact result is as large; the full one is not."""
    small = c.evaluate(cluster(50, 1), {"now": NOW})
    large = c.evaluate(cluster(50, 100), {"now": NOW})
    assert large["summary"]["vms"] == 5000 and small["summary"]["vms"] == 50
    assert large["verdict"] == small["verdict"] == "ok"
    small_size = len(json.dumps(without_batches(render.compact(small))))
    large_size = len(json.dumps(without_batches(render.compact(large))))
    # quantities and batch counts in the summaries take a few more digits; nothing per VM
    assert large_size < small_size * 1.1, (small_size, large_size)
    assert len(json.dumps(without_batches(large))) > 20 * large_size
    batches = render.compact(large)["batches"]
    assert sum(len(batch["vms"]) for batch in batches) == 5000
    assert all(set(batch) == {"index", "vms", "nodes"} and all(isinstance(vm, str) for vm in batch["vms"])
               for batch in batches)
