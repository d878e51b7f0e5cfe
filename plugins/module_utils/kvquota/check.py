# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_check: the read-only report, and the batch plan the roles follow.

check(cluster, scope, options) reads an Inventory snapshot (inventory.py, a few list
calls) and hands it to evaluate(snapshot, options), which is pure: it sizes every VM's
migration target pod with the cluster's current KubeVirt configuration, schedules the
migrations in batches the way KubeVirt runs them (parallelMigrationsPerCluster,
parallelOutboundMigrationsPerNode), and for every namespace and every quota a target
pod is charged against computes used/hard, the headroom per batch and in total, and
what blocks the maintenance. Nothing is ever written.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import datetime
import json

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import admission
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import ownership
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.quantity import format_quantity, quantity_format
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.resources import (
    add,
    default_format,
    equals,
    less_or_equal,
    parse_resource_list,
)

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import backends as _backends
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import ledger as _ledger
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import store as _store

LEDGER_ANNOTATION = _ledger.LEDGER_ANNOTATION
HARVESTER_RATIO_SETTING = "additional-guest-memory-overhead-ratio"
HARVESTER_SKIP_ANNOTATION = _backends.HARVESTER_SKIP_ANNOTATION

DEFAULT_PARALLEL_PER_CLUSTER = 5
DEFAULT_PARALLEL_OUTBOUND_PER_NODE = 2
NON_MIGRATABLE_POLICIES = ("fail", "shutdown", "skip")
VERDICTS = ("ok", "needs_reservation", "blocked")
FINAL_MIGRATION_PHASES = ("Succeeded", "Failed")


_FORMATTED = {}


def format_resource_list(rl, formats=None):
    """resources.format_resource_list, remembering each (value, format) it printed (reports repeat them)."""
    formats = formats or {}
    result = {}
    for name in sorted(rl):
        key = (rl[name], formats.get(name) or default_format(name))
        text = _FORMATTED.get(key)
        if text is None:
            text = format_quantity(key[0], key[1])
            if len(_FORMATTED) < 100000:
                _FORMATTED[key] = text
        result[name] = text
    return result


def _sizing():
    """sizing.py, imported late so the planning helpers work without it."""
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import sizing
    return sizing


# ---------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------

def _positive_int(value, what):
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


def _cap(per_namespace_cap):
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
    return _positive_int(per_namespace_cap, "per_namespace_cap"), None


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
    per_cluster = _positive_int(parallel_per_cluster, "parallel_per_cluster")
    per_node = _positive_int(parallel_outbound_per_node, "parallel_outbound_per_node")
    per_ns, budget = _cap(per_namespace_cap)
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
        for vm in remaining:
            if not room.full() and room.admits(vm) and capacity.place(vm):
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


# ---------------------------------------------------------------------------
# Free capacity of the nodes
# ---------------------------------------------------------------------------

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
    node at a time, rolling_upgrade one after the other), with room for vm["target"] in every CAPACITY_NAMES
    an allocatable states. Among those the planner takes the one with the most free memory (then cpu, then
    name), as the scheduler's default scoring spreads pods.
    """

    def __init__(self, nodes, requested):
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
        self.targets = [n for n in sorted(nodes) if self.schedulable[n]]
        self.unplaced = []

    def candidates(self, source_node):
        return [n for n in self.targets if n != source_node]

    def fits(self, node, need):
        free = self.free[node]
        return all(need.get(name, 0) <= free[name] for name in free)

    def place(self, vm):
        """Land vm's target pod on the roomiest candidate node (its free capacity shrinks); the node, or None."""
        need = vm.get("target") or {}
        node, best = None, None
        for name in self.candidates(vm.get("node")):  # by name: the first of equals wins
            key = (self.free[name].get("requests.memory", 0), self.free[name].get("requests.cpu", 0))
            if self.fits(name, need) and (best is None or key > best):
                node, best = name, key
        if node is None:
            return None
        for name in self.free[node]:
            self.free[node][name] -= need.get(name, 0)
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
            findings.append(_finding(
                "insufficient_capacity", None,
                "%s (no room for %s)" % (text, ", ".join(names)) if short or not others else text,
                "free capacity on the other nodes or add a node (or uncordon one)",
                node=node, vms=names,
                free=dict((n, q.show(free[n], n)) for n in sorted(free)),
                needed=dict((n, q.show(need[n], n)) for n in sorted(need))))
        return findings


def batch_keys(batches):
    """The batches as lists of 'namespace/name' keys."""
    return [[q.vm_key(vm) for vm in batch] for batch in batches]


# ---------------------------------------------------------------------------
# Small readers
# ---------------------------------------------------------------------------

def _now(options):
    value = options.get("now")
    if value is None:
        return datetime.datetime.now(datetime.timezone.utc)
    return _ledger.parse_datetime(value)


def _meta(obj):
    return obj.get("metadata") or {}


def _labels(obj):
    return _meta(obj).get("labels") or {}


def _annotations(obj):
    return _meta(obj).get("annotations") or {}


def _condition(obj, kind):
    for condition in ((obj.get("status") or {}).get("conditions") or ()):
        if condition.get("type") == kind:
            return condition
    return None


