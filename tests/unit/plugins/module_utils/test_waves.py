# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rolling upgrade's waves (plan/waves.py) and a wave's plan (kvquota_check drain_together): how many nodes
drain together, that the other nodes hold the wave's VMs, and which VMs the upgrade moves twice."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as c
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import waves
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.inventory import Snapshot
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import (
    NOW,
    make_node,
    make_quota,
    make_vmi,
    snapshot,
    with_nodes,
)


@pytest.mark.parametrize("value,total,count", [
    (1, 6, 1), (3, 6, 3), ("2", 6, 2), ("50%", 6, 3), ("33%", 6, 1), ("10%", 6, 1), ("100%", 6, 6), (" 25 % ", 8, 2)])
def test_max_unavailable_is_a_count_or_a_percentage_rounded_down_and_at_least_one(value, total, count):
    assert waves.max_unavailable_count(value, total) == count


@pytest.mark.parametrize("value", [0, -1, "0%", "101%", "x", True, 1.5, None, "2.5"])
def test_a_malformed_max_unavailable_is_refused_naming_the_option(value):
    with pytest.raises(InputError, match="max_unavailable"):
        waves.max_unavailable_count(value, 6)


def _cluster(nodes_vms, memory_per_node, outside=()):
    """Nodes n1.. each running len(vms) VMs of 4Gi in namespace t; allocatable memory_per_node each (and the
    nodes outside the upgrade, empty)."""
    vmis = [make_vmi(vm, "t", node=node) for node, vms in nodes_vms for vm in vms]
    snap = snapshot({"t": ([make_quota("q", "t", {"limits.memory": "1000Gi"})], vmis)},
                    scope={"nodes": [n for n, _vms in nodes_vms], "namespaces": []})
    return Snapshot.of(with_nodes(snap, [make_node(n, memory=memory_per_node) for n, _vms in nodes_vms]
                                  + [make_node(n, memory=memory_per_node) for n in outside]))


def _waves(snap, max_unavailable, options=None):
    planned = c.plan(snap, dict(options or {}, now=NOW))
    return waves.plan_waves(snap, planned.movers, planned.limits, list(snap.scope["nodes"]), max_unavailable)


def test_a_node_joins_a_wave_only_while_the_other_nodes_hold_its_vms():
    # 4 nodes of 2 VMs (a 4Gi VM's launcher pod requests a little over 4Gi), 24Gi each: every node has room for
    # 3 more target pods beside its own 2, so 2 nodes' 4 VMs fit on the other 2, 3 nodes' 6 VMs not on the last
    layout = [("n1", ["a1", "a2"]), ("n2", ["b1", "b2"]), ("n3", ["c1", "c2"]), ("n4", ["d1", "d2"])]
    snap = _cluster(layout, "24Gi")
    assert [w["nodes"] for w in _waves(snap, 3)] == [["n1", "n2"], ["n3", "n4"]]
    assert [w["nodes"] for w in _waves(snap, "100%")] == [["n1", "n2"], ["n3", "n4"]]
    assert [w["nodes"] for w in _waves(snap, 1)] == [["n1"], ["n2"], ["n3"], ["n4"]]
    # by the limits alone (node_capacity false): the order cut in pieces
    assert [w["nodes"] for w in _waves(snap, 3, {"node_capacity": False})] == [["n1", "n2", "n3"], ["n4"]]


def test_the_first_waves_vms_move_again_and_the_plan_says_so():
    layout = [("n1", ["a1", "a2"]), ("n2", ["b1", "b2"]), ("n3", ["c1", "c2"]), ("n4", ["d1", "d2"])]
    result = _waves(_cluster(layout, "24Gi"), 2)
    # no node is upgraded before the first wave: its VMs land on n3/n4 and move again with them; n3/n4's VMs
    # (their own and those) then land on n1/n2, upgraded and empty
    assert result == [{"nodes": ["n1", "n2"], "vms": 4, "moved_again": [], "no_room": []},
                      {"nodes": ["n3", "n4"], "vms": 8, "moved_again": ["t/a1", "t/a2", "t/b1", "t/b2"], "no_room": []}]


def test_vms_go_to_the_nodes_already_upgraded_or_not_upgraded_at_all():
    # node by node with an empty node outside the upgrade: every VM lands there or on an upgraded node, once
    layout = [("n1", ["a1"]), ("n2", ["b1"]), ("n3", ["c1"])]
    result = _waves(_cluster(layout, "24Gi", outside=["spare"]), 1)
    assert [w["moved_again"] for w in result] == [[], [], []]
    assert [w["vms"] for w in result] == [1, 1, 1]
    # without it the first node's VM moves twice
    result = _waves(_cluster(layout, "24Gi"), 1)
    assert sum(len(w["moved_again"]) for w in result) == 1


