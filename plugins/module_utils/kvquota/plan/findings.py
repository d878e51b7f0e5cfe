# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The check's findings: blockers and warnings (each a dict with kind, namespace, message, fix and data), the
verdicts they give, and what the migrations admission refused lack.

Every finding is computed from an inventory snapshot and the plan; report.py only renders them.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import admission
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import rancher
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.harvester import HARVESTER_SKIP_ANNOTATION, harvester_migrating
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import rancher_keys
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import FINAL_MIGRATION_PHASES
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import format_resource_list
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import HARVESTER_RATIO_SETTING

NON_MIGRATABLE_POLICIES = ("fail", "shutdown", "skip")
VERDICTS = ("ok", "needs_reservation", "blocked")


def finding(kind, namespace, message, fix=None, **data):
    """A blocker or warning: kind, namespace (None: cluster-wide), message, fix, and the data that is not None."""
    result = {"kind": kind, "namespace": namespace, "message": message, "fix": fix}
    for key, value in data.items():
        if value is not None:
            result[key] = value
    return result


def non_migratable_policy(options):
    """options' non_migratable (default fail), checked against NON_MIGRATABLE_POLICIES."""
    policy = options.get("non_migratable", "fail")
    if policy not in NON_MIGRATABLE_POLICIES:
        raise InputError("non_migratable must be one of %s, got %r" % (", ".join(NON_MIGRATABLE_POLICIES), policy),
                         "use fail, shutdown or skip")
    return policy


# ---------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------

def namespace_verdict(blockers, quota_reports):
    """blocked when anything blocks, needs_reservation when a quota needs headroom, else ok."""
    needs = any(report["needed"] for report in quota_reports)
    return "blocked" if blockers else ("needs_reservation" if needs else "ok")


def verdict_counts(ns_reports):
    """{verdict: number of namespaces} over VERDICTS."""
    counts = dict((v, 0) for v in VERDICTS)
    for report in ns_reports.values():
        counts[report["verdict"]] += 1
    return counts


def all_findings(cluster_blockers, cluster_warnings, ns_reports):
    """(blockers, warnings) of the whole check: the cluster-wide ones, then each namespace's, by name."""
    blockers = list(cluster_blockers)
    warnings = list(cluster_warnings)
    for namespace in sorted(ns_reports):
        blockers.extend(ns_reports[namespace]["blockers"])
        warnings.extend(ns_reports[namespace]["warnings"])
    return blockers, warnings


def overall_verdict(blockers, counts):
    """The check's verdict from all its blockers and the namespaces' verdict_counts."""
    if blockers:
        return "blocked"
    if counts["needs_reservation"]:
        return "needs_reservation"
    return "ok"


# ---------------------------------------------------------------------------
# Cluster-wide
# ---------------------------------------------------------------------------

def cluster_warnings(snapshot, facts, oversized):
    """Harvester's and AAQ's presence (facts: cluster_settings.cluster_facts), and the VMs larger than
    per_namespace_cap (scheduling.oversized_vms)."""
    warnings = []
    if facts.get("harvester"):
        if snapshot.harvester_settings is None:
            ratio = "its settings not readable; the KubeVirt CR's ratio is used"
        else:
            setting = snapshot.harvester_settings.get(HARVESTER_RATIO_SETTING) or {}
            value = setting.get("value") or setting.get("default")
            ratio = "overhead ratio setting %s = %r" % (HARVESTER_RATIO_SETTING, value)
        warnings.append(finding(
            "harvester_present", None,
            "Harvester detected (%s): its quota controller scales limits.cpu and limits.memory of Rancher-managed "
            "quotas during migrations" % ratio,
            "kvquota_reserve opts each quota it expands out of Harvester's scaling for the maintenance window "
            "(annotation %s) and puts it back afterwards" % HARVESTER_SKIP_ANNOTATION))
    if facts.get("aaq"):
        warnings.append(finding(
            "aaq_present", None,
            "application-aware-quota (AAQ) is installed: kvquota reads its quotas and never writes them (see aaq in "
            "the result: per namespace, whether AAQ's mode charges a migration only its growth%s); native "
            "ResourceQuotas still charge the whole target pod"
            % ("" if snapshot.aaq_quotas is not None else "; its quotas could not be read, see the notes"),
            None))

    for vm, names in oversized:
        warnings.append(finding(
            "larger_than_cap", vm["namespace"],
            "VM %s/%s alone charges more %s than per_namespace_cap allows: it migrates without other VMs of "
            "its namespace" % (vm["namespace"], vm["name"], ", ".join(names)), None, vm=vm["name"]))
    return warnings