def quota_owner(quota):
    """'rancher' for a quota Rancher rebuilds from the namespace annotation, else 'plain'."""
    return "rancher" if _backends.is_rancher_managed(quota) else "plain"


# ---------------------------------------------------------------------------
# Ledger (reservations left in the cluster)
# ---------------------------------------------------------------------------

def _ref_names(refs, key):
    """Names listed under refs[key] (entries may be 'name', 'ns/name' or {'name': ...})."""
    result = []
    for item in (refs or {}).get(key) or ():
        if isinstance(item, dict):
            item = item.get("name")
        if item:
            result.append(str(item).rsplit("/", maxsplit=1)[-1])
    return result


def _finished(entry, vmims, pods, now_seconds, grace_seconds):
    """Whether a reservation's work is visibly over: every migration it names is gone or final,
    no source pod it names is still running, and it was created more than grace_seconds ago."""
    migrations = _ref_names(entry.refs, "migrations")
    if not migrations:
        return False
    created = _ledger.parse_time(entry.created) if entry.created else None
    if created is None or now_seconds - created < grace_seconds:
        return False
    live = dict((_meta(m).get("name"), (m.get("status") or {}).get("phase")) for m in vmims)
    if any(name in live and live[name] not in FINAL_MIGRATION_PHASES for name in migrations):
        return False
    running = set(_meta(p).get("name") for p in pods if not q.pod_is_terminal(p))
    return not any(name in running for name in _ref_names(entry.refs, "sourcePods"))


def quota_ledger(quota, ns_obj, ledgers, cluster_facts=None):
    """(Ledger or None, problem text or None) of a quota: the operator namespace's ledger with its UID
    (ledgers: {uid: Ledger} from the snapshot), else a 0.1.0 annotation that verifies against the quota."""
    uid = _meta(quota).get("uid")
    if uid and uid in (ledgers or {}):
        return ledgers[uid], None
    backend = _backends.select_backend(quota, ns_obj or {}, cluster_facts)
    if not backend.writable:
        return None, None
    return _store.legacy_ledger(quota, ns_obj or {}, backend)


def ledger_findings(namespace, ns_obj, quota_objs, now, vmims=(), pods=(), cluster_facts=None,
                    grace_seconds=3600, ledgers=None):
    """Blockers and warnings about reservations recorded for a namespace's quotas.

    ledgers: {quota uid: Ledger} read from the operator namespace (nothing a tenant can write is read as a
    ledger; a 0.1.0 annotation counts only if it verifies against its quota). expired: its expiry is past (only
    the reaper releases it). orphaned: every migration it was made for is over (gone or final), its source pods
    are gone, and it is older than grace_seconds: the job that made it did not release it. Active reservations
    are warnings: the plan counts their delta as taken (see without_reservations).
    """
    blockers = []
    warnings = []
    now_seconds = _ledger.parse_time(now)
    for quota in quota_objs:
        qname = _meta(quota).get("name")
        book, problem = quota_ledger(quota, ns_obj, ledgers, cluster_facts)
        if problem:
            warnings.append(_finding("untrusted_ledger", namespace, problem,
                                     "nothing to do: kvquota ignores it and removes it on its next write", quota=qname))
        if book is None:
            continue
        for finding in _reservation_findings(namespace, qname, book, now_seconds, vmims, pods, grace_seconds):
            (blockers if finding.pop("_blocker") else warnings).append(finding)
    return blockers, warnings


def without_reservations(quota, book):
    """A copy of quota whose spec.hard and status.hard leave out the active reservations' deltas: the plan
    counts headroom reserved by any run (another job's, or an earlier batch of this one) as taken, never as
    free room. Only a value that is still what kvquota wrote (or the value before a write under way) holds the
    deltas; any other value is an administrator's new base or a revert to the base (ledger.observe keeps it as
    the base on the next write), so it is the room without reservations as it is."""
    delta = _ledger.active_delta(book) if book is not None else {}
    if not delta:
        return quota
    result = copy.deepcopy(quota)
    for part in ("spec", "status"):
        hard = (result.get(part) or {}).get("hard")
        if not hard:
            continue
        for name, value in delta.items():
            if name in hard and _holds_our_write(hard[name], name, book):
                hard[name] = format_quantity(parse_resource_list({name: hard[name]})[name] - value,
                                             quantity_format(hard[name]))
    return result


def _holds_our_write(text, name, book):
    """Whether a quota value equals what the ledger says kvquota wrote there (or held before its write)."""
    value = parse_resource_list({name: text})[name]
    for written in (book.written or {}, book.previous or {}):
        if written.get(name) is not None and parse_resource_list({name: written[name]})[name] == value:
            return True
    return False


