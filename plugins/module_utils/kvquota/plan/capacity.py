# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node capacity: the free room of the nodes while the plan's target pods land, batch after batch.

inventory.read_inventory (node_capacity) sums the requests of the pods on each node with requests_by_node;
NodeCapacity places target pods (scheduling.plan_batches) and reports the nodes and who found no room.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.findings import finding
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import add, parse_resource_list

# What the planner checks a target pod against: the node's allocatable minus the requests of its non-terminal
# pods, for these names (the pod evaluator's names: requests.cpu is the pod's cpu request, pods counts it).
CAPACITY_NAMES = ("requests.cpu", "requests.memory", "pods")
ALLOCATABLE_NAMES = {"requests.cpu": "cpu", "requests.memory": "memory", "pods": "pods"}
CAPACITY_NOT_MODELLED = ("node affinity and nodeSelector, taints and tolerations, pod (anti-)affinity other than "
                         "\"not on its own node\", topology spread, extended resources (devices.kubevirt.io/kvm, "
                         "GPUs), hugepages, ephemeral storage; Ready conditions (only cordons are read)")


def capacity_part(usage):
    """The CAPACITY_NAMES of a pod's usage or a migration charge."""
    return dict((name, usage.get(name, 0)) for name in CAPACITY_NAMES)


def requests_by_node(pods):
    """{node: {requests.cpu, requests.memory, pods}} of the non-terminal pods bound to each node (what the
    scheduler subtracts from allocatable; a pod being deleted still counts until it is gone)."""
    result = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or q.pod_is_terminal(pod):
            continue
        result[node] = add(result.get(node, {}), capacity_part(q.pod_usage(pod)))
    return result


