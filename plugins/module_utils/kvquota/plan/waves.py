# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Waves of a rolling upgrade: which nodes are drained together, and which VMs the upgrade moves twice.

A wave holds at most max_unavailable nodes (a number, or a percentage of the nodes as OpenShift's and cluster-api's
maxUnavailable, rounded down and at least 1), in the order given. A node joins the wave only while the other
schedulable nodes, as they will be at the wave's turn (the simulation below), can hold every VM of the wave's
nodes, as the plan places target pods (capacity.NodeCapacity, batch after batch within KubeVirt's limits, none on
a node of the wave). Without the nodes' capacity (node_capacity false) the waves are the order cut in pieces of
max_unavailable.

The upgrade is simulated wave after wave, each wave's target pods placed preferring the nodes already upgraded
(and those not upgraded at all), as the run's PreferNoSchedule taint on the nodes still to be upgraded steers the
scheduler. A VM whose target pod finds room only on a node of a later wave moves again when that wave comes (the
first wave's always do when every node is upgraded: there is no upgraded node yet); a VM that finds no room at
its wave's turn is named too. The plan says both before anything moves.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import add, subtract
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import scheduling
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.capacity import NodeCapacity

_PERCENT = re.compile(r"^\s*([0-9]+)\s*%\s*$")


def max_unavailable_count(value, total):
    """How many nodes a wave may hold: value a whole number of at least 1, or "<n>%" of total (rounded down, at
    least 1, as a Deployment's maxUnavailable); InputError naming the option otherwise."""
    match = _PERCENT.match(value) if isinstance(value, str) else None
    if match:
        percent = int(match.group(1))
        if not 1 <= percent <= 100:
            raise InputError("max_unavailable %r is not a percentage between 1%% and 100%%" % value,
                             "give e.g. max_unavailable: 2 or max_unavailable: 25%")
        return max(1, total * percent // 100)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return scheduling.positive_int(value, "max_unavailable")


def _movers_by_node(movers):
    by_node = {}
    for vm in movers:
        by_node.setdefault(vm.get("node"), []).append(vm)
    return by_node


def plan_waves(snapshot, movers, limits, nodes, max_unavailable):
    """The waves of nodes (see the module docstring) as [{"nodes", "vms", "moved_again", "no_room"}]: movers the
    plan's migrating VM entries (with "target" and "source_requests" when the plan knew the nodes' capacity),
    limits (per cluster, per node, per-namespace cap), nodes in the operator's order. "vms" counts the VMs on the
    wave's nodes at its turn (those the earlier waves moved there included), "moved_again" names those of them an
    earlier wave moved already, "no_room" those that find no room at the wave's turn (a blocker)."""
    count = max_unavailable_count(max_unavailable, len(nodes))
    by_node = _movers_by_node(movers)
    if snapshot.node_requests is None or not all("target" in vm for vm in movers):
        waves = [nodes[index:index + count] for index in range(0, len(nodes), count)]
        return [{"nodes": list(wave), "vms": sum(len(by_node.get(n, [])) for n in wave), "moved_again": [],
                 "no_room": []} for wave in waves]
    return _Upgrade(snapshot, limits, by_node, nodes).waves(count)


class _Upgrade(object):
    """The upgrade simulated wave after wave: the nodes' requests and the VMs on each node as each wave finds
    them (the earlier waves' VMs where their target pods landed, the upgraded nodes empty of them)."""

    def __init__(self, snapshot, limits, by_node, nodes):
        self.snapshot, self.limits, self.nodes = snapshot, limits, list(nodes)
        self.requested = dict((node, dict(value)) for node, value in (snapshot.node_requests or {}).items())
        self.where = dict((node, list(vms)) for node, vms in by_node.items())
        self.moved = set()
        self.upgrading = set(nodes)

    def _placement(self, wave, later):
        """(VMs of the wave's nodes, NodeCapacity after placing their target pods, preferring nodes not in later)."""
        capacity = NodeCapacity(self.snapshot.nodes or {}, self.requested, wave)
        capacity.prefer = set(name for name in capacity.targets if name not in later)
        wave_vms = [vm for node in wave for vm in self.where.get(node, [])]
        scheduling.plan_batches(wave_vms, *self.limits, capacity=capacity)
        return wave_vms, capacity

    def waves(self, count):
        result = []
        index = 0
        while index < len(self.nodes):
            wave = [self.nodes[index]]
            index += 1
            # a node joins while the other nodes, as they are at this wave's turn, hold every VM of the wave
            while len(wave) < count and index < len(self.nodes):
                _vms, capacity = self._placement(wave + [self.nodes[index]], set(self.nodes[index + 1:]))
                if capacity.unplaced:
                    break
                wave.append(self.nodes[index])
                index += 1
            result.append(self._run(wave, set(self.nodes[index:])))
        return result

    def _run(self, wave, later):
        wave_vms, capacity = self._placement(wave, later)
        again = sorted(q.vm_key(vm) for vm in wave_vms if q.vm_key(vm) in self.moved)
        no_room = sorted(q.vm_key(vm) for vm in capacity.unplaced)
        for vm in wave_vms:
            landed = capacity.placed.get((vm.get("namespace"), vm.get("name")))
            if landed is None:
                continue   # no room: it stays where it is (the wave's own plan blocks on it)
            source = vm.get("node")
            self.requested[source] = subtract(self.requested.get(source, {}), vm.get("source_requests") or {})
            self.requested[landed] = add(self.requested.get(landed, {}), vm.get("target") or {})
            self.where[source] = [other for other in self.where.get(source, []) if other is not vm]
            self.where.setdefault(landed, []).append(dict(vm, node=landed, source_requests=vm.get("target") or {}))
            if landed in self.upgrading:
                self.moved.add(q.vm_key(vm))
        return {"nodes": list(wave), "vms": len(wave_vms), "moved_again": again, "no_room": no_room}


__all__ = ["max_unavailable_count", "plan_waves"]