def _reservation_findings(namespace, qname, book, now_seconds, vmims, pods, grace_seconds):
    expired = set(_ledger.expired(book, now_seconds))
    where = "quota %s/%s" % (namespace, qname)
    for rid in sorted(book.reservations):
        entry = book.reservations[rid]
        owner = " (owner %s)" % entry.owner if entry.owner else ""
        data = dict(quota=qname, reservation=rid, owner=entry.owner or None, expires=entry.expires,
                    delta=dict(entry.delta))
        if rid in expired:
            yield _finding("expired_reservation", namespace,
                           "reservation %s on %s expired at %s%s" % (rid, where, entry.expires, owner),
                           "run the reaper (kvquota_release expired=true) or kvquota_release id=%s" % rid,
                           _blocker=True, **data)
        elif _finished(entry, vmims, pods, now_seconds, grace_seconds):
            yield _finding("orphaned_reservation", namespace,
                           "reservation %s on %s%s outlived its migrations (all finished, source pods gone)"
                           % (rid, where, owner),
                           "release it: kvquota_release id=%s" % rid, _blocker=True, **data)
        else:
            yield _finding("active_reservation", namespace,
                           "reservation %s on %s is active%s%s: its headroom is counted as taken"
                           % (rid, where, " until %s" % entry.expires if entry.expires else " with no expiry",
                              owner), None, _blocker=False, **data)


def _finding(kind, namespace, message, fix=None, **data):
    result = {"kind": kind, "namespace": namespace, "message": message, "fix": fix}
    for key, value in data.items():
        if value is not None:
            result[key] = value
    return result


# ---------------------------------------------------------------------------
# Cluster configuration
# ---------------------------------------------------------------------------

def _replace_config(config, **changes):
    changes = dict((k, v) for k, v in changes.items() if v is not None)
    if not changes:
        return config
    try:
        import dataclasses
        return dataclasses.replace(config, **changes)
    except (ImportError, TypeError):
        if hasattr(config, "_replace"):
            return config._replace(**changes)
        raise


def kubevirt_migrations(kubevirt_cr):
    """spec.configuration.migrations of the KubeVirt CR ({} when unset or no CR)."""
    return (((kubevirt_cr or {}).get("spec") or {}).get("configuration") or {}).get("migrations") or {}


def migration_limits(kubevirt_cr, options):
    """(parallel per cluster, parallel outbound per node) from options, else the KubeVirt CR, else defaults."""
    migrations = kubevirt_migrations(kubevirt_cr)
    # an override given (even 0, which is then refused) wins over the CR
    per_cluster = options.get("parallel_migrations_per_cluster")
    if per_cluster is None:
        per_cluster = migrations.get("parallelMigrationsPerCluster") or DEFAULT_PARALLEL_PER_CLUSTER
    per_node = options.get("parallel_outbound_migrations_per_node")
    if per_node is None:
        per_node = migrations.get("parallelOutboundMigrationsPerNode") or DEFAULT_PARALLEL_OUTBOUND_PER_NODE
    return (_positive_int(per_cluster, "parallel_migrations_per_cluster"),
            _positive_int(per_node, "parallel_outbound_migrations_per_node"))


def cluster_config(snapshot, options):
    """The sizing ClusterConfig: KubeVirt CR + Harvester settings, with the caller's overrides."""
    sizing = _sizing()
    config = sizing.config_from_cluster(snapshot.get("kubevirt"), snapshot.get("harvester_settings"),
                                        kubevirt_version=options.get("kubevirt_version"))
    ratio = options.get("overhead_ratio")
    return _replace_config(config, overhead_ratio=None if ratio is None else str(ratio))


def cluster_facts(snapshot):
    """What backends.select_backend wants to know about the cluster."""
    settings = snapshot.get("harvester_settings")
    version = None
    if settings:
        server = settings.get("server-version") or {}
        version = server.get("value") or server.get("default")
    return {
        # the settings API alone is no Harvester (a CRD left behind): every Harvester has server-version
        "harvester": bool(settings) and "server-version" in settings,
        "harvester_version": version,
        "rancher_projects": snapshot.get("rancher_projects") is not None,
        "aaq": snapshot.get("aaq_quotas") is not None,
    }


def default_priority_class(snapshot):
    """The name of the globalDefault PriorityClass, if any."""
    for pc in snapshot.get("priority_classes") or ():
        if pc.get("globalDefault"):
            return _meta(pc).get("name")
    return None


# ---------------------------------------------------------------------------
# VMs
# ---------------------------------------------------------------------------

def _pods_by_owner(pods):
    """{VMI uid: [live virt-launcher pods]}, by the pods' controller ownerReference (labels such as
    kubevirt.io/created-by are display only: a tenant may set them on any pod)."""
    live = [pod for pod in pods if not q.pod_is_terminal(pod) and not _meta(pod).get("deletionTimestamp")]
    return ownership.launchers_by_vmi_uid(live)


def _source_pod(vmi, pods_by_owner):
    """The live virt-launcher pod of a VMI that KubeVirt counts as active (status.activePods, else on the
    VMI's node), None if not seen: a pod that merely names the VMI as its owner is not enough."""
    for pod in pods_by_owner.get(_meta(vmi).get("uid")) or ():
        if ownership.is_active_launcher_of(pod, vmi):
            return pod
    return None


def refused_shortfall(vm, quotas, named=()):
    """{quota name: ResourceList} of what each quota's status (used, status.hard) lacks for vm's target pod of the
    computed size (vm: a describe_vms entry; None gives {}); only the quotas in named when any is named."""
    result = {}
    if vm is None:
        return result
    for quota in quotas:
        qname = _meta(quota).get("name")
        if named and qname not in named:
            continue
        part = q.charged_part(quota, vm["charge"], vm["facts"])
        need = q.headroom_needed(q.quota_used(quota), q.quota_enforced_hard(quota) or q.quota_hard(quota), part)
        if need:
            result[qname] = need
    return result


