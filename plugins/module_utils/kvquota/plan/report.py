# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kvquota_check report: rendering only. Quantities become the apiserver's strings, VM entries and quota
plans become the report's dicts; every number and verdict comes from the plan (quotas.plan_namespace,
scheduling.py) and the findings (findings.py).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import equals, format_resource_list

BASIC_NAMES = frozenset(["requests.cpu", "limits.cpu", "requests.memory", "limits.memory"])

# What a namespace and each of its quotas keep in the compact report: what the roles, the preflight and an
# operator deciding on a fix read (the rest of a quota's plan is in the full report).
COMPACT_NAMESPACE_KEYS = ("verdict", "summary", "quotas_not_matching", "needed")
COMPACT_QUOTA_KEYS = ("name", "owner", "hard", "used", "free", "needed", "over_after", "status_synced", "fixes")


def vm_report(vm, batch_of, names=None, deleted=False):
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


def report_names(ns_quotas, detail):
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


def quota_report(namespace, quota, plan, owner, formats, backend, quota_fixes):
    """One quota of a namespace's report: its plan (quotas.plan_namespace) in the quota's own formats, the
    backend that owns its spec.hard (owners.registry.owner_of) and the texts of its fixes."""
    name = meta(quota).get("name")

    def show(rl):
        return format_resource_list(rl, formats)
    enforced = q.quota_enforced_hard(quota)
    return {
        "name": name,
        "owner": owner,
        "scopes": [{"scope": s, "operator": op, "values": list(vals)} for s, op, vals in q.scope_selectors(quota)],
        "tracks": sorted(q.tracked_names(quota, "pod") | q.tracked_names(quota, "pvc")),
        "hard": show(plan.hard),
        "used": show(dict((n, v) for n, v in plan.used.items() if n in plan.hard)),
        "free": dict((n, ("-" if v < 0 else "") + q.show(abs(v), n, formats.get(n)))
                     for n, v in sorted(q.free_room(plan.used, plan.hard).items())),
        "charge_total": show(plan.charge_total),
        "batches": [{"index": b.index, "vms": [k.split("/", 1)[1] for k in b.vms],
                     "charge": show(b.charge), "needed": show(b.needed)}
                    for b in plan.batches if b.vms],
        "needed": show(plan.needed),
        "needed_all_at_once": show(plan.needed_all_at_once),
        "over_hard": show(plan.over_hard),
        "used_after": show(plan.used_after),
        "over_after": show(plan.over_after),
        "status_synced": not enforced or equals(enforced, plan.hard),
        "backend": backend.describe(),
        "fixes": [f["text"] for f in quota_fixes],
    }


def config_view(config):
    """The sizing ClusterConfig as the report shows it."""
    keys = ("kubevirt_version", "overhead_ratio", "cpu_allocation_ratio", "arch", "disable_serial_console_log",
            "hypervisor")
    view = dict((k, getattr(config, k)) for k in keys if hasattr(config, k))
    # what the sizing applies (the caller's choice, else the KubeVirt CR's feature gates), never "unset"
    view["auto_resource_limits"] = config.auto_resource_limits_enabled
    return view


def namespace_report(vms, idle, quota_reports, not_matching, blockers, warnings, fixes, verdict, batch_of, names,
                     deleted):
    """One namespace of the report: its verdict, counts (summary), VMs (vm_report), VMIs not running, quota reports
    and the quotas that do not match a target pod, the headroom it needs, its findings and fixes."""
    return {
        "verdict": verdict,
        "summary": {
            "vms": len(vms),
            "migrating_vms": sum(1 for vm in vms if vm["migratable"]),
            "not_running": len(idle),
            "blockers": len(blockers),
        },
        "vms": [vm_report(vm, batch_of, names, deleted) for vm in vms],
        "not_running": idle,
        "quotas": quota_reports,
        "quotas_not_matching": [{"name": meta(quo).get("name"), "reason": reason} for quo, reason in not_matching],
        "needed": dict((r["name"], r["needed"]) for r in quota_reports if r["needed"]),
        "blockers": blockers,
        "warnings": warnings,
        "fixes": fixes,
    }


def assemble(snapshot, config, limits, keys, batches, ns_reports, blockers, warnings, fixes, verdict, counts):
    """The whole report. limits: (parallel per cluster, parallel outbound per node, per_namespace_cap); keys:
    scheduling.batch_keys(batches); blockers and warnings: all of them (findings.all_findings); verdict and
    counts: findings.overall_verdict and findings.verdict_counts."""
    per_cluster, per_node, per_ns_cap = limits
    vm_count = sum(len(r["vms"]) for r in ns_reports.values())
    return {
        "verdict": verdict,
        "scope": snapshot.scope or {"nodes": [], "namespaces": []},
        "kubevirt": dict(config_view(config), parallel_migrations_per_cluster=per_cluster,
                         parallel_outbound_migrations_per_node=per_node, per_namespace_cap=per_ns_cap),
        "batches": [{"index": i, "vms": batch,
                     "nodes": sorted(set(vm["node"] or "" for vm in batches[i]))} for i, batch in enumerate(keys)],
        "namespaces": ns_reports,
        "blockers": blockers,
        "warnings": warnings,
        "fixes": fixes,
        "notes": list(snapshot.notes or ()),
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
        "requests": snapshot.requests,
    }


def compact(report):
    """The report without its per-VM parts, for a result whose size follows the namespaces and quotas, not the VMs:
    each namespace keeps COMPACT_NAMESPACE_KEYS (verdict, summary counts, the quotas not matching, the headroom
    needed) and its quotas with COMPACT_QUOTA_KEYS; its VM entries, VMIs not running, and its blockers, warnings
    and fixes (each also in the report's own lists, with its namespace) are left out, and so are the quotas'
    per-batch plans. The batches stay: they are the plan the roles follow, one "namespace/name" per migrating VM.
    The report itself is not changed."""
    out = dict((key, value) for key, value in report.items() if key != "namespaces")
    out["namespaces"] = dict((name, _compact_namespace(ns)) for name, ns in report["namespaces"].items())
    return out


def _compact_namespace(ns_report):
    out = dict((key, ns_report[key]) for key in COMPACT_NAMESPACE_KEYS)
    out["quotas"] = [dict((key, quota[key]) for key in COMPACT_QUOTA_KEYS) for quota in ns_report["quotas"]]
    return out
