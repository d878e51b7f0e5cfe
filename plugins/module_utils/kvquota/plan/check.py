# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_check: the read-only report, and the batch plan the roles follow.

check(cluster, scope, options) reads an Inventory snapshot (inventory.py, a few list
calls) and hands it to evaluate(snapshot, options), which is pure: it sizes every VM's
migration target pod with the cluster's current KubeVirt configuration (vm_entries.py),
schedules the migrations in batches the way KubeVirt runs them, within the free capacity
of the nodes (scheduling.py, capacity.py), and for every namespace and every quota a target
pod is charged against computes used/hard, the headroom per batch and in total
(quotas.plan_namespace), and what blocks the maintenance (findings.py, ledger_audit.py);
report.py renders it. Nothing is ever written.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import datetime
import functools
from dataclasses import dataclass

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import rancher, registry
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import aaq as aaq_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import cluster_settings
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import findings
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import ledger_audit
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import report as render
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import scheduling
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import waves
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import vm_entries
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.capacity import (
    NodeCapacity,
    capacity_part,
    capacity_report,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.inventory import Snapshot, read_inventory
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.timeutil import parse_datetime


def _now(options):
    value = options.get("now")
    if value is None:
        return datetime.datetime.now(datetime.timezone.utc)
    return parse_datetime(value)


def _schedule(snapshot, options, vms_by_ns, limits):
    """(movers, NodeCapacity or None, batches): one cluster-wide schedule of the migratable VMs, in the order
    nodes drain (node, then namespace, name), within the free capacity of the nodes when the snapshot has it
    (read_inventory with node_capacity)."""
    movers = [vm for ns in sorted(vms_by_ns) for vm in vms_by_ns[ns] if vm["migratable"]]
    movers.sort(key=lambda vm: (vm["node"] or "", vm["namespace"], vm["name"]))
    capacity = None
    if snapshot.node_requests is not None and options.get("node_capacity", True):
        # drain_together: the scope's nodes are a wave, all cordoned by the one run that drains them
        draining = (snapshot.scope or {}).get("nodes") or () if options.get("drain_together") else ()
        capacity = NodeCapacity(snapshot.nodes or {}, snapshot.node_requests, draining)
        for vm in movers:
            vm["target"] = capacity_part(vm["charge"])
            vm["source_requests"] = capacity_part(vm["source"] or {})
    per_cluster, per_node, per_ns_cap = limits
    batches = scheduling.plan_batches(movers, per_cluster, per_node, per_ns_cap, capacity)
    return movers, capacity, batches


def _planned_quotas(raw_quotas, ns_obj, options, ledgers, facts):
    """The namespace's quotas as the plan sees them. Planning a batch: headroom reserved by any run is taken,
    not free room; measuring what admission refused (reservations_taken false): the quota as admission sees it."""
    if not options.get("reservations_taken", True):
        return raw_quotas
    return [ledger_audit.without_reservations(quota, ledger_audit.quota_ledger(quota, ns_obj, ledgers, facts)[0])
            for quota in raw_quotas]


@dataclass(frozen=True)
class QuotaPlan:
    """One quota a migrating VM of the namespace is charged against: quotas.plan_quota's exact plan, who owns
    its spec.hard (owner, backend) and the fixes it asks for (computed when first read: a batch's headroom, which
    plans its namespaces again, never reads them)."""

    namespace: str
    quota: dict                 # the ResourceQuota as planned against (its reservations taken out)
    plan: q.HeadroomPlan
    owner: str                  # registry.spec_owner: plain, rancher, aaq
    backend: object             # registry.owner_of: the QuotaOwner that writes it

    @property
    def name(self):
        return meta(self.quota).get("name")

    @functools.cached_property
    def fixes(self):
        return [self.backend.restate_fix(self.quota, fix)
                for fix in q.fixes_for_plan(self.namespace, self.quota, self.plan, self.owner,
                                            self.backend.operator_key)]


@dataclass(frozen=True)
class NamespacePlan:
    """One namespace of a scope's plan: its VM entries, VMIs not running, quotas (raw and as planned), the
    quotas its migrating VMs are charged against (QuotaPlan) and those they are not (with the reason)."""

    name: str
    ns_obj: dict
    vms: list
    idle: list
    raw_quotas: list
    quotas: list
    quota_plans: list
    not_matching: list


@dataclass(frozen=True)
class ScopePlan:
    """plan(snapshot, options): every number the report and the executor use, exact (Fractions), nothing
    rendered."""

    config: object              # sizing.ClusterConfig
    limits: dict                # per cluster, per node, per namespace cap
    facts: dict                 # what the owners of quotas want to know of the cluster
    movers: list                # the migrating VM entries in schedule order
    capacity: object            # scheduling's NodeCapacity, or None
    batches: list               # scheduling's batches
    keys: list                  # the batches as lists of 'namespace/name'
    batch_of: dict              # {key: batch index}
    namespaces: dict            # {name: NamespacePlan}


def plan_of_namespace(snapshot, options, namespace, vms, idle, schedule, facts):
    """The NamespacePlan of one namespace; schedule: (batches as lists of keys, batch_of or None). snapshot needs
    its namespaces, quotas and ledgers (and the Rancher projects, for the backend)."""
    keys, batch_of = schedule
    ns_obj = (snapshot.namespaces or {}).get(namespace) or {}
    raw_quotas = sorted((snapshot.quotas or {}).get(namespace) or [], key=lambda o: meta(o).get("name"))
    ns_quotas = _planned_quotas(raw_quotas, ns_obj, options, snapshot.ledgers or {}, facts)
    matching, not_matching = q.plan_namespace(namespace, ns_quotas, [vm for vm in vms if vm["migratable"]], keys,
                                              batch_of, bool(options.get("source_pods_deleted")))
    quota_plans = []
    backend_facts = None
    for quota, quota_plan in matching:
        if backend_facts is None:
            backend_facts = dict(facts, project=findings.project_of(snapshot, ns_obj))
        quota_plans.append(QuotaPlan(namespace, quota, quota_plan, registry.spec_owner(quota),
                                     registry.owner_of(quota, ns_obj, backend_facts)))
    return NamespacePlan(namespace, ns_obj, vms, idle, raw_quotas, ns_quotas, quota_plans, not_matching)


def plan(snapshot, options=None):
    """The ScopePlan of a Snapshot (or a mapping of its fields). Pure: sizes every VM, schedules the migrations and
    plans every quota a target pod is charged against; nothing is rendered."""
    snapshot = Snapshot.of(snapshot)
    options = dict(options or {})
    config = cluster_settings.cluster_config(snapshot, options)
    per_cluster, per_node = cluster_settings.migration_limits(snapshot.kubevirt, options)
    limits = (per_cluster, per_node, options.get("per_namespace_cap"))
    facts = cluster_settings.cluster_facts(snapshot)

    # 1. Size every VM, namespace by namespace (a VM whose own input cannot be sized is blocked alone).
    vms_by_ns, idle_by_ns = vm_entries.describe_namespaces(
        snapshot, config, cluster_settings.default_priority_class(snapshot))
    block_unreadable_rancher_namespaces(snapshot, vms_by_ns)

    for _round in range(3):
        # 2. One cluster-wide schedule.
        movers, capacity, batches = _schedule(snapshot, options, vms_by_ns, limits)
        keys = scheduling.batch_keys(batches)
        batch_of = q.batch_index(keys)

        # 3. Per namespace: the quotas a target pod is charged against, each with its exact plan.
        namespaces = {}
        for namespace in sorted(snapshot.namespaces or {}):
            namespaces[namespace] = plan_of_namespace(snapshot, options, namespace, vms_by_ns[namespace],
                                                      idle_by_ns[namespace], (keys, batch_of), facts)
        # 4. A VM whose target pod would charge more than its running pod, so that a quota ends above its hard
        # after the migrations, is blocked alone (named with what grew); the others are planned again without it.
        if not block_grown_vms(namespaces):
            break
    return ScopePlan(config=config, limits=limits, facts=facts, movers=movers, capacity=capacity, batches=batches,
                     keys=keys, batch_of=batch_of, namespaces=namespaces)


def unreadable_rancher_annotation(ns_obj):
    """The InputError of a namespace's field.cattle.io/resourceQuota that is not valid JSON, else None."""
    try:
        rancher.rancher_annotation(ns_obj or {})
    except InputError as err:
        return err
    return None


def block_unreadable_rancher_namespaces(snapshot, vms_by_ns):
    """Block the VMs of a namespace whose Rancher quota annotation (field.cattle.io/resourceQuota, which Rancher
    rebuilds its quotas from and a reservation writes) is not valid JSON, where a quota of the namespace is
    Rancher's: that namespace's VMs alone, named with the field; the other namespaces are planned."""
    for namespace, vms in sorted(vms_by_ns.items()):
        quotas = (snapshot.quotas or {}).get(namespace) or []
        if not any(rancher.is_rancher_managed(quota) for quota in quotas):
            continue
        error = unreadable_rancher_annotation((snapshot.namespaces or {}).get(namespace))
        if error is None:
            continue
        field = "namespace annotation %s" % rancher.RANCHER_QUOTA_ANNOTATION
        for vm in vms:
            if vm.get("blocked") or not vm["migratable"]:
                continue
            vm["blocked"] = {"kind": "vm_input_invalid", "field": field, "scope": "namespace",
                             "message": "VM %s/%s cannot be reserved for, its namespace's %s: %s"
                                        % (namespace, vm["name"], field, error.message),
                             "fix": "%s; the VMs of namespace %s stay where they are until then, the other VMs are "
                                    "not held up" % (error.fix, namespace)}
            vm["migratable"], vm["migratable_reason"] = False, vm["blocked"]["message"]


def grown_block(namespace, vm, quota_name, names, plan):
    """The per-VM block of a VM whose target pod would charge more than its running pod (vm["grown"]) where quota
    quota_name of its namespace would end above its hard after the migrations (names). No fix raises the quota: the
    growth is a change made since the VM started, and raising a quota for it hands it to whoever made it."""
    shown = []
    for name in names:
        target = q.expand_aliases(vm["pod_charge"]).get(name, 0)
        shown.append("%s %s instead of %s (+%s)" % (name, q.show(target, name), q.show(target - vm["grown"][name], name),
                                                    q.show(vm["grown"][name], name)))
    causes = vm.get("grown_causes") or []
    cause = "because of %s" % " and ".join(causes)
    after = ", ".join("%s %s above hard %s" % (n, q.show(plan.used_after.get(n, 0), n), q.show(plan.hard[n], n))
                      for n in names)
    return {"kind": "vm_grows", "field": ", ".join(causes) or None, "scope": "vm",
            "message": "VM %s/%s: its target pod would charge %s than its running pod, %s; with it quota %s/%s would "
                       "end at %s after the migrations" % (namespace, vm["name"], "; ".join(shown), cause, namespace,
                                                           quota_name, after),
            "fix": "revert that change (or restart the VM, so that its pod is sized anew within its quota); the VM "
                   "stays where it is until then, the other VMs migrate"}


def block_grown_vms(namespaces):
    """Block (vm["blocked"], not migratable) the VMs whose growth (target pod over running pod) that their owner
    caused (vm["grown_causes"]: an annotation, the namespace's labels, a pending hotplug) makes a quota of their
    namespace end above its hard after the migrations, where the quota is not above it already; returns whether
    any was blocked (the plan is then made again without them)."""
    blocked = False
    for namespace, ns_plan in sorted(namespaces.items()):
        for quota_plan in ns_plan.quota_plans:
            plan = quota_plan.plan
            names = sorted(n for n in plan.over_after if n not in plan.over_hard and n != q.POD_COUNT)
            if not names:
                continue
            for vm in ns_plan.vms:
                if not vm["migratable"] or q.vm_key(vm) not in plan.charges:
                    continue
                grew = [n for n in names if (plan.growths.get(q.vm_key(vm)) or {}).get(n, 0) > 0
                        and n in (vm.get("grown") or {})]
                # growth kvquota cannot attribute to its owner (a KubeVirt configuration or version change, which
                # grows every VM alike) stays the quota's usage_above_hard blocker, which an administrator decides
                if grew and vm.get("grown_causes"):
                    vm["blocked"] = grown_block(namespace, vm, quota_plan.name, grew, plan)
                    vm["migratable"], vm["migratable_reason"] = False, vm["blocked"]["message"]
                    blocked = True
    return blocked


def blocked_vms(scope_plan):
    """[{namespace, vm, kind, field, scope, message, fix}] of the VMs the plan blocks alone (their own input, or
    their growth since they started)."""
    return [dict(vm["blocked"], namespace=namespace, vm=vm["name"])
            for namespace, ns_plan in sorted(scope_plan.namespaces.items()) for vm in ns_plan.vms if vm.get("blocked")]


def overhead_differences(scope_plan):
    """[OverheadDifference.as_dict()] of every running VM whose memory overhead as KubeVirt reports it (v1.9's
    VMI status) differs from the one kvquota computes, or cannot be read (vm_entries, model/overhead_report.py):
    reported only, nothing is sized or reserved with it (a tenant can write the VMI's status)."""
    return [difference.as_dict() for _namespace, ns_plan in sorted(scope_plan.namespaces.items())
            for vm in ns_plan.vms for difference in vm.get("overhead_differences") or ()]


def _report_namespace(snapshot, options, ns_plan, schedule_plan, policy, now, aaq_entry=None):
    """(namespace report, [(quota, plan, fixes)]) of one namespace: its findings, rendered. aaq_entry: the
    namespace's entry of aaq.aaq_report (None: no AAQ object covers it)."""
    namespace = ns_plan.name
    quota_reports, blockers, warnings, fixes = [], [], [], []
    for quota_plan in ns_plan.quota_plans:
        quota_report = render.quota_report(namespace, quota_plan.quota, quota_plan.plan, quota_plan.owner,
                                           q.quota_formats(quota_plan.quota), quota_plan.backend, quota_plan.fixes)
        quota_reports.append(quota_report)
        fixes.extend(quota_plan.fixes)
        quota_blockers, quota_warnings = findings.quota_findings(namespace, quota_plan.quota, quota_plan.plan,
                                                                 quota_plan.fixes, quota_report["status_synced"])
        # a quota kvquota never writes (AAQ's copy of an ARQ): the migration needs room in it all the same
        more_blockers, more_warnings = findings.read_only_quota_findings(
            namespace, quota_plan.quota, quota_plan.plan, quota_plan.fixes, quota_plan.backend)
        quota_blockers, quota_warnings = quota_blockers + more_blockers, quota_warnings + more_warnings
        blockers.extend(quota_blockers)
        warnings.extend(quota_warnings)

    vmims = (snapshot.vmims or {}).get(namespace) or ()
    events = (snapshot.migration_events or {}).get(namespace) or {}
    for more_blockers, more_warnings in (
            findings.vm_findings(namespace, ns_plan.vms, policy),
            findings.migration_findings(namespace, vmims, events, ns_plan.vms, ns_plan.raw_quotas),
            ledger_audit.ledger_findings(namespace, ns_plan.ns_obj, ns_plan.raw_quotas, now, vmims,
                                         (snapshot.pods or {}).get(namespace) or (), schedule_plan.facts,
                                         options.get("orphan_grace_seconds", 3600), snapshot.ledgers or {}),
            ((), aaq_mod.namespace_findings(namespace, aaq_entry))):
        blockers.extend(more_blockers)
        warnings.extend(more_warnings)

    ns_report = render.namespace_report(
        ns_plan.vms, ns_plan.idle, quota_reports, ns_plan.not_matching, blockers, warnings, fixes,
        findings.namespace_verdict(blockers, quota_reports), schedule_plan.batch_of,
        render.report_names(ns_plan.quotas, options.get("vm_details")), bool(options.get("source_pods_deleted")))
    return ns_report, [(p.quota, p.plan, p.fixes) for p in ns_plan.quota_plans]


def evaluate(snapshot, options=None, scope_plan=None):
    """The kvquota_check report for a Snapshot (or a mapping of its fields): plan(snapshot, options) (or the
    scope_plan given), its findings and verdicts, rendered. Pure."""
    snapshot = Snapshot.of(snapshot)
    options = dict(options or {})
    now = _now(options)
    policy = findings.non_migratable_policy(options)
    planned = scope_plan or plan(snapshot, options)
    cluster_warnings = findings.cluster_warnings(snapshot, planned.facts,
                                                 scheduling.oversized_vms(planned.movers, planned.limits[2]))

    aaq = aaq_mod.aaq_report(snapshot, planned.namespaces)
    aaq_entries = (aaq or {}).get("namespaces") or {}
    ns_reports = {}
    plans_by_ns = {}
    all_fixes = []
    for namespace, ns_plan in sorted(planned.namespaces.items()):
        ns_reports[namespace], plans_by_ns[namespace] = _report_namespace(snapshot, options, ns_plan, planned, policy,
                                                                          now, aaq_entries.get(namespace))
        all_fixes.extend(ns_reports[namespace]["fixes"])

    cluster_blockers = findings.rancher_project_findings(snapshot, plans_by_ns, len(planned.keys))
    if planned.capacity is not None:
        cluster_blockers.extend(planned.capacity.shortfall_findings(planned.movers))
    blockers, warnings = findings.all_findings(cluster_blockers, cluster_warnings, ns_reports)
    counts = findings.verdict_counts(ns_reports)
    report = render.assemble(snapshot, planned.config, planned.limits, planned.keys, planned.batches, ns_reports,
                             blockers, warnings, all_fixes, findings.overall_verdict(blockers, counts), counts)
    report["capacity"] = capacity_report(planned.capacity)
    # AAQ's quotas per namespace, read only: whether its mode charges a migration only its growth (plan/aaq.py)
    report["aaq"] = aaq
    # the VMs blocked alone: each is also a warning of its namespace; the other VMs are planned without them
    report["blocked_vms"] = blocked_vms(planned)
    report["summary"]["blocked_vms"] = len(report["blocked_vms"])
    report["overhead_differences"] = overhead_differences(planned)
    report["summary"]["overhead_differences"] = len(report["overhead_differences"])
    return report


def check(cluster, scope=None, options=None):
    """The whole read-only kvquota_check report for a scope. Never writes anything. With the option plan, the
    report also carries the versioned plan kvquota_migrate takes (plan.py) under "plan"."""
    options = dict(options or {})
    options.setdefault("node_capacity", True)  # the batches respect the free capacity of the nodes
    if options.get("max_unavailable") is not None:
        waves.max_unavailable_count(options["max_unavailable"], 1)  # a malformed one is refused before any read
    snapshot = read_inventory(cluster, scope, options)
    planned = plan(snapshot, options)
    report = evaluate(snapshot, options, planned)
    if options.get("plan"):
        report["plan"] = versioned.build(snapshot, options, planned.movers, planned.keys, planned.facts, _now(options))
    if options.get("max_unavailable") is not None:
        # a rolling upgrade's waves over the scope's nodes in the order given (normalize_scope sorts them; all
        # nodes by name for the cluster)
        given = (scope or {}).get("nodes") if isinstance(scope, dict) else None
        given = [given] if isinstance(given, str) else list(given or [])
        order = list(dict.fromkeys(str(n).strip() for n in given)) or sorted(snapshot.nodes or {})
        report["waves"] = waves.plan_waves(snapshot, planned.movers, planned.limits, list(order),
                                           options["max_unavailable"])
    # the named nodes as they were before anything moved (node_maintenance's state line after a failure)
    nodes = snapshot.nodes or {}
    report["scope_nodes"] = dict((name, {"unschedulable": bool(((nodes.get(name) or {}).get("spec") or {}).get("unschedulable"))})
                                 for name in (snapshot.scope or {}).get("nodes") or [])
    report["requests"] = snapshot.requests
    return report