def _sizing_key(vmi, ns_labels, tracks):
    """What a launcher pod's size depends on besides the cluster config (for the sizing cache)."""
    meta = _meta(vmi)
    return json.dumps([vmi.get("kind"), vmi.get("spec"), meta.get("annotations"), ns_labels, sorted(tracks)],
                      sort_keys=True, default=str)


def _live_migratable(vmi):
    """(True/False/None, reason) from the LiveMigratable condition."""
    condition = _condition(vmi, "LiveMigratable")
    if condition is None:
        return None, "no LiveMigratable condition"
    if str(condition.get("status")) == "False":
        text = condition.get("message") or condition.get("reason") or "LiveMigratable is False"
        return False, text
    return True, ""


def describe_vms(namespace, vmis, pods, ns_obj, ns_quotas, config, default_pc, cache=None):
    """The VM entries of one namespace: sizing, facts, source pod usage and migratability.

    Only Running VMIs would migrate; others are returned in a separate list. cache (a
    dict) remembers launcher pods of identical VMIs across calls.
    """
    sizing = _sizing()
    cache = {} if cache is None else cache
    tracks = q.namespace_tracked_names(ns_quotas)
    ns_labels = _labels(ns_obj) if ns_obj else {}
    by_owner = _pods_by_owner(pods)
    entries = []
    idle = []
    for vmi in sorted(vmis, key=lambda v: _meta(v).get("name", "")):
        name = _meta(vmi).get("name")
        status = vmi.get("status") or {}
        if status.get("phase") != "Running":
            idle.append({"namespace": namespace, "name": name, "phase": status.get("phase")})
            continue
        migratable, reason = _live_migratable(vmi)
        key = _sizing_key(vmi, ns_labels, tracks)
        if key not in cache:
            pod = sizing.launcher_pod(vmi, config, namespace_labels=ns_labels, quota_tracks=tracks)
            pod_charge = dict(pod.charge)
            charge = dict(pod.total_charge()) if hasattr(pod, "total_charge") else add(
                pod_charge, dict(pod.extra_charge or {}))
            cache[key] = (charge, pod_charge, list(getattr(pod, "notes", ()) or ()))
        charge, pod_charge, notes = cache[key]
        source_pod = _source_pod(vmi, by_owner)
        facts = q.launcher_pod_facts(vmi, default_pc)
        if source_pod is not None and (source_pod.get("spec") or {}).get("priorityClassName"):
            facts = dict(facts, priority_class_name=source_pod["spec"]["priorityClassName"])
        entries.append({
            "namespace": namespace,
            "name": name,
            "node": status.get("nodeName"),
            "migratable": migratable is not False,
            "migratable_reason": reason,
            "facts": facts,
            "charge": charge,
            "pod_charge": pod_charge,
            "source": q.pod_usage(source_pod) if source_pod is not None else None,
            "source_pod": _meta(source_pod).get("name") if source_pod is not None else None,
            "migration_state": status.get("migrationState"),
            "sizing_notes": notes,
        })
    return entries, idle


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------

BASIC_NAMES = frozenset(["requests.cpu", "limits.cpu", "requests.memory", "limits.memory"])


def _vm_report(vm, batch_of, names=None, deleted=False):
    """One VM of the report; names: the resource names to show (None: all); deleted: completed source
    pods are deleted (see plan_quota)."""
    def shown(rl):
        if names is not None:
            rl = dict((n, v) for n, v in rl.items() if n in names)
        return format_resource_list(rl)
    target = q.expand_aliases(vm["pod_charge"])
    out = {
        "name": vm["name"],
        "node": vm["node"],
        "migratable": vm["migratable"],
        "priority_class": vm["facts"].get("priority_class_name"),
        "batch": batch_of.get(q.vm_key(vm)),
        "charge": shown(vm["charge"]),
        "source_pod": vm["source_pod"],
        "source": None if vm["source"] is None else shown(vm["source"]),
    }
    if target != vm["charge"]:
        out["target_pod"] = shown(target)
    if vm["source"] is not None:
        growth = q.growth_of(target, vm["source"], deleted)
        out["growth"] = dict((n, ("-" if v < 0 else "") + q.show(abs(v), n)) for n, v in sorted(growth.items())
                             if n != q.POD_COUNT and (names is None or n in names))
    if not vm["migratable"]:
        out["not_migratable_reason"] = vm["migratable_reason"]
    if vm.get("sizing_notes"):
        out["sizing_notes"] = vm["sizing_notes"]
    return out


def _report_names(ns_quotas, detail):
    """The resource names VM entries show: 'full' = all; default = the basics plus what the quotas limit."""
    if detail == "full":
        return None
    names = set(BASIC_NAMES)
    for name in q.namespace_tracked_names(ns_quotas):
        names.add(name)
        alias = q._alias_of(name)
        if alias:
            names.add(alias)
    return frozenset(names)