# ---------------------------------------------------------------------------
# Per namespace
# ---------------------------------------------------------------------------

def quota_findings(namespace, quota, plan, quota_fixes, status_synced):
    """(blockers, warnings) of one quota a target pod is charged against: usage above hard that a fix must
    raise, usage above hard that migrations do not charge, a status the quota controller has not synced yet,
    Harvester's migration deltas already in hard."""
    blockers = []
    warnings = []
    qname = meta(quota).get("name")
    for fix in quota_fixes:
        if fix["permanent"]:
            message = "quota %s/%s %s: %s" % (namespace, qname, fix["resource"], fix["reason"])
            blockers.append(finding("usage_above_hard", namespace, message, fix["text"],
                                    quota=qname, resource=fix["resource"]))
    if plan.over_hard_untouched:
        warnings.append(finding(
            "usage_above_hard_untouched", namespace,
            "quota %s/%s: usage above hard for %s (migrations do not charge it)"
            % (namespace, qname, ", ".join(sorted(plan.over_hard_untouched))), None, quota=qname))
    if not status_synced:
        warnings.append(finding(
            "quota_not_synced", namespace,
            "quota %s/%s: status.hard differs from spec.hard (the quota controller has not caught up)"
            % (namespace, qname), "wait a few seconds and run the check again", quota=qname))
    migrating = harvester_migrating(quota)
    if migrating:
        warnings.append(finding(
            "harvester_scaling_active", namespace,
            "quota %s/%s carries %d Harvester migration delta(s): hard already includes them"
            % (namespace, qname, len(migrating)),
            "let running migrations finish before reserving", quota=qname))
    return blockers, warnings


def read_only_quota_findings(namespace, quota, plan, quota_fixes, backend):
    """(blockers, warnings) of a quota a target pod is charged against whose owner kvquota never writes through
    (backend not writable: the native quota AAQ keeps for an ApplicationAwareResourceQuota). The API server admits
    the target pod against it all the same: when a batch lacks room in it, the migration is refused and no
    reservation can help (a blocker, fixed where the owner keeps the value: quota_fixes, restated by the owner);
    else a note. Usage above hard is usage_above_hard's (quota_findings)."""
    if backend.writable:
        return [], []
    qname = meta(quota).get("name")
    formats = q.quota_formats(quota)
    reason = backend.read_only_reason(quota)
    needed = dict((n, v) for n, v in plan.needed.items() if v > 0)
    if needed:
        batches = [str(b.index + 1) for b in plan.batches if any(v > 0 for v in b.needed.values())]
        message = ("quota %s/%s lacks %s for the migrations (batch %s), and kvquota cannot add it: %s; the target "
                   "pods would be refused (migrationRejectedByResourceQuota)"
                   % (namespace, qname, ", ".join("%s=%s" % (n, q.show(v, n, formats.get(n)))
                                                  for n, v in sorted(needed.items())),
                      ", ".join(batches[:3]) + ("..." if len(batches) > 3 else ""), reason))
        # where a permanent raise (usage above hard after the migrations) covers the window, it is the fix
        fix = "; ".join(f["text"] for f in quota_fixes if f["resource"] in needed) or None
        return [finding("read_only_quota_lacks_room", namespace, message, fix, quota=qname,
                        resource=", ".join(sorted(needed)), owner=backend.name)], []
    if any(f["permanent"] for f in quota_fixes):
        return [], []
    charged = ", ".join("%s=%s" % (n, q.show(v, n, formats.get(n))) for n, v in sorted(plan.charge_total.items())
                        if v > 0)
    message = ("quota %s/%s: %s; it has room for every batch of the migrations (which charge it %s in all), so "
               "nothing needs raising" % (namespace, qname, reason, charged or "nothing"))
    return [], [finding("read_only_quota", namespace, message, None, quota=qname, owner=backend.name)]


# What makes a VM live-migratable, per reason of KubeVirt's LiveMigratable condition (False)
NOT_MIGRATABLE_FIXES = {
    "DisksNotLiveMigratable": "make its volumes ReadWriteMany",
    "HostDeviceNotLiveMigratable": "its host devices or GPUs (device plugin or DRA claims) are tied to its node and "
                                   "never live-migrate: stop it for the maintenance",
}


