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

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import backends
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import cluster_settings
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import findings
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import ledger_audit
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import report as render
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import scheduling
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import vm_entries
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.capacity import (
    NodeCapacity,
    capacity_part,
    capacity_report,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.inventory import read_inventory
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.kube_objects import meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ledger import parse_datetime


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
    if snapshot.get("node_requests") is not None and options.get("node_capacity", True):
        capacity = NodeCapacity(snapshot.get("nodes") or {}, snapshot["node_requests"])
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


def _plan_quotas(snapshot, namespace, ns_obj, ns_quotas, vms, options, keys, batch_of, facts):
    """(quota reports, quotas not matching, [(quota, plan, fixes)], blockers, warnings, fixes) of the quotas the
    namespace's migrating VMs are charged against."""
    matching, not_matching = q.plan_namespace(namespace, ns_quotas, [vm for vm in vms if vm["migratable"]], keys,
                                              batch_of, bool(options.get("source_pods_deleted")))
    quota_reports, plans, blockers, warnings, fixes = [], [], [], [], []
    for quota, plan in matching:
        owner = backends.quota_owner(quota)
        backend = backends.select_backend(quota, ns_obj, dict(facts, project=findings.project_of(snapshot, ns_obj)))
        quota_fixes = q.fixes_for_plan(namespace, quota, plan, owner)
        plans.append((quota, plan, quota_fixes))
        quota_report = render.quota_report(namespace, quota, plan, owner, q.quota_formats(quota), backend, quota_fixes)
        quota_reports.append(quota_report)
        fixes.extend(quota_fixes)
        quota_blockers, quota_warnings = findings.quota_findings(namespace, quota, plan, quota_fixes,
                                                                 quota_report["status_synced"])
        blockers.extend(quota_blockers)
        warnings.extend(quota_warnings)
    return quota_reports, not_matching, plans, blockers, warnings, fixes


def _evaluate_namespace(snapshot, options, namespace, vms, idle, schedule, policy, now, facts):
    """(namespace report, [(quota, plan, fixes)]) of one namespace. schedule: (batch keys, batch_of)."""
    keys, batch_of = schedule
    ns_obj = (snapshot.get("namespaces") or {}).get(namespace) or {}
    ledgers = snapshot.get("ledgers") or {}
    raw_quotas = sorted((snapshot.get("quotas") or {}).get(namespace) or [], key=lambda o: meta(o).get("name"))
    ns_quotas = _planned_quotas(raw_quotas, ns_obj, options, ledgers, facts)
    quota_reports, not_matching, plans, blockers, warnings, fixes = _plan_quotas(
        snapshot, namespace, ns_obj, ns_quotas, vms, options, keys, batch_of, facts)

    vmims = (snapshot.get("vmims") or {}).get(namespace) or ()
    events = (snapshot.get("migration_events") or {}).get(namespace) or {}
    for more_blockers, more_warnings in (
            findings.vm_findings(namespace, vms, policy),
            findings.migration_findings(namespace, vmims, events, vms, raw_quotas),
            ledger_audit.ledger_findings(namespace, ns_obj, raw_quotas, now, vmims,
                                         (snapshot.get("pods") or {}).get(namespace) or (), facts,
                                         options.get("orphan_grace_seconds", 3600), ledgers),
            ((), findings.aaq_namespace_warnings(namespace, snapshot.get("aaq_quotas")))):
        blockers.extend(more_blockers)
        warnings.extend(more_warnings)

    ns_report = render.namespace_report(
        vms, idle, quota_reports, not_matching, blockers, warnings, fixes,
        findings.namespace_verdict(blockers, quota_reports), batch_of,
        render.report_names(ns_quotas, options.get("vm_details")), bool(options.get("source_pods_deleted")))
    return ns_report, plans


def evaluate(snapshot, options=None):
    """The kvquota_check report for an Inventory snapshot (plain dicts). Pure."""
    options = dict(options or {})
    now = _now(options)
    policy = findings.non_migratable_policy(options)
    config = cluster_settings.cluster_config(snapshot, options)
    per_cluster, per_node = cluster_settings.migration_limits(snapshot.get("kubevirt"), options)
    limits = (per_cluster, per_node, options.get("per_namespace_cap"))
    facts = cluster_settings.cluster_facts(snapshot)

    # 1. Size every VM, namespace by namespace.
    vms_by_ns, idle_by_ns = vm_entries.describe_namespaces(
        snapshot, config, cluster_settings.default_priority_class(snapshot))

    # 2. One cluster-wide schedule.
    movers, capacity, batches = _schedule(snapshot, options, vms_by_ns, limits)
    keys = scheduling.batch_keys(batches)
    schedule = (keys, q.batch_index(keys))
    cluster_warnings = findings.cluster_warnings(snapshot, scheduling.oversized_vms(movers, limits[2]))

    # 3. Per namespace: quotas, plans, findings.
    ns_reports = {}
    plans_by_ns = {}
    all_fixes = []
    for namespace in sorted(snapshot.get("namespaces") or {}):
        ns_reports[namespace], plans_by_ns[namespace] = _evaluate_namespace(
            snapshot, options, namespace, vms_by_ns[namespace], idle_by_ns[namespace], schedule, policy, now, facts)
        all_fixes.extend(ns_reports[namespace]["fixes"])

    # 4. Cluster-wide blockers, verdict, report.
    cluster_blockers = findings.rancher_project_findings(snapshot, plans_by_ns, len(keys))
    if capacity is not None:
        cluster_blockers.extend(capacity.shortfall_findings(movers))
    blockers, warnings = findings.all_findings(cluster_blockers, cluster_warnings, ns_reports)
    counts = findings.verdict_counts(ns_reports)
    report = render.assemble(snapshot, config, limits, keys, batches, ns_reports, blockers, warnings, all_fixes,
                             findings.overall_verdict(blockers, counts), counts)
    report["capacity"] = capacity_report(capacity)
    return report


def check(cluster, scope=None, options=None):
    """The whole read-only kvquota_check report for a scope. Never writes anything."""
    options = dict(options or {})
    options.setdefault("node_capacity", True)  # the batches respect the free capacity of the nodes
    snapshot = read_inventory(cluster, scope, options)
    report = evaluate(snapshot, options)
    report["requests"] = snapshot.get("requests")
    return report


def needed_by_namespace(report):
    """{namespace: {quota: {resource: quantity}}}: the headroom per quota the report asks for."""
    return dict((ns, r["needed"]) for ns, r in report["namespaces"].items() if r["needed"])
