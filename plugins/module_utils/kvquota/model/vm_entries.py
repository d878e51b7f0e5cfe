# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The VM entries the check plans with: for every Running VMI, its migration target pod's charge (model/sizing
with the cluster's configuration), its live source pod and that pod's usage, its priority class and whether it
can live-migrate. VMIs that are not Running are listed apart (they do not migrate).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import ownership
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import add
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import claims as claims_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import overhead_report
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.launcher import launcher_pod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    AUTO_MEMORY_LIMITS_RATIO_LABEL,
    HOOK_SIDECARS_ANNOTATION,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.vmi import VmInputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import condition, labels, meta


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


def claims_tracked(ns_quotas):
    """Whether a quota of the namespace charges DRA ResourceClaims (tracks a claim name and has no scope)."""
    return any(q.quota_matches_claim(quota) for quota in ns_quotas or ())


def claims_block(namespace, name, vmi, ns_quotas, templates, templates_problem=None, source_pod=None, claims=None):
    """(by entry, blocked) of a VM's DRA ResourceClaims for its migration target (model/claims.py): by entry, what
    the claim of each of its resourceClaimTemplateName entries charges ({entry: {quota name: Fraction}}; only when a
    quota of the namespace charges claims, else {}); blocked, None or the per-VM block: a shared claim (resourceClaimName: a node-local allocation keeps the
    target pod unschedulable), an entry or template that cannot be charged, or templates that could not be read
    (templates None; templates_problem says why), or a claim of the source pod (source_pod) that claims ({name:
    ResourceClaim} of the namespace; None: not read) show no longer owned by that pod."""
    try:
        entries = claims_mod.vmi_claim_entries(vmi)
    except claims_mod.ClaimInputError as err:
        return {}, input_block(namespace, name, err)
    shared = [claim for _entry, kind, claim in entries if kind == "claim"]
    if shared:
        return {}, {"kind": "shared_resource_claim", "field": "spec.resourceClaims", "scope": "vm",
                    "message": "VM %s/%s shares ResourceClaim %s with its launcher pod (resourceClaimName): a migration "
                               "target uses the same claim, whose allocation is tied to the source's node, while the "
                               "target must run on another node, so it stays unschedulable"
                               % (namespace, name, ", ".join("%s/%s" % (namespace, c) for c in shared)),
                    "fix": "give the VM its claim through resourceClaimTemplateName (each launcher pod then gets "
                           "its own claim), or choose the shutdown or skip policy for it; the VM stays where it is "
                           "until then, the other VMs are not held up"}
    if not any(kind == "template" for _entry, kind, _name in entries) or not claims_tracked(ns_quotas):
        return {}, None
    if templates is None:
        return {}, {"kind": "claim_templates_unreadable", "field": "spec.resourceClaims", "scope": "vm",
                    "message": "VM %s/%s: its migration target gets ResourceClaims from ResourceClaimTemplates, which "
                               "a quota of namespace %s charges, but the templates could not be read (%s)"
                               % (namespace, name, namespace, templates_problem or "not read"),
                    "fix": "grant list on resourceclaimtemplates.resource.k8s.io (ClusterRole kvquota-read of "
                           "ansible-playbook kvquota.maintenance.install) and run the check again; the VM stays "
                           "where it is until then, the other VMs are not held up"}
    try:
        by_entry = claims_mod.migration_claims_by_entry(vmi, templates)
    except claims_mod.ClaimInputError as err:
        return {}, input_block(namespace, name, err)
    orphaned = claims_mod.claims_not_owned(source_pod, claims, by_entry)
    if orphaned:
        return {}, {"kind": "claim_not_owned", "field": "spec.resourceClaims", "scope": "vm",
                    "message": "VM %s/%s: the ResourceClaim(s) %s of its launcher pod are not owned by the pod (their "
                               "ownerReference was removed): they would outlive the migration and keep their devices "
                               "once the reservation is given back" % (namespace, name, ", ".join(
                                   "%s/%s" % (namespace, claim) for claim in orphaned)),
                    "fix": "give each claim its ownerReference to the launcher pod back, or delete the claim and "
                           "restart the VM; the VM stays where it is until then, the other VMs are not held up"}
    return by_entry, None