def not_migratable_fix(cause):
    """The fix of a VM that cannot live-migrate under the fail policy, by its LiveMigratable condition's reason."""
    what = NOT_MIGRATABLE_FIXES.get(cause) or (
        "see its VMI's LiveMigratable condition (reason %s)" % cause if cause else "make it live-migratable")
    return "%s (or choose the shutdown or skip policy)" % what


def vm_findings(namespace, vms, policy):
    """(blockers, warnings) of a namespace's VMs: those blocked alone (vm["blocked"]: their owner's input cannot be
    sized, or their target pod grew past the quota since they started; warnings with blocks "vm", the other VMs
    proceed), those that cannot live-migrate (blockers under the fail policy) and those whose source pod was not
    found."""
    blockers = []
    warnings = []
    for vm in vms:
        if vm.get("blocked"):
            # blocked alone (its owner's input, or its growth since it started): the other VMs are planned
            block = vm["blocked"]
            warnings.append(finding(block["kind"], namespace, block["message"], block["fix"], vm=vm["name"],
                                    node=vm["node"], field=block.get("field"), blocks="vm"))
        elif not vm["migratable"]:
            item = finding(
                "not_live_migratable", namespace,
                "VM %s/%s cannot live-migrate: %s" % (namespace, vm["name"], vm["migratable_reason"]),
                not_migratable_fix(vm.get("not_migratable_cause")) if policy == "fail" else None,
                vm=vm["name"], node=vm["node"])
            if policy == "fail":
                blockers.append(item)
            else:
                item["message"] += " (policy %s)" % policy
                warnings.append(item)
        elif vm["source"] is None:
            warnings.append(finding(
                "source_pod_not_found", namespace,
                "VM %s/%s: its virt-launcher pod was not found; growth after migration not computed"
                % (namespace, vm["name"]), None, vm=vm["name"]))
    return blockers, warnings


def migration_findings(namespace, vmims, migration_events, vms, raw_quotas):
    """(blockers, warnings) of a namespace's unfinished migrations: those in progress, and those admission
    refused with what each quota lacks for the target pod (migration_events: {migration name: Event text})."""
    blockers = []
    warnings = []
    for vmim in vmims or ():
        phase = (vmim.get("status") or {}).get("phase")
        if phase in FINAL_MIGRATION_PHASES:
            continue
        rejection = admission.migration_rejection(vmim)
        if rejection is None:
            warnings.append(finding(
                "migration_in_progress", namespace,
                "migration %s/%s of VM %s is %s" % (namespace, meta(vmim).get("name"),
                                                    (vmim.get("spec") or {}).get("vmiName"), phase or "new"),
                None, migration=meta(vmim).get("name")))
            continue
        # which quota refused: KubeVirt's condition message, else a verified Event (inventory.migration_events);
        # how much: only what the quota's status lacks for the computed target pod (anyone who may post
        # Events could have written the Event's amounts)
        named = set(r["quota"] for r in rejection["refusals"])
        event_text = (migration_events or {}).get(meta(vmim).get("name"))
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
        blockers.append(finding(
            "migration_rejected_by_quota", namespace,
            "migration %s/%s of VM %s is Pending, rejected by quota%s" % (
                namespace, rejection["migration"], rejection["vmi"], (": " + "; ".join(short)) if short else ""),
            "reserve headroom for it (kvquota_reserve) or delete the migration "
            "(kubectl delete vmim -n %s %s)" % (namespace, rejection["migration"]),
            migration=rejection["migration"], vm=rejection["vmi"],
            shortfall=dict((name, format_resource_list(rl)) for name, rl in shortfall.items()) or None))
    return blockers, warnings


def refused_shortfall(vm, quotas, named=()):
    """{quota name: ResourceList} of what each quota's status (used, status.hard) lacks for vm's target pod of the
    computed size (vm: a describe_vms entry; None gives {}); only the quotas in named when any is named."""
    result = {}
    if vm is None:
        return result
    for quota in quotas:
        qname = meta(quota).get("name")
        if named and qname not in named:
            continue
        part = q.charged_part(quota, vm["charge"], vm["facts"])
        need = q.headroom_needed(q.quota_used(quota), q.quota_enforced_hard(quota) or q.quota_hard(quota), part)
        if need:
            result[qname] = need
    return result


# ---------------------------------------------------------------------------
# Rancher projects
# ---------------------------------------------------------------------------

