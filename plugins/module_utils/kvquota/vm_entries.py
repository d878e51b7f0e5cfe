# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VM entries the check plans with: for every Running VMI, its migration target pod's charge (sizing.py
with the cluster's configuration), its live source pod and that pod's usage, its priority class and whether it
can live-migrate. VMIs that are not Running are listed apart (they do not migrate).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import ownership
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import sizing
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.kube_objects import condition, labels, meta


def _pods_by_owner(pods):
    """{VMI uid: [live virt-launcher pods]}, by the pods' controller ownerReference (labels such as
    kubevirt.io/created-by are display only: a tenant may set them on any pod)."""
    live = [pod for pod in pods if not q.pod_is_terminal(pod) and not meta(pod).get("deletionTimestamp")]
    return ownership.launchers_by_vmi_uid(live)


def _source_pod(vmi, pods_by_owner):
    """The live virt-launcher pod of a VMI that KubeVirt counts as active (status.activePods, else on the
    VMI's node), None if not seen: a pod that merely names the VMI as its owner is not enough."""
    for pod in pods_by_owner.get(meta(vmi).get("uid")) or ():
        if ownership.is_active_launcher_of(pod, vmi):
            return pod
    return None


def _sizing_key(vmi, ns_labels, tracks):
    """What a launcher pod's size depends on besides the cluster config (for the sizing cache)."""
    return json.dumps([vmi.get("kind"), vmi.get("spec"), meta(vmi).get("annotations"), ns_labels, sorted(tracks)],
                      sort_keys=True, default=str)


def live_migratable(vmi):
    """(True/False/None, reason) from the LiveMigratable condition (KubeVirt's, in the VMI's status)."""
    live = condition(vmi, "LiveMigratable")
    if live is None:
        return None, "no LiveMigratable condition"
    if str(live.get("status")) == "False":
        text = live.get("message") or live.get("reason") or "LiveMigratable is False"
        return False, text
    return True, ""


def describe_vms(namespace, vmis, pods, ns_obj, ns_quotas, config, default_pc, cache=None):
    """The VM entries of one namespace: sizing, facts, source pod usage and migratability.

    Only Running VMIs would migrate; others are returned in a separate list. cache (a
    dict) remembers launcher pods of identical VMIs across calls.
    """
    cache = {} if cache is None else cache
    tracks = q.namespace_tracked_names(ns_quotas)
    ns_labels = labels(ns_obj) if ns_obj else {}
    by_owner = _pods_by_owner(pods)
    entries = []
    idle = []
    for vmi in sorted(vmis, key=lambda v: meta(v).get("name", "")):
        name = meta(vmi).get("name")
        status = vmi.get("status") or {}
        if status.get("phase") != "Running":
            idle.append({"namespace": namespace, "name": name, "phase": status.get("phase")})
            continue
        migratable, reason = live_migratable(vmi)
        key = _sizing_key(vmi, ns_labels, tracks)
        if key not in cache:
            pod = sizing.launcher_pod(vmi, config, namespace_labels=ns_labels, quota_tracks=tracks)
            cache[key] = (dict(pod.total_charge()), dict(pod.charge), list(pod.notes))
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
            "source_pod": meta(source_pod).get("name") if source_pod is not None else None,
            "migration_state": status.get("migrationState"),
            "sizing_notes": notes,
        })
    return entries, idle


def describe_namespaces(snapshot, config, default_pc):
    """({namespace: VM entries}, {namespace: VMIs not running}) of every namespace of the snapshot, with one
    sizing cache for identical VMIs across namespaces."""
    namespaces = snapshot.get("namespaces") or {}
    vms_by_ns = {}
    idle_by_ns = {}
    sizing_cache = {}
    for namespace in sorted(namespaces):
        ns_quotas = (snapshot.get("quotas") or {}).get(namespace) or []
        vmis = (snapshot.get("vmis") or {}).get(namespace) or []
        pods = (snapshot.get("pods") or {}).get(namespace) or []
        vms_by_ns[namespace], idle_by_ns[namespace] = describe_vms(
            namespace, vmis, pods, namespaces.get(namespace), ns_quotas, config, default_pc, sizing_cache)
    return vms_by_ns, idle_by_ns