def describe_vms(namespace, vmis, pods, ns_obj, ns_quotas, config, default_pc, cache=None, kubernetes_minor=None,
                 claim_templates=None, claim_templates_problem=None, claims=None):
    """The VM entries of one namespace: sizing, facts, source pod usage and migratability.

    Only Running VMIs would migrate; others are returned in a separate list. cache (a
    dict) remembers launcher pods of identical VMIs across calls. kubernetes_minor: the API server's minor
    release, which rules quota charges the source pods by (quotas.pod_usage; None: those of 1.33 to 1.36).
    claim_templates: {name: ResourceClaimTemplate} of the namespace (None: not read; claim_templates_problem says
    why): a VM's charge includes the DRA ResourceClaims its migration target gets (claims_block).
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
            try:
                pod = launcher_pod(vmi, config, namespace_labels=ns_labels, quota_tracks=tracks)
                cache[key] = (dict(pod.total_charge()), dict(pod.charge), list(pod.notes), None, pod.memory_overhead)
            except VmInputError as err:
                # the VM's owner wrote something that cannot be sized: this VM (or this namespace's VMs, for a
                # namespace label) is blocked, the others are planned
                cache[key] = ({}, {}, [], err, None)
        charge, pod_charge, notes, error, overhead = cache[key]
        source_pod = _source_pod(vmi, by_owner)
        facts = q.launcher_pod_facts(vmi, default_pc)
        if source_pod is not None and (source_pod.get("spec") or {}).get("priorityClassName"):
            facts = dict(facts, priority_class_name=source_pod["spec"]["priorityClassName"])
        source = q.pod_usage(source_pod, kubernetes_minor) if source_pod is not None else None
        blocked = None
        if error is not None:
            blocked = input_block(namespace, name, error)
        claim_charge, claim_entries = {}, None
        if migratable is not False and claims_mod.uses_claims(vmi):
            by_entry, claim_block = claims_block(namespace, name, vmi, ns_quotas, claim_templates,
                                                 claim_templates_problem, source_pod, claims)
            blocked = blocked or claim_block
            for entry_charge in by_entry.values():
                claim_charge = add(claim_charge, entry_charge)
            claim_entries = claims_mod.entry_devices(by_entry) if by_entry else None
            if claim_charge and blocked is None:
                charge = add(charge, claim_charge)
                notes = list(notes) + ["the target pod gets %s new DRA ResourceClaim(s) from ResourceClaimTemplates, "
                                       "charged with it" % claim_charge.get(q.CLAIM_COUNT, 0)]
        grown = {}
        if error is None and source is not None:
            grown = grown_names(pod_charge, source)
        entries.append({
            "namespace": namespace,
            "name": name,
            "node": status.get("nodeName"),
            "migratable": migratable is not False and blocked is None,
            "migratable_reason": reason if blocked is None else blocked["message"],
            "blocked": blocked,
            "facts": facts,
            "charge": charge,
            "pod_charge": pod_charge,
            "claim_charge": claim_charge,
            # {entry: {device class: devices}} of each claim the target pod gets: what the fence pins per claim
            "claims": claim_entries,
            # the LiveMigratable condition's reason (DisksNotLiveMigratable, ...): which fix the check names
            "not_migratable_cause": (condition(vmi, "LiveMigratable").get("reason") or None) if migratable is False
            else None,
            "source": source,
            "source_pod": meta(source_pod).get("name") if source_pod is not None else None,
            "migration_state": status.get("migrationState"),
            "sizing_notes": notes,
            # where the target pod would charge more than the running pod (a change since the VM started)
            "grown": grown,
            "grown_causes": growth_causes(vmi, config, ns_labels, tracks,
                                          lambda pod: explains(grown, signed_difference(pod.charge, source)))
            if grown else [],
            # where KubeVirt's own report of the running (or target) pod's memory overhead differs from ours:
            # reported only, never an amount (a tenant can write the VMI's status)
            "overhead_differences": overhead_report.compare(namespace, vmi, config, overhead)
            if error is None else [],
        })
    return entries, idle


def input_block(namespace, name, error):
    """The per-VM block of a VM whose tenant-written input cannot be sized (error: a VmInputError):
    {kind, field, scope, message, fix}, the message naming the namespace, the VM and the field."""
    where = ("its namespace's %s" % error.field) if error.scope == "namespace" else (error.field or "its spec")
    return {"kind": "vm_input_invalid", "field": error.field, "scope": error.scope,
            "message": "VM %s/%s cannot be sized, %s: %s" % (namespace, name, where, error.message),
            "fix": "%s; the VM stays where it is until then, the other VMs are not held up" % (
                error.fix or "correct %s" % where)}


def grown_names(pod_charge, source):
    """{name: how much more} where a target pod of pod_charge charges more than the running pod's usage source
    (object counts aside: a migration always adds its target pod)."""
    target = q.expand_aliases(pod_charge)
    source = q.expand_aliases(source or {})
    return dict((name, value - source.get(name, 0)) for name, value in sorted(target.items())
                if name != q.POD_COUNT and not name.startswith("count/") and value > source.get(name, 0))


def explains(grown, without):
    """Whether an input explains a growth (grown: {name: how much the pod outgrows the running pod}; without: the
    same difference, signed, for the pod sized without the input): it touches a grown name, and without it the
    difference is at most half the growth either way in every name it touches. Either way: an input the VM
    already had when it started makes the pod sized without it much smaller than the running pod, so it is not
    taken for the change; the running pod was rendered by KubeVirt, maybe of another patch release, so a few Mi
    the sizing differs by are no reason to miss a tenant's change."""
    touched = [name for name, value in grown.items() if without.get(name, 0) != value]
    return bool(touched) and all(abs(without.get(name, 0)) * 2 <= grown[name] for name in touched)