def _quota_report(namespace, quota, plan, owner, formats):
    name = _meta(quota).get("name")

    def show(rl):
        return format_resource_list(rl, formats)
    enforced = q.quota_enforced_hard(quota)
    return {
        "name": name,
        "owner": owner,
        "scopes": [{"scope": s, "operator": op, "values": list(vals)} for s, op, vals in q.scope_selectors(quota)],
        "tracks": sorted(q.tracked_names(quota, "pod") | q.tracked_names(quota, "pvc")),
        "hard": show(plan["hard"]),
        "used": show(dict((n, v) for n, v in plan["used"].items() if n in plan["hard"])),
        "free": dict((n, ("-" if v < 0 else "") + q.show(abs(v), n, formats.get(n)))
                     for n, v in sorted(q.free_room(plan["used"], plan["hard"]).items())),
        "charge_total": show(plan["charge_total"]),
        "batches": [{"index": b["index"], "vms": [k.split("/", 1)[1] for k in b["vms"]],
                     "charge": show(b["charge"]), "needed": show(b["needed"])}
                    for b in plan["batches"] if b["vms"]],
        "needed": show(plan["needed"]),
        "needed_all_at_once": show(plan["needed_all_at_once"]),
        "over_hard": show(plan["over_hard"]),
        "used_after": show(plan["used_after"]),
        "over_after": show(plan["over_after"]),
        "status_synced": not enforced or equals(enforced, plan["hard"]),
    }


def _project_of(snapshot, ns_obj):
    """The Rancher Project dict of a namespace, when the Project API is visible and it is found."""
    ref = _backends.project_ref(ns_obj or {})
    if ref is None:
        return None
    for project in snapshot.get("rancher_projects") or ():
        meta = _meta(project)
        if meta.get("namespace") == ref[0] and meta.get("name") == ref[1]:
            return project
    return None


def _with_rancher_limit(ns_obj, limit):
    """A copy of a namespace whose field.cattle.io/resourceQuota limit holds limit (quota names -> strings)."""
    _present, _raw, parsed = _backends.rancher_annotation(ns_obj)
    parsed = dict(parsed)
    merged = dict(parsed.get("limit") or {})
    for name, text in limit.items():
        key = _backends.rancher_key(name)
        if key:
            merged[key] = text
    parsed["limit"] = merged
    result = dict(ns_obj)
    meta = dict(_meta(ns_obj))
    annotations = dict(meta.get("annotations") or {})
    annotations[_backends.RANCHER_QUOTA_ANNOTATION] = _json_dumps(parsed)
    meta["annotations"] = annotations
    result["metadata"] = meta
    return result


def _json_dumps(value):
    import json
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def rancher_project_findings(snapshot, plans_by_ns, batch_count):
    """Blockers for Rancher projects whose limit cannot take the namespaces' raised limits.

    For every batch, each Rancher-managed quota's durable limit is raised by the batch's
    headroom plus any permanent fix, all namespaces of the project at once, and the sum
    is checked against the project limit (backends.project_fit). Needs the Project API
    (visible on Rancher's local cluster only); otherwise nothing is reported here.
    """
    if snapshot.get("rancher_projects") is None:
        return []
    namespaces = list(snapshot.get("namespaces_all") or (snapshot.get("namespaces") or {}).values())
    by_name = dict((_meta(n).get("name"), n) for n in namespaces)
    projects = {}
    for namespace, plans in sorted(plans_by_ns.items()):
        ns_obj = by_name.get(namespace) or (snapshot.get("namespaces") or {}).get(namespace)
        project = _project_of(snapshot, ns_obj)
        if project is None:
            continue
        for quota, plan, fixes in plans:
            if quota_owner(quota) != "rancher":
                continue
            durable = _backends.RancherBackend().durable_hard(quota, ns_obj)
            permanent = dict((f["resource"], q.parse_quantity(f["suggested"])) for f in fixes if f["permanent"])
            entry = projects.setdefault("%s:%s" % (_meta(project).get("namespace"), _meta(project).get("name")),
                                        {"project": project, "namespaces": {}})
            entry["namespaces"][namespace] = (ns_obj, durable, permanent, plan)
    findings = []
    for project_id, entry in sorted(projects.items()):
        for index in range(max(batch_count, 1)):
            changed = {}
            for namespace, (ns_obj, durable, permanent, plan) in entry["namespaces"].items():
                need = plan["batches"][index]["needed"] if index < len(plan["batches"]) else {}
                limit = {}
                for name, text in durable.items():
                    value = permanent.get(name, q.parse_quantity(text, name)) + need.get(name, 0)
                    if value != q.parse_quantity(text, name):
                        limit[name] = q.show(value, name)
                if limit:
                    changed[namespace] = limit
            if not changed:
                continue
            modified = [(_with_rancher_limit(n, changed[_meta(n).get("name")]) if _meta(n).get("name") in changed
                         else n) for n in namespaces]
            first = sorted(changed)[0]
            ok, problems = _backends.project_fit(entry["project"], modified, first, changed[first])
            for problem in problems:
                findings.append(_finding(
                    "rancher_project_limit", None, "batch %d: %s" % (index + 1, problem),
                    "raise the project's limit in Rancher (Cluster > Projects/Namespaces > Edit Config), or "
                    "migrate fewer VMs of its namespaces at once (per_namespace_cap)", project=project_id))
            if not ok:
                break  # the first batch that does not fit says enough
    return findings