class NodeCapacity(object):
    """The free capacity of the nodes while the plan's target pods land, batch after batch.

    nodes: {name: Node}; requested: requests_by_node(...). A target pod may land on a node that is
    schedulable (not cordoned) and not its VM's own node (the node being drained: node_maintenance drains one
    node at a time, rolling_upgrade one after the other), nor one of draining (the nodes of a wave, drained
    together and all cordoned by the run), with room for vm["target"] in every CAPACITY_NAMES an allocatable
    states. Among those the planner takes the one with the most free memory (then cpu, then name), as the
    scheduler's default scoring spreads pods.
    """

    def __init__(self, nodes, requested, draining=()):
        self.free = {}
        self.initial = {}
        self.schedulable = {}
        for name in sorted(nodes):
            node = nodes[name] or {}
            allocatable = (node.get("status") or {}).get("allocatable") or {}
            free = {}
            for cname in CAPACITY_NAMES:
                value = allocatable.get(ALLOCATABLE_NAMES[cname])
                if value is not None:  # an allocatable that does not state a name does not limit it
                    free[cname] = parse_resource_list({cname: value}, "allocatable of node %s" % name)[cname] - (
                        (requested.get(name) or {}).get(cname, 0))
            self.free[name] = free
            self.initial[name] = dict(free)
            self.schedulable[name] = not (node.get("spec") or {}).get("unschedulable")
        self.targets = [n for n in sorted(nodes) if self.schedulable[n] and n not in set(draining)]
        self.unplaced = []
        # the nodes a target pod prefers (a rolling upgrade's nodes already upgraded, as its PreferNoSchedule taint
        # on the others steers the scheduler): tried first; None prefers none
        self.prefer = None
        self.placed = {}   # {(namespace, name): the node its target pod landed on}

    def candidates(self, source_node):
        return [n for n in self.targets if n != source_node]

    def fits(self, node, need):
        free = self.free[node]
        return all(need.get(name, 0) <= free[name] for name in free)

    def place(self, vm):
        """Land vm's target pod on the roomiest candidate node, a preferred one if any has room (its free capacity
        shrinks); the node, or None."""
        need = vm.get("target") or {}
        candidates = self.candidates(vm.get("node"))
        node = None
        if self.prefer is not None:
            node = self._roomiest([n for n in candidates if n in self.prefer], need)
        if node is None:
            node = self._roomiest(candidates, need)
        if node is None:
            return None
        for name in self.free[node]:
            self.free[node][name] -= need.get(name, 0)
        self.placed[(vm.get("namespace"), vm.get("name"))] = node
        return node

    def _roomiest(self, candidates, need):
        node, best = None, None
        for name in candidates:  # by name: the first of equals wins
            key = (self.free[name].get("requests.memory", 0), self.free[name].get("requests.cpu", 0))
            # fits() only for a node roomier than the best so far (the same choice; fits() is the costly part)
            if (best is None or key > best) and self.fits(name, need):
                node, best = name, key
        return node

    def free_source(self, vm):
        """vm's source pod is gone (its batch is over): its node gets its requests back."""
        node = vm.get("node")
        if node in self.free:
            for name in self.free[node]:
                self.free[node][name] += (vm.get("source_requests") or {}).get(name, 0)

    def report(self):
        """{node: {schedulable, free}} as the plan found them, before anything moves."""
        return dict((n, {"schedulable": self.schedulable[n],
                         "free": dict((name, ("-" if v < 0 else "") + q.show(abs(v), name))
                                      for name, v in sorted(self.initial[n].items()))})
                    for n in sorted(self.free))

    def shortfall_findings(self, movers):
        """One blocker per source node whose VMs found no room: the free capacity of the other nodes, what
        its VMs need, and which VMs have no room."""
        findings = []
        by_node = {}
        for vm in self.unplaced:
            by_node.setdefault(vm.get("node") or "", []).append(vm)
        for node in sorted(by_node):
            others = self.candidates(node)
            free = {}
            for other in others:
                free = add(free, dict((n, max(v, 0)) for n, v in self.initial[other].items()))
            need = {}
            for vm in movers:
                if vm.get("node") == node:
                    need = add(need, dict((n, v) for n, v in (vm.get("target") or {}).items() if n in free))
            short = [n for n in CAPACITY_NAMES if n in free and need.get(n, 0) > free[n]]
            names = ["%s/%s" % (vm["namespace"], vm["name"]) for vm in by_node[node]]
            where = "the other nodes" if others else "no other schedulable node"
            if short:
                text = "; ".join("%s have %s of %s free, the VMs of %s need %s"
                                 % (where, q.approx(free[n], n), n, node, q.approx(need[n], n)) for n in short)
            elif not others:
                text = "there is %s for the VMs of %s" % (where, node)
            else:
                largest = max(others, key=lambda n: self.free[n].get("requests.memory", 0))
                left = max(self.free[largest].get("requests.memory", 0), 0)
                text = ("the other nodes have room for the VMs of %s in total, but once the other target pods "
                        "have landed no single node has room for %s (the most free memory left on one node: %s "
                        "on %s)" % (node, ", ".join(names), q.approx(left, "requests.memory"), largest))
            findings.append(finding(
                "insufficient_capacity", None,
                "%s (no room for %s)" % (text, ", ".join(names)) if short or not others else text,
                "free capacity on the other nodes or add a node (or uncordon one)",
                node=node, vms=names,
                free=dict((n, q.show(free[n], n)) for n in sorted(free)),
                needed=dict((n, q.show(need[n], n)) for n in sorted(need))))
        return findings


def capacity_report(capacity):
    """The report's capacity part for a NodeCapacity after planning, or for None (not checked)."""
    if capacity is None:
        return {"checked": False, "nodes": {}, "no_room": [], "not_modelled": CAPACITY_NOT_MODELLED}
    return {"checked": True, "nodes": capacity.report(),
            "no_room": ["%s/%s" % (vm["namespace"], vm["name"]) for vm in capacity.unplaced],
            "not_modelled": CAPACITY_NOT_MODELLED}