def signed_difference(pod_charge, source):
    """{name: target - running} over the names grown_names looks at (negative where the target is smaller)."""
    target = q.expand_aliases(pod_charge)
    source = q.expand_aliases(source or {})
    return dict((name, target.get(name, 0) - source.get(name, 0)) for name in sorted(set(target) | set(source))
                if name != q.POD_COUNT and not name.startswith("count/"))


# The inputs a VM's owner writes that change its launcher pod's size, each with how to size the VM without it:
# the VMI's hook sidecar annotation, and the namespace label of the auto memory limit ratio (under Rancher a
# project member may edit the namespace).
TENANT_SIZING_INPUTS = (
    ("annotation %s" % HOOK_SIDECARS_ANNOTATION, "vmi_annotation", HOOK_SIDECARS_ANNOTATION),
    ("namespace label %s" % AUTO_MEMORY_LIMITS_RATIO_LABEL, "namespace_label", AUTO_MEMORY_LIMITS_RATIO_LABEL),
)


# KubeVirt's VMI conditions while a CPU or memory hotplug waits for the migration that applies it
HOTPLUG_CONDITIONS = (("HotVCPUChange", "CPU"), ("HotMemoryChange", "memory"))


def growth_causes(vmi, config, ns_labels, tracks, fits):
    """What the VM's owner changed that explains its launcher pod's growth: a pending CPU or memory hotplug (its
    VMI condition), and the tenant-written inputs (TENANT_SIZING_INPUTS, shown with their value) without which the
    pod fits (fits(pod) true); [] when none does (an input kvquota cannot attribute: the KubeVirt configuration or
    version)."""
    causes = ["a pending %s hotplug (VMI condition %s)" % (what, kind) for kind, what in HOTPLUG_CONDITIONS
              if str((condition(vmi, kind) or {}).get("status")) == "True"]
    annotations = dict(meta(vmi).get("annotations") or {})
    for shown, kind, key in TENANT_SIZING_INPUTS:
        if kind == "vmi_annotation" and key in annotations:
            value = annotations[key]
            trial_vmi = dict(vmi, metadata=dict(meta(vmi), annotations=dict(
                (k, v) for k, v in annotations.items() if k != key)))
            trial_labels = ns_labels
        elif kind == "namespace_label" and key in (ns_labels or {}):
            value = ns_labels[key]
            trial_vmi = vmi
            trial_labels = dict((k, v) for k, v in ns_labels.items() if k != key)
        else:
            continue
        try:
            pod = launcher_pod(trial_vmi, config, namespace_labels=trial_labels, quota_tracks=tracks)
        except VmInputError:
            continue
        if fits(pod):
            text = value if len(value) <= 80 else value[:77] + "..."
            causes.append("%s=%s" % (shown, text))
    return causes


def describe_namespaces(snapshot, config, default_pc):
    """({namespace: VM entries}, {namespace: VMIs not running}) of every namespace of the snapshot, with one
    sizing cache for identical VMIs across namespaces."""
    namespaces = snapshot.namespaces or {}
    vms_by_ns = {}
    idle_by_ns = {}
    sizing_cache = {}
    for namespace in sorted(namespaces):
        ns_quotas = (snapshot.quotas or {}).get(namespace) or []
        vmis = (snapshot.vmis or {}).get(namespace) or []
        pods = (snapshot.pods or {}).get(namespace) or []
        vms_by_ns[namespace], idle_by_ns[namespace] = describe_vms(
            namespace, vmis, pods, namespaces.get(namespace), ns_quotas, config, default_pc, sizing_cache,
            snapshot.kubernetes_minor, (snapshot.claim_templates or {}).get(namespace),
            (snapshot.claim_templates_problems or {}).get(namespace), (snapshot.claims or {}).get(namespace))
    return vms_by_ns, idle_by_ns