def evaluate(snapshot, options=None):
    """The kvquota_check report for an Inventory snapshot (plain dicts). Pure."""
    options = dict(options or {})
    now = _now(options)
    policy = options.get("non_migratable", "fail")
    if policy not in NON_MIGRATABLE_POLICIES:
        raise InputError("non_migratable must be one of %s, got %r" % (", ".join(NON_MIGRATABLE_POLICIES), policy),
                         "use fail, shutdown or skip")
    config = cluster_config(snapshot, options)
    per_cluster, per_node = migration_limits(snapshot.get("kubevirt"), options)
    per_ns_cap = options.get("per_namespace_cap")
    default_pc = default_priority_class(snapshot)
    namespaces = snapshot.get("namespaces") or {}

    # 1. Size every VM, namespace by namespace.
    vms_by_ns = {}
    idle_by_ns = {}
    sizing_cache = {}
    for namespace in sorted(namespaces):
        ns_quotas = (snapshot.get("quotas") or {}).get(namespace) or []
        vmis = (snapshot.get("vmis") or {}).get(namespace) or []
        pods = (snapshot.get("pods") or {}).get(namespace) or []
        vms_by_ns[namespace], idle_by_ns[namespace] = describe_vms(
            namespace, vmis, pods, namespaces.get(namespace), ns_quotas, config, default_pc, sizing_cache)

    # 2. One cluster-wide schedule, in the order nodes drain (node, then namespace, name), within the free
    # capacity of the nodes when the snapshot has it (read_inventory with node_capacity).
    movers = [vm for ns in sorted(vms_by_ns) for vm in vms_by_ns[ns] if vm["migratable"]]
    movers.sort(key=lambda vm: (vm["node"] or "", vm["namespace"], vm["name"]))
    capacity = None
    if snapshot.get("node_requests") is not None and options.get("node_capacity", True):
        capacity = NodeCapacity(snapshot.get("nodes") or {}, snapshot["node_requests"])
        for vm in movers:
            vm["target"] = capacity_part(vm["charge"])
            vm["source_requests"] = capacity_part(vm["source"] or {})
    batches = plan_batches(movers, per_cluster, per_node, per_ns_cap, capacity)
    _count_cap, budget = _cap(per_ns_cap)
    oversized = []
    if budget is not None:
        for vm in movers:
            fits, names = less_or_equal(dict((n, v) for n, v in vm["charge"].items() if n in budget), budget)
            if not fits:
                oversized.append((vm, names))
    keys = batch_keys(batches)
    batch_of = {}
    for index, batch in enumerate(keys):
        for key in batch:
            batch_of[key] = index

    # 3. Per namespace: quotas, plans, findings.
    cluster_blockers = []
    cluster_warnings = []
    harvester = snapshot.get("harvester_settings")
    if harvester is not None:
        setting = harvester.get(HARVESTER_RATIO_SETTING) or {}
        cluster_warnings.append(_finding(
            "harvester_present", None,
            "Harvester detected (overhead ratio setting %s = %r): its quota controller scales limits.cpu and "
            "limits.memory of Rancher-managed quotas during migrations"
            % (HARVESTER_RATIO_SETTING, setting.get("value") or setting.get("default")),
            "kvquota_reserve opts each quota it expands out of Harvester's scaling for the maintenance window "
            "(annotation %s) and puts it back afterwards" % HARVESTER_SKIP_ANNOTATION))
    aaq = snapshot.get("aaq_quotas")
    if aaq is not None:
        cluster_warnings.append(_finding(
            "aaq_present", None,
            "application-aware-quota (AAQ) is installed: ApplicationAwareResourceQuotas charge a migration only "
            "its growth and need no expansion; native ResourceQuotas still charge the whole target pod",
            None))

    for vm, names in oversized:
        cluster_warnings.append(_finding(
            "larger_than_cap", vm["namespace"],
            "VM %s/%s alone charges more %s than per_namespace_cap allows: it migrates without other VMs of "
            "its namespace" % (vm["namespace"], vm["name"], ", ".join(names)), None, vm=vm["name"]))
    facts = cluster_facts(snapshot)
    ledgers = snapshot.get("ledgers") or {}
    ns_reports = {}
    plans_by_ns = {}
    all_fixes = []
    for namespace in sorted(namespaces):
        ns_obj = namespaces.get(namespace) or {}
        raw_quotas = sorted((snapshot.get("quotas") or {}).get(namespace) or [], key=lambda o: _meta(o).get("name"))
        # planning a batch: headroom reserved by any run is taken, not free room; measuring what admission
        # refused (reservations_taken false): the quota as admission sees it
        ns_quotas = [without_reservations(quota, quota_ledger(quota, ns_obj, ledgers, facts)[0])
                     for quota in raw_quotas] if options.get("reservations_taken", True) else raw_quotas
        vms = vms_by_ns[namespace]
        names = _report_names(ns_quotas, options.get("vm_details"))
        movers_here = [vm for vm in vms if vm["migratable"]]
        blockers = []
        warnings = []

        matching, not_matching = q.plan_namespace(namespace, ns_quotas, movers_here, keys, batch_of,
                                                  bool(options.get("source_pods_deleted")))
        quota_reports = []
        fixes = []
        plans_by_ns[namespace] = []
        for quota, plan in matching:
            owner = quota_owner(quota)
            backend = _backends.select_backend(quota, ns_obj, dict(facts, project=_project_of(snapshot, ns_obj)))
            formats = q.quota_formats(quota)
            quota_fixes = q.fixes_for_plan(namespace, quota, plan, owner)
            plans_by_ns[namespace].append((quota, plan, quota_fixes))
            report = _quota_report(namespace, quota, plan, owner, formats)
            report["backend"] = backend.describe()
            report["fixes"] = [f["text"] for f in quota_fixes]
            quota_reports.append(report)
            fixes.extend(quota_fixes)
            qname = _meta(quota).get("name")
            for fix in quota_fixes:
                if fix["permanent"]:
                    message = "quota %s/%s %s: %s" % (namespace, qname, fix["resource"], fix["reason"])
                    blockers.append(_finding("usage_above_hard", namespace, message, fix["text"],
                                             quota=qname, resource=fix["resource"]))
            if plan["over_hard_untouched"]:
                warnings.append(_finding(
                    "usage_above_hard_untouched", namespace,
                    "quota %s/%s: usage above hard for %s (migrations do not charge it)"
                    % (namespace, qname, ", ".join(sorted(plan["over_hard_untouched"]))), None, quota=qname))
            if not report["status_synced"]:
                warnings.append(_finding(
                    "quota_not_synced", namespace,
                    "quota %s/%s: status.hard differs from spec.hard (the quota controller has not caught up)"
                    % (namespace, qname), "wait a few seconds and run the check again", quota=qname))
            migrating = _backends.harvester_migrating(quota)
            if migrating:
                warnings.append(_finding(
                    "harvester_scaling_active", namespace,
                    "quota %s/%s carries %d Harvester migration delta(s): hard already includes them"
                    % (namespace, qname, len(migrating)),
                    "let running migrations finish before reserving", quota=qname))

        for vm in vms:
            if not vm["migratable"]:
                finding = _finding(
                    "not_live_migratable", namespace,
                    "VM %s/%s cannot live-migrate: %s" % (namespace, vm["name"], vm["migratable_reason"]),
                    {"fail": "make its volumes ReadWriteMany (or choose the shutdown or skip policy)",
                     "shutdown": None, "skip": None}[policy],
                    vm=vm["name"], node=vm["node"])
                if policy == "fail":
                    blockers.append(finding)
                else:
                    finding["message"] += " (policy %s)" % policy
                    warnings.append(finding)
            elif vm["source"] is None:
                warnings.append(_finding(
                    "source_pod_not_found", namespace,
                    "VM %s/%s: its virt-launcher pod was not found; growth after migration not computed"
                    % (namespace, vm["name"]), None, vm=vm["name"]))

        for vmim in (snapshot.get("vmims") or {}).get(namespace) or []:
            phase = (vmim.get("status") or {}).get("phase")
            if phase in FINAL_MIGRATION_PHASES:
                continue
            rejection = admission.migration_rejection(vmim)
            if rejection is None:
                warnings.append(_finding(
                    "migration_in_progress", namespace,
                    "migration %s/%s of VM %s is %s" % (namespace, _meta(vmim).get("name"),
                                                        (vmim.get("spec") or {}).get("vmiName"), phase or "new"),
                    None, migration=_meta(vmim).get("name")))
                continue
            # which quota refused: KubeVirt's condition message, else a verified Event (inventory.migration_events);
            # how much: only what the quota's status lacks for the computed target pod (anyone who may post
            # Events could have written the Event's amounts)
            named = set(r["quota"] for r in rejection["refusals"])
            event_text = ((snapshot.get("migration_events") or {}).get(namespace) or {}).get(_meta(vmim).get("name"))
            if not named and event_text:
                try:
                    named = set(r["quota"] for r in admission.parse_exceeded_quota(event_text))
                except InputError:
                    named = set()
            vm = next((v for v in vms if v["name"] == rejection["vmi"]), None)
            shortfall = refused_shortfall(vm, raw_quotas, named)
            short = []
            for qname, amount in sorted(shortfall.items()):
                for name, value in sorted(amount.items()):
                    short.append("%s %s short by %s" % (qname, name, q.show(value, name)))
            for qname in sorted(named - set(shortfall)):
                short.append("by quota %s, which has room for a target pod of the computed size: the pod is larger "
                             "than computed" % qname)
            blockers.append(_finding(
                "migration_rejected_by_quota", namespace,
                "migration %s/%s of VM %s is Pending, rejected by quota%s" % (
                    namespace, rejection["migration"], rejection["vmi"], (": " + "; ".join(short)) if short else ""),
                "reserve headroom for it (kvquota_reserve) or delete the migration "
                "(kubectl delete vmim -n %s %s)" % (namespace, rejection["migration"]),
                migration=rejection["migration"], vm=rejection["vmi"],
                shortfall=dict((name, format_resource_list(rl)) for name, rl in shortfall.items()) or None))

        ledger_blockers, ledger_warnings = ledger_findings(
            namespace, ns_obj, raw_quotas, now, (snapshot.get("vmims") or {}).get(namespace) or (),
            (snapshot.get("pods") or {}).get(namespace) or (), facts,
            options.get("orphan_grace_seconds", 3600), ledgers)
        blockers.extend(ledger_blockers)
        warnings.extend(ledger_warnings)

        if aaq is not None and aaq.get(namespace):
            warnings.append(_finding(
                "aaq_present", namespace,
                "namespace has %d ApplicationAwareResourceQuota(s): they need no expansion for migrations"
                % len(aaq[namespace]), None))

        needs = any(report["needed"] for report in quota_reports)
        verdict = "blocked" if blockers else ("needs_reservation" if needs else "ok")
        ns_reports[namespace] = {
            "verdict": verdict,
            "vms": [_vm_report(vm, batch_of, names, bool(options.get("source_pods_deleted"))) for vm in vms],
            "not_running": idle_by_ns[namespace],
            "quotas": quota_reports,
            "quotas_not_matching": [{"name": _meta(quo).get("name"), "reason": reason} for quo, reason in not_matching],
            "needed": dict((r["name"], r["needed"]) for r in quota_reports if r["needed"]),
            "blockers": blockers,
            "warnings": warnings,
            "fixes": fixes,
        }
        all_fixes.extend(fixes)

    cluster_blockers.extend(rancher_project_findings(snapshot, plans_by_ns, len(keys)))
    if capacity is not None:
        cluster_blockers.extend(capacity.shortfall_findings(movers))

    report = _assemble(snapshot, options, config, per_cluster, per_node, per_ns_cap, keys, batches,
                       ns_reports, cluster_blockers, cluster_warnings, all_fixes)
    report["capacity"] = _capacity_report(capacity)
    return report


