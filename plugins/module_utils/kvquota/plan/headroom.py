# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a reservation should add: for a batch of VMs about to migrate, or for what admission refused.

Both read the cluster fresh, just before the reservation, so the amount reflects the usage and
KubeVirt configuration of that moment, not of the plan made at the start of the play.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import dataclasses
import hashlib
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import admission
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import vm_entries
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.check import plan as plan_scope
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.check import plan_of_namespace
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import api_path, custom_path
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError, NotFoundError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import ceil_to
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import FINAL_MIGRATION_PHASES, KUBEVIRT, uid_of
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.inventory import (
    event_stamp,
    failed_create_events,
    Snapshot,
    has_priority_scope,
    read_inventory,
    verified_events,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import (
    format_resource_list,
    maximum,
    parse_resource_list,
    remove_zeros,
)

# The most one top-up of a quota may add when top_up_cap is not given: a quarter of what the refused target pods
# are computed to charge it. Sizing errors (an overhead the formula misses, a sidecar) are a fraction of a pod; a
# larger need means the sizing is wrong, and stopping with the numbers is better than handing out quota that a
# tenant's pod could take meanwhile.
DEFAULT_TOP_UP_CAP = "25%"


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


def batch_headroom(cluster, vms, options=None, planned=None, pins=None):
    """(needs, refs, sized) for migrating exactly these VMs at once; every amount exact (ResourceLists of Fractions).

    needs: {(namespace, quota): ResourceList} the headroom each quota lacks. refs records the VMs and their source
    pods with the reservation (by UID), so release can wait for exactly those pods. sized: {"charges": {(namespace,
    vm): what its migration charges}, "quota_charges": {(namespace, quota): what the VMs' target pods charge it},
    "from_plan": bool, "left_out": [{namespace, name, reason}], "pins": {(namespace, vm): pin}}. VMs that cannot
    live-migrate are an error: a reservation for them would never be used.

    planned (a plan.Plan, kvquota_check's versioned plan): only the batch's VMIs, namespaces, their quotas, the
    ledgers and the KubeVirt CR are read, and the planned charges are used while nothing they were computed from
    changed (the VMI's UID and resourceVersion, the namespace's labels and tracked names, the KubeVirt CR, the
    sizing overrides); otherwise the VMs are sized again from a full read of their namespaces.

    Sizes are pinned: a VM sized again never gets more than its pin (pins {(namespace, vm): pin_of(...)}, else its
    planned charge): one whose charge grew in any resource since (its annotations, its namespace's labels, a
    hotplug, the KubeVirt CR), or whose own input cannot be sized, or whose target pod would now outgrow its running
    pod past a quota's hard by its owner's change, is left out (sized["left_out"], its reason naming the VM, the
    charges and the input that changed where it can be told) and the others are sized without it. A VM smaller than
    its pin is reserved for at its fresh (smaller) size. sized["pins"]: the pins of the VMs sized here that had
    none (a run without a plan keeps them: its first sizing is the pin).
    """
    keys = _vm_keys(vms, "vms")
    if planned is not None:
        from_plan = _from_plan(cluster, keys, options or {}, planned)
        if from_plan is not None:
            return from_plan
    snapshot = read_inventory(cluster, {"nodes": [], "namespaces": sorted(set(ns for ns, _n in keys))}, options)
    vmis = snapshot.vmis or {}
    present = set((ns, meta(v).get("name")) for ns, items in vmis.items() for v in items)
    _raise_missing([k for k in keys if k not in present])
    pins = dict(pins or {})
    if planned is not None:
        for key in keys:
            if key not in pins and "%s/%s" % key in planned.vms:
                pins[key] = planned_pin(planned, key)
    left_out, kept = [], list(keys)
    while True:
        wanted = set(kept)
        batch_snapshot = dataclasses.replace(snapshot, vmis=dict(
            (ns, [v for v in items if (ns, meta(v).get("name")) in wanted]) for ns, items in vmis.items()))
        # One batch: every VM given migrates at once.
        opts = dict(options or {}, parallel_migrations_per_cluster=max(len(kept), 1),
                    parallel_outbound_migrations_per_node=max(len(kept), 1), per_namespace_cap=None)
        scope_plan = plan_scope(batch_snapshot, opts)
        dropped = _left_out(scope_plan, batch_snapshot, pins)
        if not dropped:
            break
        left_out.extend(dropped)
        kept = [k for k in kept if k not in set((d["namespace"], d["name"]) for d in dropped)]
    pod_uids = dict(((ns, meta(p).get("name")), uid_of(p)) for ns, items in (snapshot.pods or {}).items()
                    for p in items)
    vmi_uids = dict(((ns, meta(v).get("name")), uid_of(v)) for ns, items in (snapshot.vmis or {}).items()
                    for v in items)
    entries, blocked = [], []
    for namespace, ns_plan in sorted(scope_plan.namespaces.items()):
        for vm in ns_plan.vms:
            if (namespace, vm["name"]) not in set(kept):
                continue
            if not vm["migratable"]:
                blocked.append("%s/%s (%s)" % (namespace, vm["name"], vm.get("migratable_reason")))
            entries.append(dict(vm, source_pod_uid=pod_uids.get((namespace, vm.get("source_pod")))))
    if blocked:
        raise InputError("cannot reserve for VMs that cannot live-migrate: %s" % ", ".join(blocked),
                         "leave them out of the batch and apply the non-migratable policy to them")
    needs, refs, sized = _batch_result(kept, entries, scope_plan.namespaces if kept else {},
                                       dict((k, vmi_uids.get(k)) for k in kept), False)
    sized["left_out"] = left_out
    claims = dict(((e["namespace"], e["name"]), e.get("claims")) for e in entries)
    sized["pins"] = dict((key, pin_of(entry_charge, snapshot, key, sized["pod_charges"].get(key),
                                      sized["sources"].get(key), claims.get(key)))
                         for key, entry_charge in sized["charges"].items() if key not in pins)
    return needs, refs, sized


def grown_since_pin(cluster, vms, options=None, pins=None, planned=None):
    """[{namespace, name, reason, ...}] (as batch_headroom's left_out) of these VMs ({namespace, name}), sized again
    from a fresh read of their namespaces, whose charge grew past their pin (pins, else their planned charge) in any
    resource, or whose own input can no longer be sized. A VM without a pin, or no longer running, is not looked
    at. Nothing is reserved or computed for the others: this only tells which VMs changed since their batch's
    reservation was made (a tenant's annotation, its namespace's labels, a hotplug), so that the run stops their
    migrations rather than let their larger target pods use their siblings' share of the headroom."""
    keys = _vm_keys(vms, "vms")
    pins = dict(pins or {})
    if planned is not None:
        for key in keys:
            if key not in pins and "%s/%s" % key in planned.vms:
                pins[key] = planned_pin(planned, key)
    wanted = set(k for k in keys if k in pins)
    if not wanted:
        return []
    snapshot = read_inventory(cluster, {"nodes": [], "namespaces": sorted(set(ns for ns, _n in wanted))}, options)
    vmis = snapshot.vmis or {}
    batch_snapshot = dataclasses.replace(snapshot, vmis=dict(
        (ns, [v for v in items if (ns, meta(v).get("name")) in wanted]) for ns, items in vmis.items()))
    opts = dict(options or {}, parallel_migrations_per_cluster=len(wanted),
                parallel_outbound_migrations_per_node=len(wanted), per_namespace_cap=None)
    return _left_out(plan_scope(batch_snapshot, opts), batch_snapshot, pins)


def pinned_room(quota_charges, deltas):
    """{(ns, quota): ResourceList} what a batch's top-ups may still add to each quota: what its VMs' target pods were
    computed to charge it when its reservation was made (quota_charges, their pinned sizes) minus what the
    reservation holds there now (deltas: the first reserve, its margin and the top-ups so far), never below 0. A
    top-up never adds what the pinned sizes do not need: a quota short by more is short because something grew
    since (a sibling's larger target pod), which is not the run's to pay for."""
    room = {}
    for target, charge in (quota_charges or {}).items():
        held = (deltas or {}).get(target) or {}
        room[target] = dict((name, max(Fraction(0), value - held.get(name, 0))) for name, value in charge.items())
    return room


# ---------------------------------------------------------------------------
# pinned sizes

def _vmi_of(snapshot, key):
    return next((v for v in (snapshot.vmis or {}).get(key[0]) or () if meta(v).get("name") == key[1]), None)


def pin_of(charge, snapshot, key, pod_charge=None, source=None, claims=None):
    """The pin of a VM sized now: its charge, its target pod's own charge (pod_charge, default charge) and what its
    running (source) pod charges (source, None when it has none; plan amounts: exact integers of nano-units), and
    the identity of what it was computed from (the VMI, its namespace's labels and the names its quotas track, the
    KubeVirt CR)."""
    namespace = key[0]
    inputs = versioned.namespace_inputs((snapshot.namespaces or {}).get(namespace),
                                        (snapshot.quotas or {}).get(namespace) or [])
    vmi = _vmi_of(snapshot, key) or {}
    kubevirt = snapshot.kubevirt
    return {"charge": versioned.amounts(charge), "pod_charge": versioned.amounts(charge if pod_charge is None else pod_charge),
            "source": None if source is None else versioned.amounts(source), "what": "the first computed",
            "uid": meta(vmi).get("uid"), "resourceVersion": meta(vmi).get("resourceVersion"),
            "labels": inputs["labels"], "tracks": inputs["tracks"],
            "kubevirt": meta(kubevirt).get("resourceVersion") if kubevirt else None, "claims": claims}


def planned_pin(planned, key):
    """The pin of a planned VM: its charge in the plan and what the plan computed it from."""
    entry = planned.vms["%s/%s" % key]
    inputs = planned.namespaces.get(key[0]) or {}
    return {"charge": dict(entry["charge"]), "pod_charge": dict(entry.get("pod_charge") or entry["charge"]),
            "source": None if entry.get("source") is None else dict(entry["source"]), "what": "the planned",
            "uid": entry.get("uid"), "resourceVersion": entry.get("resourceVersion"),
            "labels": dict(inputs.get("labels") or {}), "tracks": list(inputs.get("tracks") or []),
            "kubevirt": (planned.kubevirt or {}).get("resourceVersion"), "claims": entry.get("claims")}


def pinned_pod_size(pin):
    """{quota name: Fraction} the most the headroom fence admits for a target pod of the pin's VM (fence.size_value):
    per name the larger of the pin's computed target pod and the pod the VM runs in now (what KubeVirt rendered at
    its start, with whatever the sizing does not model: a LimitRange's defaults, a mutating webhook's sidecar, the
    RuntimeClass overhead). So a VM may move at the size it has; it never grows on the headroom. None without a
    pin."""
    if pin is None:
        return None
    size = maximum(pin.get("pod_charge") or pin["charge"], pin.get("source") or {})
    return dict((name, Fraction(value, versioned.NANO_UNITS)) for name, value in size.items())


def grown_over_pin(charge, pin):
    """{name: (now, pinned)} (exact integers of nano-units) of the resource names where charge (a ResourceList)
    exceeds the pin's charge; a name the pin does not have counts as pinned at 0."""
    now = versioned.amounts(charge)
    pinned = pin["charge"]
    return dict((name, (value, pinned.get(name, 0))) for name, value in sorted(now.items()) if value > pinned.get(name, 0))


def _nano_text(name, value):
    return q.show(Fraction(value, versioned.NANO_UNITS), name)


def over_pin_text(over):
    """grown_over_pin's result as text: 'limits.cpu=1225m instead of 1025m, ...'."""
    return ", ".join("%s=%s instead of %s" % (name, _nano_text(name, now), _nano_text(name, was))
                     for name, (now, was) in sorted(over.items()))


def changed_inputs(pin, snapshot, key, causes=()):
    """What changed since the pin was computed, as text: the tenant inputs that explain the growth (causes), then
    the VMI, the namespace's labels (each named with its values), the names the quotas track, the KubeVirt CR."""
    namespace = key[0]
    found = list(causes)
    vmi = _vmi_of(snapshot, key) or {}
    if (meta(vmi).get("uid"), meta(vmi).get("resourceVersion")) != (pin.get("uid"), pin.get("resourceVersion")):
        found.append("the VMI (resourceVersion %s, then %s)" % (pin.get("resourceVersion"), meta(vmi).get("resourceVersion"))
                     if meta(vmi).get("uid") == pin.get("uid") else "the VMI (re-created: another UID)")
    inputs = versioned.namespace_inputs((snapshot.namespaces or {}).get(namespace),
                                        (snapshot.quotas or {}).get(namespace) or [])
    before, now = pin.get("labels") or {}, inputs["labels"]
    for name in sorted(set(before) | set(now)):
        if before.get(name) != now.get(name):
            found.append("namespace label %s (%s, now %s)" % (name, before.get(name, "unset"), now.get(name, "unset")))
    if sorted(pin.get("tracks") or []) != inputs["tracks"]:
        found.append("the names namespace %s's quotas track" % namespace)
    kubevirt = snapshot.kubevirt
    if pin.get("kubevirt") is not None and (meta(kubevirt).get("resourceVersion") if kubevirt else None) != pin["kubevirt"]:
        found.append("the KubeVirt CR")
    # the same change seen twice (an annotation and its VMI) is said once, the explanation first
    return found


def _left_out(scope_plan, snapshot, pins):
    """[{namespace, name, reason}] of the VMs of a fresh batch plan that are left out: blocked alone (their own input
    cannot be sized, or their owner's change grows their target pod past a quota), or grown past their pin."""
    dropped = []
    for namespace, ns_plan in sorted(scope_plan.namespaces.items()):
        for vm in ns_plan.vms:
            key = (namespace, vm["name"])
            pin = pins.get(key)
            grown = grown_over_pin(vm["charge"], pin) if pin is not None and vm["charge"] else {}
            if not grown:
                if vm.get("blocked"):
                    dropped.append({"namespace": namespace, "name": vm["name"], "reason": vm["blocked"]["message"]})
                continue
            vmi = _vmi_of(snapshot, key) or {}
            ns_obj = (snapshot.namespaces or {}).get(namespace)
            tracks = set(versioned.namespace_inputs(ns_obj, (snapshot.quotas or {}).get(namespace) or [])["tracks"])
            causes = vm_entries.growth_causes(vmi, scope_plan.config, dict((ns_obj and meta(ns_obj).get("labels")) or {}),
                                              tracks, lambda pod: not grown_over_pin(pod.total_charge(), pin))
            changed = changed_inputs(pin, snapshot, key, causes)
            # cpu and memory are requests.cpu and requests.memory again: shown once
            shown = [(n, v) for n, v in grown.items() if not ("requests." + n in grown and n in q.REQUEST_ALIASES)]
            dropped.append({"namespace": namespace, "name": vm["name"], "grown": dict(
                (name, {"now": _nano_text(name, now), "pinned": _nano_text(name, was)}) for name, (now, was) in grown.items()),
                "changed": changed,
                "reason": "%s/%s: its target pod now charges %s instead of %s %s (%s)" % (
                    namespace, vm["name"], ", ".join("%s=%s" % (n, _nano_text(n, now)) for n, (now, _w) in shown),
                    pin["what"], ", ".join("%s=%s" % (n, _nano_text(n, was)) for n, (_n, was) in shown),
                    ("changed: " + "; ".join(changed)) if changed else "what changed cannot be told")})
    return dropped


def _raise_missing(missing):
    if missing:
        raise NotFoundError("VirtualMachineInstance %s not found" % ", ".join("%s/%s" % k for k in missing),
                            "check the names with `kubectl get vmi -A`; a VM that is not running does not migrate")


def _batch_result(keys, entries, ns_plans, vmi_uids, from_plan):
    """batch_headroom's (needs, refs, sized) from the VM entries and the namespaces' plans."""
    needs, quota_charges = {}, {}
    for namespace, ns_plan in sorted(ns_plans.items()):
        for quota_plan in ns_plan.quota_plans:
            needed = remove_zeros(quota_plan.plan.needed)
            if needed:
                needs[(namespace, quota_plan.name)] = needed
            charge = remove_zeros(quota_plan.plan.charge_total)
            if charge:
                quota_charges[(namespace, quota_plan.name)] = charge
    source_pods = [{"namespace": vm["namespace"], "name": vm["source_pod"], "uid": vm.get("source_pod_uid")}
                   for vm in entries if vm.get("source_pod")]
    # identity by UID: a VMI deleted and re-created under the same name is another VM
    refs = {"vms": [{"namespace": ns, "name": name, "uid": vmi_uids.get((ns, name))} for ns, name in keys],
            "sourcePods": source_pods}
    sized = {"charges": dict(((vm["namespace"], vm["name"]), vm["charge"]) for vm in entries),
             "pod_charges": dict(((vm["namespace"], vm["name"]), vm.get("pod_charge", vm["charge"])) for vm in entries),
             "sources": dict(((vm["namespace"], vm["name"]), vm.get("source")) for vm in entries),
             "quota_charges": quota_charges, "from_plan": from_plan, "left_out": [], "pins": {}}
    return needs, refs, sized


def _from_plan(cluster, keys, options, planned):
    """batch_headroom from the plan (reading only the batch's objects), or None when something a planned charge
    was computed from has changed since (the caller then sizes the batch from a full read)."""
    if not planned.sizing_matches(options) or any("%s/%s" % key not in planned.vms for key in keys):
        return None
    current = {}
    for namespace, name in keys:
        vmi = cluster.exists(custom_path(*KUBEVIRT, "virtualmachineinstances", namespace, name),
                             "read VirtualMachineInstance %s/%s" % (namespace, name))
        current[(namespace, name)] = vmi
    _raise_missing([k for k in keys if current[k] is None])
    for (namespace, name), vmi in current.items():
        entry = planned.vms["%s/%s" % (namespace, name)]
        if (meta(vmi).get("uid"), meta(vmi).get("resourceVersion")) != (entry["uid"], entry["resourceVersion"]):
            return None
    if planned.kubevirt:
        # listed, as the check reads it (RBAC grants list on kubevirts, not get): one per cluster
        kubevirts = cluster.list_custom(*KUBEVIRT, "kubevirts")
        if [(meta(kv).get("uid"), meta(kv).get("resourceVersion")) for kv in kubevirts[:1]] != [
                (planned.kubevirt.get("uid"), planned.kubevirt.get("resourceVersion"))]:
            return None
    operator_namespace = options.get("operator_namespace") or store.DEFAULT_OPERATOR_NAMESPACE
    ledgers = None
    ns_plans, entries = {}, []
    for namespace in sorted(set(ns for ns, _n in keys)):
        ns_obj = cluster.exists(api_path("v1", "namespaces", name=namespace), "read namespace %s" % namespace)
        if ns_obj is None:
            _raise_missing([k for k in keys if k[0] == namespace])
        raw_quotas = sorted(cluster.list_quotas(namespace), key=lambda o: meta(o).get("name"))
        if versioned.namespace_inputs(ns_obj, raw_quotas) != planned.namespaces.get(namespace) \
                or any(has_priority_scope(quota) for quota in raw_quotas):
            # sizing read other inputs (or the cluster's default PriorityClass matters, which the plan does not pin)
            return None
        if ledgers is None:
            ledgers = dict((uid, entry) for uid, (entry, _cm) in store.Store(cluster, operator_namespace).list().items())
        vms = [dict(planned.entry(ns, name), source_pod_uid=(planned.vms["%s/%s" % (ns, name)].get("source_pod") or {}).get("uid"))
               for ns, name in keys if ns == namespace]
        snapshot = Snapshot(namespaces={namespace: ns_obj}, quotas={namespace: raw_quotas}, ledgers=ledgers)
        ns_plans[namespace] = plan_of_namespace(snapshot, dict(options), namespace, vms, [],
                                                ([["%s/%s" % k for k in keys]], None), planned.cluster_facts)
        entries.extend(vms)
    return _batch_result(keys, entries, ns_plans, dict((k, meta(current[k]).get("uid")) for k in keys), True)


def refused_migrations(cluster, migrations):
    """[(vmim, condition)] of these VMIMs ({namespace, name}) that KubeVirt marked migrationRejectedByResourceQuota
    and that are not final; a VMIM not found is an error naming it."""
    keys = _vm_keys(migrations, "migrations")
    refused = []
    for namespace, name in keys:
        vmim = cluster.get(custom_path(*KUBEVIRT, "virtualmachineinstancemigrations", namespace, name),
                           "get VirtualMachineInstanceMigration %s/%s" % (namespace, name))
        condition = admission.rejected_condition(vmim)
        if condition is None or ((vmim.get("status") or {}).get("phase") or "") in FINAL_MIGRATION_PHASES:
            continue
        refused.append((vmim, condition))
    return refused


def _refusals_in(text):
    try:
        return admission.parse_exceeded_quota(text or "")
    except InputError:
        return []


def _pointed_quotas(vmim, condition, events):
    """The refusals KubeVirt's own condition message, or else the newest Event verified to be about this VMIM
    (UID, virt-controller), shows; (refusals, trusted, evidence): trusted the condition's refusals alone (the
    VMIM's status, which only virt-controller writes), evidence identifies that Event (so a later refusal differs
    from this one). A name says which quota to top up; a limit, read from the condition only, below the written
    spec.hard withholds a top-up (see limited_by_refusals). An Event is never more than a name: a tenant can
    post one with the VMIM's UID and virt-controller's name, and a forged low limit would withhold every
    top-up (the migration refused for ever); no amount is ever read from an Event."""
    trusted, evidence = _refusals_in(condition.get("message")), ""
    refusals = trusted
    mine = verified_events(events, vmim)
    if mine:
        newest = mine[-1]
        evidence = "%s/%s/%s" % ((newest.get("metadata") or {}).get("name"), newest.get("count") or 1,
                                 event_stamp(newest))
        if not refusals:
            refusals = _refusals_in(newest.get("message"))
    return refusals, trusted, evidence


def limited_by_refusals(namespace, refusals, into):
    """Add the "limited:" part of refusals (parsed, of quotas of namespace) into ({(ns, quota): ResourceList}),
    keeping the lowest limit per name: what admission compared against, status.hard at the time."""
    for refusal in refusals:
        limits = into.setdefault((namespace, refusal["quota"]), {})
        for name, value in (refusal.get("limited") or {}).items():
            if name not in limits or value < limits[name]:
                limits[name] = value
    return into


def refused_target_pods(cluster, migrations, options=None, pins=None, planned=None):
    """What quota admission refused these VMIMs ({namespace, name}), from what only the control plane and
    KubeVirt write: the VMIMs' migrationRejectedByResourceQuota condition, the quotas' status (used, hard) read
    now, and the computed charge of the refused target pods (sizing, as batch_headroom computes it).

    Returns {"refused": [{namespace, name, uid, vmi}], "exact": {(ns, quota): ResourceList}, "charge": {(ns, quota):
    ResourceList}, "pointed": [(ns, quota)], "limited": {(ns, quota): ResourceList}, "key": str, "evidence": bool}:
    exact is max(0, used + charge - hard) per name (what the quota lacks for pods of the computed size), charge
    what those pods are computed to charge each quota, pointed the quotas KubeVirt's condition or a verified Event
    names as the refusing one, limited the limits KubeVirt's condition says those refusals were checked against
    (lowest per name; never an Event's), left_out the refused VMs sized past their pin (pins, else their charge in
    planned: batch_headroom's left_out; nothing is computed for them, a top-up never adds what a change since the
    plan asks for). key
    identifies the refusals (VMIM UIDs, condition times and the verified Events' identity, never their text);
    evidence says whether a verified Event took part (without one, a later refusal cannot be told from this one).
    """
    refused = refused_migrations(cluster, migrations)
    result = {"refused": [], "exact": {}, "charge": {}, "pointed": [], "limited": {}, "key": "", "evidence": False,
              "left_out": []}
    if not refused:
        return result
    namespaces = sorted(set(v["metadata"]["namespace"] for v, _c in refused))
    rejected_without_message = [v for v, c in refused if not c.get("message")]
    events = failed_create_events(cluster, namespaces) if rejected_without_message else []
    keys, pointed, vms = [], set(), set()
    for vmim, condition in refused:
        vmim_meta = vmim["metadata"]
        refusals, trusted, evidence = _pointed_quotas(vmim, condition, events)
        pointed |= set((vmim_meta["namespace"], r["quota"]) for r in refusals)
        limited_by_refusals(vmim_meta["namespace"], trusted, result["limited"])
        keys.append("%s/%s@%s:%s%s" % (vmim_meta["namespace"], vmim_meta["name"], vmim_meta.get("uid") or "",
                                       condition.get("lastTransitionTime") or condition.get("lastProbeTime") or "",
                                       ("#" + evidence) if evidence else ""))
        result["evidence"] = result["evidence"] or bool(evidence)
        vmi = (vmim.get("spec") or {}).get("vmiName")
        result["refused"].append({"namespace": vmim_meta["namespace"], "name": vmim_meta["name"], "uid": vmim_meta.get("uid"),
                                  "vmi": vmi})
        if vmi:
            vms.add((vmim_meta["namespace"], vmi))
    if vms:
        # what admission lacks now: against the quota as it is, reservations included
        pinned = dict(pins or {})
        if planned is not None:
            for key in vms:
                if key not in pinned and "%s/%s" % key in planned.vms:
                    pinned[key] = planned_pin(planned, key)
        # always sized from a fresh read (the quotas as admission sees them), each VM against its pin
        needs, _refs, sized = batch_headroom(cluster, [{"namespace": ns, "name": name} for ns, name in sorted(vms)],
                                             dict(options or {}, reservations_taken=False), pins=pinned)
        result["exact"].update(needs)
        result["charge"].update(sized["quota_charges"])
        result["left_out"] = sized.get("left_out") or []
    result["pointed"] = sorted(pointed)
    result["key"] = "refused:" + hashlib.sha256(",".join(sorted(keys)).encode("utf-8")).hexdigest()[:16]
    return result


def refused_headroom(cluster, migrations, cap=DEFAULT_TOP_UP_CAP, options=None):
    """({(ns, quota): ResourceList strings to add}, key) for the target pods quota admission refused these VMIMs
    (kvquota_reserve migrations:): see refused_target_pods and top_up_amounts. InputError past top_up_cap."""
    found = refused_target_pods(cluster, migrations, options)
    if not found["refused"]:
        return {}, ""
    if found["left_out"]:
        # a VM whose owner's change grows its target pod past its quota: no top-up adds what that change asks for
        raise InputError("no top-up for a target pod its VM's owner made larger: %s"
                         % "; ".join(item["reason"] for item in found["left_out"]),
                         "nothing was changed; the VM stays where it is: revert the change named (or have the VM "
                         "restarted, so that its pod is sized anew within its own quota); the quota is not raised "
                         "for it")
    amounts, problems, _how = top_up_amounts(found["exact"], found["charge"], cap, found["pointed"])
    if problems:
        raise InputError("the shortfall of the refused target pods exceeds top_up_cap: %s" % "; ".join(problems),
                         "nothing was changed; raise top_up_cap if that much is expected, or check why the target "
                         "pods are larger than planned (overhead ratio, sidecars)")
    return dict((t, format_resource_list(a)) for t, a in amounts.items() if a), found["key"]


# ---------------------------------------------------------------------------
# the top-up cap and amount (pure)

def _percent(text, what):
    try:
        value = Fraction(str(text).strip()[:-1].strip())
    except (ValueError, ZeroDivisionError):
        value = None
    if value is None or value < 0 or value > 100:
        raise InputError("%s must be a percentage between 0%% and 100%% of the refused pods' computed charge, "
                         "got %r" % (what, text), "give e.g. 25%")
    return value / 100


def parse_top_up_cap(cap):
    """{name or "*": ("percent", Fraction 0..1) | ("quantity", Fraction)} of a top_up_cap: a percentage of the
    refused target pods' computed charge for every resource ("25%", the default when None or empty), or a
    mapping of resource names to quantities or percentages. InputError for a malformed or negative value
    (checked before anything moves, not at the first top-up)."""
    if cap is None or cap == "" or cap == {}:
        cap = DEFAULT_TOP_UP_CAP
    if isinstance(cap, str):
        if not cap.strip().endswith("%"):
            raise InputError("top_up_cap must be a percentage such as 25%% or a mapping of resource names to "
                             "quantities, got %r" % (cap,),
                             "give e.g. top_up_cap: 25%, or top_up_cap: {limits.memory: 1Gi}")
        return {"*": ("percent", _percent(cap, "top_up_cap"))}
    if not isinstance(cap, dict):
        raise InputError("top_up_cap must be a percentage such as 25%% or a mapping of resource names to "
                         "quantities, got %s" % type(cap).__name__,
                         "give e.g. top_up_cap: 25%, or top_up_cap: {limits.memory: 1Gi}")
    parsed = {}
    for name, value in cap.items():
        if isinstance(value, str) and value.strip().endswith("%"):
            parsed[str(name)] = ("percent", _percent(value, "top_up_cap.%s" % name))
        else:
            parsed[str(name)] = ("quantity", parse_resource_list({name: value}, "top_up_cap")[str(name)])
    negative = sorted(n for n, (kind, v) in parsed.items() if kind == "quantity" and v < 0)
    if negative:
        raise InputError("top_up_cap must not be negative, got %s"
                         % ", ".join("%s=%s" % (name, cap[name]) for name in negative),
                         "give the most one quota's top-up may add, e.g. top_up_cap: {limits.memory: 1Gi} "
                         "(0 allows none)")
    return parsed


def cap_limit(cap, charge):
    """{name: most one top-up of a quota may add} for top_up_cap cap and the refused pods' computed charge of
    that quota; a name neither the cap nor its "*" names is absent (nothing may be added)."""
    parsed = parse_top_up_cap(cap)
    limit = {}
    for name in set(charge) | set(n for n in parsed if n != "*"):
        kind, value = parsed.get(name) or parsed.get("*") or (None, None)
        if kind == "percent":
            # rounded up to what a quota shows: millicores for CPU, whole units otherwise
            limit[name] = ceil_to(charge.get(name, 0) * value, Fraction(1, 1000) if "cpu" in name else 1)
        elif kind == "quantity":
            limit[name] = value
    return limit


def _cap_text(cap, name):
    parsed = parse_top_up_cap(cap)
    kind, value = parsed.get(name) or parsed.get("*") or (None, None)
    if kind is None:
        return "does not name it"
    if kind == "percent":
        return "%s%% of the computed charge" % format(float(value * 100), "g")
    return format_resource_list({name: value})[name]


def top_up_amounts(exact, charge, cap=DEFAULT_TOP_UP_CAP, pointed=None, added=None):
    """({(ns, quota): ResourceList to add}, problems, how) for one top-up. Pure.

    exact, charge: as refused_target_pods gives them; pointed: the quotas named as refusing; added: what earlier
    top-ups of the same reservation already added ({(ns, quota): ResourceList}).
    - how "exact": some quota lacks room for pods of the computed size (usage grew since the reservation): add
      exactly that, for those quotas; a need over top_up_cap is a problem (nothing is added).
    - how "step": every quota has room for pods of the computed size, yet admission refused: the pods are larger
      than computed, by an amount nothing trustworthy states (the apiserver's numbers reach us only in Events,
      which tenants can write). Add, to the quotas pointed at (else every quota the pods charge), per charged
      name, top_up_cap's limit (object counts such as pods excepted: those are never larger than computed).
    In both, a quota's top-ups together never exceed the refused pods' computed charge of that quota; a step that
    can add nothing is a problem.
    """
    added = added or {}
    amounts, problems = {}, []
    if any(exact.get(t) for t in exact):
        for target in sorted(t for t in exact if exact[t]):
            need = exact[target]
            limit = cap_limit(cap, charge.get(target) or {})
            over = sorted(n for n in need if n not in limit or need[n] > limit[n])
            if over:
                shown = format_resource_list(need)
                problems.append("%s/%s needs %s" % (target[0], target[1], ", ".join(
                    "%s=%s (top_up_cap %s)" % (n, shown[n], _cap_text(cap, n)) for n in over)))
                continue
            amounts[target] = _within_charge(need, charge.get(target) or {}, added.get(target) or {})
        return dict((t, a) for t, a in amounts.items() if a), problems, "exact"
    candidates = sorted(t for t in charge if charge[t] and (not pointed or t in set(pointed)))
    for target in candidates:
        limit = cap_limit(cap, charge[target])
        # a pod counts as exactly one object: counts are never larger than computed, so never stepped
        step = dict((n, limit[n]) for n in charge[target] if limit.get(n, 0) > 0 and not _is_count(n))
        amount = _within_charge(step, charge[target], added.get(target) or {})
        if amount:
            amounts[target] = amount
    if not amounts:
        problems.append("the refused target pods are larger than computed and top_up_cap allows nothing more for %s"
                        % (", ".join("%s/%s" % t for t in candidates) or "the quotas they charge"))
    return amounts, problems, "step"


def _is_count(name):
    return name == "pods" or name.startswith("count/")


def _within_charge(amount, charge, added):
    """amount, each name bounded by what the computed charge leaves after added (names the charge does not
    have are dropped: a top-up never adds what the refused pods are not computed to charge)."""
    result = {}
    for name, value in amount.items():
        room = charge.get(name, 0) - added.get(name, 0)
        value = min(value, room)
        if value > 0:
            result[name] = value
    return result


def over_cap(needs, cap, charges=None):
    """["ns/quota needs name=value (top_up_cap x)"] for every (ns, quota): ResourceList in needs that a
    top_up_cap does not allow (a resource the cap does not name is over it); charges ({(ns, quota):
    ResourceList}) is what percentages are taken of."""
    problems = []
    for target, amount in sorted(needs.items()):
        limit = cap_limit(cap, (charges or {}).get(target) or {})
        shown = format_resource_list(amount)
        over = sorted(n for n in amount if n not in limit or amount[n] > limit[n])
        if over:
            problems.append("%s/%s needs %s" % (target[0], target[1], ", ".join(
                "%s=%s (top_up_cap %s)" % (n, shown[n], _cap_text(cap, n)) for n in over)))
    return problems