def test_a_waves_plan_puts_no_target_pod_on_another_node_of_the_wave():
    # n1's VM has room on n2 only (n3 is full): one node at a time that is fine; drained together with n2, no room
    vmis = [make_vmi("a1", "t", node="n1")]
    snap = snapshot({"t": ([make_quota("q", "t", {"limits.memory": "100Gi"})], vmis)},
                    scope={"nodes": ["n1", "n2"], "namespaces": []})
    snap = with_nodes(snap, [make_node("n1"), make_node("n2"), make_node("n3", memory="1Gi")])
    alone = c.evaluate(snap, {"now": NOW})
    assert alone["blockers"] == [] and alone["capacity"]["no_room"] == []
    together = c.evaluate(snap, {"now": NOW, "drain_together": True})
    assert [b["kind"] for b in together["blockers"]] == ["insufficient_capacity"]
    assert together["capacity"]["no_room"] == ["t/a1"]


def test_a_waves_batches_hold_vms_of_all_its_nodes_within_kubevirts_limits():
    layout = [("n1", ["a1", "a2", "a3"]), ("n2", ["b1", "b2", "b3"]), ("n3", ["c1", "c2"])]
    vmis = [make_vmi(vm, "t", node=node) for node, vms in layout for vm in vms]
    snap = snapshot({"t": ([make_quota("q", "t", {"limits.memory": "1000Gi"})], vmis)},
                    scope={"nodes": ["n1", "n2", "n3"], "namespaces": []})
    snap = with_nodes(snap, [make_node(n) for n in ("n1", "n2", "n3", "n4")])
    report = c.evaluate(snap, {"now": NOW, "drain_together": True})
    batches = [b["vms"] for b in report["batches"]]
    # KubeVirt's defaults: 5 at once in the cluster, 2 at once off one node
    assert all(len(b) <= 5 for b in batches) and len(batches) == 2
    for batch in batches:
        for node_vms in ([k for k in batch if k[2] == prefix] for prefix in "abc"):
            assert len(node_vms) <= 2
    assert sorted(k for b in batches for k in b) == sorted("t/" + vm for _n, vms in layout for vm in vms)
    assert q.vm_key({"namespace": "t", "name": "a1"}) in batches[0]


def test_a_wave_is_picked_against_the_nodes_as_they_are_at_its_turn():
    """A reviewer's counterexample: judged against the cluster before anything moves, [n1, n2] | [n3, n4] fits,
    but at the second wave n3 and n4 hold n1's and n2's VMs too and those do not fit on n1 and n2."""
    vmis = [make_vmi("big", "t", node="n1", memory="8Gi"),
            make_vmi("b1", "t", node="n2", memory="1Gi"), make_vmi("b2", "t", node="n2", memory="2Gi"),
            make_vmi("c1", "t", node="n3", memory="4Gi"), make_vmi("c2", "t", node="n3", memory="1Gi"),
            make_vmi("d1", "t", node="n4", memory="1Gi")]
    snap = snapshot({"t": ([make_quota("q", "t", {"limits.memory": "1000Gi"})], vmis)},
                    scope={"nodes": ["n1", "n2", "n3", "n4"], "namespaces": []})
    snap = Snapshot.of(with_nodes(snap, [make_node("n1", memory="10Gi"), make_node("n2", memory="10Gi"),
                                         make_node("n3", memory="14Gi"), make_node("n4", memory="14Gi")]))
    one_by_one = _waves(snap, 1)
    assert all(w["no_room"] == [] for w in one_by_one), one_by_one
    result = _waves(snap, 2)
    assert all(w["no_room"] == [] for w in result), result
    # n3 goes alone: with n4 beside it, n1 and n2 (upgraded, n2's VMs now on n3/n4) lack room for all six
    assert [w["nodes"] for w in result] == [["n1", "n2"], ["n3"], ["n4"]]


def test_the_waves_keep_the_operators_order():
    layout = [("n3", ["c1"]), ("n10", ["b1"]), ("n1", ["a1"])]
    snap = _cluster(layout, "24Gi", outside=["spare"])
    planned = c.plan(snap, {"now": NOW})
    order = ["n3", "n10", "n1"]
    assert [w["nodes"] for w in waves.plan_waves(snap, planned.movers, planned.limits, order, 2)] == [["n3", "n10"], ["n1"]]
