# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Batch scheduling: which VMs migrate together, the way KubeVirt runs migrations.

KubeVirt runs at most parallelMigrationsPerCluster migrations at once and at most
parallelOutboundMigrationsPerNode from any one node; per_namespace_cap bounds what one namespace
migrates together; with a NodeCapacity (capacity.py) a VM also needs a node with room for its target pod.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import (
    add,
    less_or_equal,
    parse_resource_list,
)

# KubeVirt's defaults when its CR leaves spec.configuration.migrations unset.
DEFAULT_PARALLEL_PER_CLUSTER = 5
DEFAULT_PARALLEL_OUTBOUND_PER_NODE = 2


def positive_int(value, what):
    """value as an int of at least 1, else InputError naming what."""
    if isinstance(value, bool):
        value = None
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or (isinstance(value, float) and value != number):
        raise InputError("%s must be a whole number of at least 1, got %r" % (what, value),
                         "give e.g. %s: 2" % what)
    return number


def namespace_cap(per_namespace_cap):
    """(count cap or None, resource-list cap or None) from an int or a resource list."""
    if per_namespace_cap is None:
        return None, None
    if isinstance(per_namespace_cap, dict):
        if not per_namespace_cap:
            return None, None
        budget = parse_resource_list(per_namespace_cap, "per_namespace_cap")
        bad = sorted(name for name, value in budget.items() if value <= 0)
        if bad:
            raise InputError("per_namespace_cap must be positive, got %s for %s"
                             % (", ".join(str(per_namespace_cap[n]) for n in bad), ", ".join(bad)),
                             "give e.g. per_namespace_cap: {limits.memory: 8Gi}")
        return None, budget
    return positive_int(per_namespace_cap, "per_namespace_cap"), None


class _BatchRoom(object):
    """What one batch holds against KubeVirt's limits and per_namespace_cap."""

    def __init__(self, per_cluster, per_node, per_ns, budget):
        self.limits = (per_cluster, per_node, per_ns, budget)
        self.size = 0
        self.nodes = {}
        self.namespaces = {}
        self.charges = {}

    def charge_of(self, vm):
        budget = self.limits[3]
        return dict((n, v) for n, v in (vm.get("charge") or {}).items() if n in budget)

    def full(self):
        return self.size >= self.limits[0]

    def admits(self, vm):
        per_cluster, per_node, per_ns, budget = self.limits
        node, ns = vm.get("node"), vm.get("namespace")
        if self.size >= per_cluster or self.nodes.get(node, 0) >= per_node:
            return False
        if per_ns is not None and self.namespaces.get(ns, 0) >= per_ns:
            return False
        if budget is not None and ns in self.charges:
            # a VM larger than the cap on its own still goes, alone for its namespace
            fits, _names = less_or_equal(add(self.charges[ns], self.charge_of(vm)), budget)
            return fits
        return True

    def add(self, vm):
        node, ns = vm.get("node"), vm.get("namespace")
        self.size += 1
        self.nodes[node] = self.nodes.get(node, 0) + 1
        self.namespaces[ns] = self.namespaces.get(ns, 0) + 1
        if self.limits[3] is not None:
            self.charges[ns] = add(self.charges.get(ns, {}), self.charge_of(vm))


def plan_batches(vms, parallel_per_cluster=DEFAULT_PARALLEL_PER_CLUSTER,
                 parallel_outbound_per_node=DEFAULT_PARALLEL_OUTBOUND_PER_NODE, per_namespace_cap=None,
                 capacity=None):
    """Split VMs into migration batches KubeVirt would run at once.

    vms: dicts with at least namespace, name and node (the source node), in the order
    they should migrate. A batch holds at most parallel_per_cluster VMs and at most
    parallel_outbound_per_node from any one node. per_namespace_cap bounds what one
    namespace migrates together (and so its reservation): a number caps its VMs per batch;
    a resource list such as {"limits.memory": "8Gi"} caps the sum of their charges (each VM
    dict then needs "charge", a ResourceList), except that a VM larger than the cap on its
    own still migrates, alone for its namespace. Each VM goes into the first batch with
    room (first fit), so the order is kept as far as the limits allow. Returns a list of
    lists of the same dicts.

    capacity (a NodeCapacity) adds the free capacity of the nodes: a VM also needs a node with
    room for its target pod (vm["target"]) at its batch; targets stay where they land and a
    batch's source pods (vm["source_requests"]) free their node only for the batches after
    it. A VM with no room at a batch waits for a later one; the VMs that find room in no
    batch at all are planned after the others by the limits alone and listed in
    capacity.unplaced (kvquota_check reports them as a blocker).
    """
    per_cluster = positive_int(parallel_per_cluster, "parallel_per_cluster")
    per_node = positive_int(parallel_outbound_per_node, "parallel_outbound_per_node")
    per_ns, budget = namespace_cap(per_namespace_cap)
    limits = (per_cluster, per_node, per_ns, budget)
    if capacity is not None:
        return _plan_with_capacity(vms, limits, capacity)
    return _plan_by_limits(vms, limits)


def _plan_by_limits(vms, limits):
    """The first fit of plan_batches over the limits (per_cluster, per_node, per_ns, budget)."""
    batches = []
    rooms = []
    first_open = 0
    for vm in vms:
        for index in range(first_open, len(batches)):
            if rooms[index].admits(vm):
                batches[index].append(vm)
                rooms[index].add(vm)
                break
        else:
            batches.append([vm])
            rooms.append(_BatchRoom(*limits))
            rooms[-1].add(vm)
        while first_open < len(batches) and rooms[first_open].full():
            first_open += 1
    return batches


def _plan_with_capacity(vms, limits, capacity):
    """plan_batches with node capacity: batches filled one after the other, each with the VMs (in order) that
    the limits admit and that find a node with room. Without capacity limits this gives exactly the batches
    of the first fit above."""
    remaining = list(vms)
    batches = []
    while remaining:
        room = _BatchRoom(*limits)
        batch, waiting = [], []
        for position, vm in enumerate(remaining):
            if room.full():
                # nothing more fits this batch: the rest waits as it is (scanning on made this quadratic)
                waiting.extend(remaining[position:])
                break
            if room.admits(vm) and capacity.place(vm):
                batch.append(vm)
                room.add(vm)
            else:
                waiting.append(vm)
        if not batch:
            break  # nothing more moves, so nothing more is freed: the rest find no room
        for vm in batch:
            capacity.free_source(vm)
        batches.append(batch)
        remaining = waiting
    capacity.unplaced = list(remaining)
    batches.extend(_plan_by_limits(remaining, limits))
    return batches


def oversized_vms(movers, per_namespace_cap):
    """[(vm, resource names)] of the VMs that alone charge more than a resource-list per_namespace_cap allows
    (they migrate without other VMs of their namespace)."""
    _count_cap, budget = namespace_cap(per_namespace_cap)
    oversized = []
    if budget is not None:
        for vm in movers:
            fits, names = less_or_equal(dict((n, v) for n, v in vm["charge"].items() if n in budget), budget)
            if not fits:
                oversized.append((vm, names))
    return oversized


def batch_keys(batches):
    """The batches as lists of 'namespace/name' keys."""
    return [[q.vm_key(vm) for vm in batch] for batch in batches]
