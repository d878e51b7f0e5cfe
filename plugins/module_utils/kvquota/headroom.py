# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a reservation should add: for a batch of VMs about to migrate, or for what admission refused.

Both read the cluster fresh, just before the reservation, so the amount reflects the usage and
KubeVirt configuration of that moment, not of the plan made at the start of the play.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import admission
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.check import evaluate
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import InputError, NotFoundError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.inventory import migration_events, read_inventory
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.resources import (
    format_resource_list,
    is_negative,
    less_or_equal,
    mask,
    parse_resource_list,
)

KUBEVIRT = ("kubevirt.io", "v1")


def _vm_keys(vms, what):
    keys = []
    for vm in vms or ():
        if not isinstance(vm, dict) or not vm.get("namespace") or not vm.get("name"):
            raise InputError("each entry of %s needs a namespace and a name, got %r" % (what, vm),
                             "give entries such as {namespace: tenant-a, name: vm1}")
        keys.append((str(vm["namespace"]), str(vm["name"])))
    if not keys:
        raise InputError("%s is empty" % what, "name at least one VM")
    return sorted(set(keys))


def batch_headroom(cluster, vms, options=None):
    """({(ns, quota): {name: quantity string}}, refs, report) for migrating exactly these VMs at once.

    refs records the VMs and their source pods with the reservation, so release can wait for exactly
    those pods. VMs that cannot live-migrate are an error: a reservation for them would never be used.
    """
    keys = _vm_keys(vms, "vms")
    snapshot = read_inventory(cluster, {"nodes": [], "namespaces": sorted(set(ns for ns, _n in keys))}, options)
    vmis = snapshot.get("vmis") or {}
    present = set((ns, (v.get("metadata") or {}).get("name")) for ns, items in vmis.items() for v in items)
    missing = [k for k in keys if k not in present]
    if missing:
        raise NotFoundError("VirtualMachineInstance %s not found" % ", ".join("%s/%s" % k for k in missing),
                            "check the names with `kubectl get vmi -A`; a VM that is not running does not migrate")
    wanted = set(keys)
    snapshot = dict(snapshot, vmis=dict(
        (ns, [v for v in items if (ns, (v.get("metadata") or {}).get("name")) in wanted]) for ns, items in vmis.items()))
    # One batch: every VM given migrates at once.
    opts = dict(options or {}, parallel_migrations_per_cluster=len(keys), parallel_outbound_migrations_per_node=len(keys),
                per_namespace_cap=None, non_migratable="skip")
    report = evaluate(snapshot, opts)
    headroom, source_pods, blocked = {}, [], []
    for namespace, ns_report in sorted(report["namespaces"].items()):
        for quota, needed in sorted((ns_report.get("needed") or {}).items()):
            headroom[(namespace, quota)] = dict(needed)
        for vm in ns_report["vms"]:
            if not vm["migratable"]:
                blocked.append("%s/%s (%s)" % (namespace, vm["name"], vm.get("not_migratable_reason")))
            elif vm.get("source_pod"):
                source_pods.append({"namespace": namespace, "name": vm["source_pod"]})
    if blocked:
        raise InputError("cannot reserve for VMs that cannot live-migrate: %s" % ", ".join(blocked),
                         "leave them out of the batch and apply the non-migratable policy to them")
    refs = {"vms": [{"namespace": ns, "name": name} for ns, name in keys], "sourcePods": source_pods}
    return headroom, refs, report


def refused_headroom(cluster, migrations):
    """({(ns, quota): shortfall}, key) from the migrationRejectedByResourceQuota conditions of these VMIMs.

    The shortfall is exactly what admission refused (requested + used - limited). key identifies the
    refusals (migration and condition time) so the same refusal is never topped up twice.
    """
    refusals, key = refusals_by_quota(cluster, migrations)
    shown = dict((target, format_resource_list(entry["shortfall"])) for target, entry in refusals.items())
    return shown, key


def refusals_by_quota(cluster, migrations):
    """({(ns, quota): {"shortfall": ResourceList, "limited": ResourceList}}, key): what admission refused these
    VMIMs, per quota (the largest shortfall per resource, and the largest hard it was refused against).

    virt-controller usually leaves the condition without a message and records the apiserver's refusal in a
    FailedCreate Event on the migration: then the newest such Event is read (one list per namespace) and the
    key also names that message, so a later, different refusal can be topped up again.
    """
    keys = _vm_keys(migrations, "migrations")
    found, seen, events = {}, [], {}
    for namespace, name in keys:
        vmim = cluster.call(cluster.custom.get_namespaced_custom_object, KUBEVIRT[0], KUBEVIRT[1], namespace,
                            "virtualmachineinstancemigrations", name,
                            what="get VirtualMachineInstanceMigration %s/%s" % (namespace, name))
        rejection = admission.migration_rejection(vmim)
        if rejection is None:
            continue
        refusals, key = rejection["refusals"], "%s/%s@%s" % (namespace, name, rejection.get("since") or "")
        if not refusals and not rejection["message"]:
            if namespace not in events:
                events[namespace] = migration_events(cluster, [namespace]).get(namespace) or {}
            message = events[namespace].get(name) or ""
            try:
                refusals = admission.parse_exceeded_quota(message)
            except InputError:
                refusals = []
            key += "#" + hashlib.sha256(message.encode("utf-8")).hexdigest()[:12]
        if not refusals:
            continue
        seen.append(key)
        for refusal in refusals:
            entry = found.setdefault((namespace, refusal["quota"]), {"shortfall": {}, "limited": {}})
            for part in ("shortfall", "limited"):
                for resource, value in (refusal.get(part) or {}).items():
                    entry[part][resource] = max(entry[part].get(resource, value), value)
    return found, ",".join(seen)


def parse_top_up_cap(cap):
    """The top_up_cap ResourceList; InputError for a malformed or negative quantity (checked before anything
    moves, not at the first top-up)."""
    limit = parse_resource_list(cap, "top_up_cap")
    negative = is_negative(limit)
    if negative:
        raise InputError("top_up_cap must not be negative, got %s"
                         % ", ".join("%s=%s" % (name, cap[name]) for name in negative),
                         "give the most one quota's top-ups may add, e.g. top_up_cap: {limits.memory: 1Gi} "
                         "(0 allows none)")
    return limit


def over_cap(needs, cap):
    """["ns/quota needs name=value (top_up_cap x)"] for every (ns, quota): ResourceList in needs that a
    top_up_cap resource list does not allow (a resource the cap does not name is over it)."""
    limit = parse_top_up_cap(cap)
    problems = []
    for (namespace, quota), amount in sorted(needs.items()):
        shown = format_resource_list(amount)
        _fits, names = less_or_equal(mask(amount, list(limit)), limit)
        over = sorted(set(names) | (set(amount) - set(limit)))
        if over:
            problems.append("%s/%s needs %s" % (namespace, quota, ", ".join(
                "%s=%s (top_up_cap %s)" % (n, shown[n], cap[n] if n in limit else "does not name it") for n in over)))
    return problems
