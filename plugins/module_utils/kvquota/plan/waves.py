# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Waves of a rolling upgrade: which nodes are drained together, and which VMs the upgrade moves twice.

A wave holds at most max_unavailable nodes (a number, or a percentage of the nodes as OpenShift's and cluster-api's
maxUnavailable, rounded down and at least 1), in the order given. A node joins the wave only while the other
schedulable nodes can hold every VM of the wave's nodes, as the plan places target pods (capacity.NodeCapacity,
batch after batch within KubeVirt's limits, none on a node of the wave). Without the nodes' capacity
(node_capacity false) the waves are the order cut in pieces of max_unavailable.

Moved again: the upgrade is simulated wave after wave, each wave's target pods placed preferring the nodes
already upgraded (and those not upgraded at all), as the run's PreferNoSchedule taint on the nodes still to be
upgraded steers the scheduler. A VM whose target pod finds room only on a node of a later wave moves again
when that wave comes: the plan names it before anything moves. The first wave's VMs always do when every node
is upgraded (there is no upgraded node yet).
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


def _holds(snapshot, limits, by_node, wave):
    """Whether the schedulable nodes outside wave have room for every VM of wave's nodes."""
    capacity = NodeCapacity(snapshot.nodes or {}, snapshot.node_requests, wave)
    scheduling.plan_batches([vm for node in wave for vm in by_node.get(node, [])], *limits, capacity=capacity)
    return not capacity.unplaced


def plan_waves(snapshot, movers, limits, nodes, max_unavailable):
    """The waves of nodes (see the module docstring) as [{"nodes", "vms", "moved_again"}]: movers the plan's
    migrating VM entries (with "target" and "source_requests" when the plan knew the nodes' capacity), limits
    (per cluster, per node, per-namespace cap). "vms" counts the VMs on the wave's nodes at its turn (those the
    earlier waves moved there included), "moved_again" names those of them an earlier wave moved already."""
    count = max_unavailable_count(max_unavailable, len(nodes))
    capacity_known = snapshot.node_requests is not None and all("target" in vm for vm in movers)
    by_node = _movers_by_node(movers)
    waves = []
    index = 0
    while index < len(nodes):
        wave = [nodes[index]]
        index += 1
        while (len(wave) < count and index < len(nodes)
               and (not capacity_known or _holds(snapshot, limits, by_node, wave + [nodes[index]]))):
            wave.append(nodes[index])
            index += 1
        waves.append(wave)
    if not capacity_known:
        return [{"nodes": wave, "vms": sum(len(by_node.get(n, [])) for n in wave), "moved_again": []}
                for wave in waves]
    return _simulate(snapshot, limits, by_node, waves)


def _simulate(snapshot, limits, by_node, waves):
    """Each wave in turn: its VMs' target pods placed preferring nodes not left to upgrade; each VM then runs
    where it landed (its requests those of its target pod) for the waves after."""
    requested = dict((node, dict(value)) for node, value in (snapshot.node_requests or {}).items())
    where = dict((node, list(vms)) for node, vms in by_node.items())
    moved = set()
    upgrading = set(node for wave in waves for node in wave)
    result = []
    for number, wave in enumerate(waves):
        later = set(node for other in waves[number + 1:] for node in other)
        capacity = NodeCapacity(snapshot.nodes or {}, requested, wave)
        capacity.prefer = set(name for name in capacity.targets if name not in later)
        wave_vms = [vm for node in wave for vm in where.get(node, [])]
        again = sorted(q.vm_key(vm) for vm in wave_vms if q.vm_key(vm) in moved)
        scheduling.plan_batches(wave_vms, *limits, capacity=capacity)
        for vm in wave_vms:
            landed = capacity.placed.get((vm.get("namespace"), vm.get("name")))
            if landed is None:
                continue   # no room anywhere: the wave's own plan blocks on it (insufficient_capacity)
            source = vm.get("node")
            requested[source] = subtract(requested.get(source, {}), vm.get("source_requests") or {})
            requested[landed] = add(requested.get(landed, {}), vm.get("target") or {})
            where[source] = [other for other in where.get(source, []) if other is not vm]
            where.setdefault(landed, []).append(dict(vm, node=landed, source_requests=vm.get("target") or {}))
            if landed in upgrading:
                moved.add(q.vm_key(vm))
        result.append({"nodes": list(wave), "vms": len(wave_vms), "moved_again": again})
    return result


__all__ = ["max_unavailable_count", "plan_waves"]
