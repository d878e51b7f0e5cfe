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
    own still migrates, alone for its namespace. Batches are filled one after the other, each
    first with the VMs of the source node that has the most left (so several nodes drained
    together fill every batch); one node's VMs keep their order as far as the limits allow.
    Returns a list of lists of the same dicts.

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
    """plan_batches over the limits (per_cluster, per_node, per_ns, budget) alone."""
    return _fill_batches(vms, limits, None)[0]


def _plan_with_capacity(vms, limits, capacity):
    """plan_batches with node capacity: a VM also needs a node with room for its target pod at its batch. The VMs
    that find room in no batch are planned after the others by the limits alone (capacity.unplaced). With room
    everywhere this gives exactly the batches of _plan_by_limits."""
    batches, remaining = _fill_batches(vms, limits, capacity)
    capacity.unplaced = remaining
    batches.extend(_plan_by_limits(remaining, limits))
    return batches


def _fill_batches(vms, limits, capacity):
    """(batches, the VMs no batch could take), the batches filled one after the other. Each takes, within the
    limits (and with capacity where a target pod finds room), first the VMs of the source node with the most VMs
    still to move, then those of the next node, each node's in their order. So the nodes of a wave drain evenly
    and its batches stay full; taking the nodes one after the other left the last node's VMs to batches of
    parallel_outbound_per_node alone. One node's VMs keep their order as far as the limits allow (exactly, but
    for a per_namespace_cap that holds one of them back while a later one of another namespace fits)."""
    per_node = limits[1]
    queues, first_seen = {}, {}
    for vm in vms:
        node = vm.get("node")
        first_seen.setdefault(node, len(first_seen))
        queues.setdefault(node, []).append(vm)
    batches = []
    while any(queues.values()):
        room = _BatchRoom(*limits)
        batch = []
        # the nodes with the most VMs left first; among equals, the node that came first
        for node in sorted((n for n in queues if queues[n]), key=lambda n: (-len(queues[n]), first_seen[n])):
            kept = []
            for position, vm in enumerate(queues[node]):
                if room.full() or room.nodes.get(node, 0) >= per_node:
                    kept.extend(queues[node][position:])   # nothing more of this node fits this batch
                    break
                if room.admits(vm) and (capacity is None or capacity.place(vm)):
                    batch.append(vm)
                    room.add(vm)
                else:
                    kept.append(vm)
            queues[node] = kept
            if room.full():
                break
        if not batch:
            break  # nothing more moves, so nothing more is freed: the rest find no room
        if capacity is not None:
            for vm in batch:
                capacity.free_source(vm)
        batches.append(batch)
    left = set(id(vm) for queue in queues.values() for vm in queue)
    return batches, [vm for vm in vms if id(vm) in left]


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