def project_of(snapshot, ns_obj):
    """The Rancher Project dict of a namespace, when the Project API is visible and it is found."""
    ref = rancher.project_ref(ns_obj or {})
    if ref is None:
        return None
    for project in snapshot.rancher_projects or ():
        project_meta = meta(project)
        if project_meta.get("namespace") == ref[0] and project_meta.get("name") == ref[1]:
            return project
    return None


def _with_rancher_limit(ns_obj, limit):
    """A copy of a namespace whose field.cattle.io/resourceQuota limit holds limit (quota names -> strings)."""
    _present, _raw, parsed = rancher.rancher_annotation(ns_obj)
    parsed = dict(parsed)
    parsed["limit"] = rancher_keys.with_names(parsed.get("limit") or {}, limit)
    result = dict(ns_obj)
    ns_meta = dict(meta(ns_obj))
    annotations = dict(ns_meta.get("annotations") or {})
    annotations[rancher.RANCHER_QUOTA_ANNOTATION] = _compact_json(parsed)
    ns_meta["annotations"] = annotations
    result["metadata"] = ns_meta
    return result


def _compact_json(value):
    """value as the compact, key-sorted JSON text an annotation holds."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _readable_rancher_annotation(ns_obj):
    try:
        rancher.rancher_annotation(ns_obj)
    except InputError:
        return False
    return True


def rancher_project_findings(snapshot, plans_by_ns, batch_count):
    """Blockers for Rancher projects whose limit cannot take the namespaces' raised limits.

    For every batch, each Rancher-managed quota's durable limit is raised by the batch's
    headroom plus any permanent fix, all namespaces of the project at once, and the sum
    is checked against the project limit (rancher.project_fit). Needs the Project API
    (visible on Rancher's local cluster only); otherwise nothing is reported here.
    """
    if snapshot.rancher_projects is None:
        return []
    namespaces = list(snapshot.namespaces_all or (snapshot.namespaces or {}).values())
    # a namespace whose annotation is not valid JSON (its VMs are blocked alone, see check.plan) is left out of
    # the projects' sums rather than failing the check for every namespace; Rancher checks the limit itself
    namespaces = [n for n in namespaces if _readable_rancher_annotation(n)]
    by_name = dict((meta(n).get("name"), n) for n in namespaces)
    projects = {}
    for namespace, plans in sorted(plans_by_ns.items()):
        ns_obj = by_name.get(namespace) or (snapshot.namespaces or {}).get(namespace)
        project = project_of(snapshot, ns_obj)
        if project is None:
            continue
        for quota, plan, fixes in plans:
            if not rancher.is_rancher_managed(quota):
                continue
            durable = rancher.RancherOwner().durable_hard(quota, ns_obj)
            permanent = dict((f["resource"], q.parse_quantity(f["suggested"])) for f in fixes if f["permanent"])
            entry = projects.setdefault("%s:%s" % (meta(project).get("namespace"), meta(project).get("name")),
                                        {"project": project, "namespaces": {}})
            entry["namespaces"][namespace] = (ns_obj, durable, permanent, plan)
    findings = []
    for project_id, entry in sorted(projects.items()):
        for index in range(max(batch_count, 1)):
            changed = {}
            for namespace, (ns_obj, durable, permanent, plan) in entry["namespaces"].items():
                # the plan holds only the batches with a VM this quota charges: batch `index` of the schedule
                need = next((batch.needed for batch in plan.batches if batch.index == index), {})
                limit = {}
                for name, text in durable.items():
                    value = permanent.get(name, q.parse_quantity(text, name)) + need.get(name, 0)
                    if value != q.parse_quantity(text, name):
                        limit[name] = q.show(value, name)
                if limit:
                    changed[namespace] = limit
            if not changed:
                continue
            modified = [(_with_rancher_limit(n, changed[meta(n).get("name")]) if meta(n).get("name") in changed
                         else n) for n in namespaces]
            first = sorted(changed)[0]
            ok, problems = rancher.project_fit(entry["project"], modified, first, changed[first])
            for problem in problems:
                findings.append(finding(
                    "rancher_project_limit", None, "batch %d: %s" % (index + 1, problem),
                    "raise the project's limit in Rancher (Cluster > Projects/Namespaces > Edit Config), or "
                    "migrate fewer VMs of its namespaces at once (per_namespace_cap)", project=project_id))
            if not ok:
                break  # the first batch that does not fit says enough
    return findings