def _capacity_report(capacity):
    if capacity is None:
        return {"checked": False, "nodes": {}, "no_room": [], "not_modelled": CAPACITY_NOT_MODELLED}
    return {"checked": True, "nodes": capacity.report(),
            "no_room": ["%s/%s" % (vm["namespace"], vm["name"]) for vm in capacity.unplaced],
            "not_modelled": CAPACITY_NOT_MODELLED}


def _config_view(config):
    keys = ("kubevirt_version", "overhead_ratio", "cpu_allocation_ratio", "arch", "disable_serial_console_log",
            "hypervisor")
    view = dict((k, getattr(config, k)) for k in keys if hasattr(config, k))
    # what the sizing applies (the caller's choice, else the KubeVirt CR's feature gates), never "unset"
    view["auto_resource_limits"] = config.auto_resource_limits_enabled
    return view


def _assemble(snapshot, options, config, per_cluster, per_node, per_ns_cap, keys, batches, ns_reports,
              cluster_blockers, cluster_warnings, fixes):
    blockers = list(cluster_blockers)
    warnings = list(cluster_warnings)
    for namespace in sorted(ns_reports):
        blockers.extend(ns_reports[namespace]["blockers"])
        warnings.extend(ns_reports[namespace]["warnings"])
    counts = dict((v, 0) for v in VERDICTS)
    for report in ns_reports.values():
        counts[report["verdict"]] += 1
    if blockers:
        verdict = "blocked"
    elif counts["needs_reservation"]:
        verdict = "needs_reservation"
    else:
        verdict = "ok"
    vm_count = sum(len(r["vms"]) for r in ns_reports.values())
    return {
        "verdict": verdict,
        "scope": snapshot.get("scope") or {"nodes": [], "namespaces": []},
        "kubevirt": dict(_config_view(config), parallel_migrations_per_cluster=per_cluster,
                         parallel_outbound_migrations_per_node=per_node, per_namespace_cap=per_ns_cap),
        "batches": [{"index": i, "vms": batch,
                     "nodes": sorted(set(vm["node"] or "" for vm in batches[i]))} for i, batch in enumerate(keys)],
        "namespaces": ns_reports,
        "blockers": blockers,
        "warnings": warnings,
        "fixes": fixes,
        "notes": list(snapshot.get("notes") or ()),
        "summary": {
            "namespaces": len(ns_reports),
            "vms": vm_count,
            "migrating_vms": sum(len(b) for b in keys),
            "batches": len(keys),
            "ok": counts["ok"],
            "needs_reservation": counts["needs_reservation"],
            "blocked": counts["blocked"],
            "blockers": len(blockers),
        },
        "requests": snapshot.get("requests"),
    }


def check(cluster, scope=None, options=None):
    """The whole read-only kvquota_check report for a scope. Never writes anything."""
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.inventory import read_inventory
    options = dict(options or {})
    options.setdefault("node_capacity", True)  # the batches respect the free capacity of the nodes
    snapshot = read_inventory(cluster, scope, options)
    report = evaluate(snapshot, options)
    report["requests"] = snapshot.get("requests")
    return report


def needed_by_namespace(report):
    """{namespace: {quota: {resource: quantity}}}: the headroom per quota the report asks for."""
    return dict((ns, r["needed"]) for ns, r in report["namespaces"].items() if r["needed"])
