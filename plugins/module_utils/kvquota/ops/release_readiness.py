# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a reservation can be given back yet: a thin reader of what the cluster holds now (read_own,
read_usage) and pure rules over what it read (own_blockers, usage_now, decide), as k8s_drain's filter_pods
reads the pods once and filters them.

Only the reservation's own migrations and source pods, and usage that is about to drop by itself (status.used
not caught up with pods that ended; a pod KubeVirt named for the reservation - a recorded source pod by UID, a
source or target pod its migrations name in their status - that is being removed), are waited for. Usage above
the value to restore that lasts - what running pods and PVCs really charge: a VM that came back bigger, a pod or
PVC created during the reservation, a pod that claims a reserved VM as its owner but that KubeVirt does not name, a
migration the run did not create - never keeps the reservation: the quota goes back to its base all the same
(Kubernetes keeps a quota below its usage; new pods are refused until usage is within it), and the over-use is
named. Identity is by UID, controller ownerReference and KubeVirt's status, never by labels.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from dataclasses import dataclass
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import ownership
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import timeutil
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ForbiddenError,
    InputError,
    NotFoundError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import KUBEVIRT
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import (
    add,
    format_resource_list,
    mask,
    parse_resource_list,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import (
    api_path,
    custom_path,
    list_items,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import claims as claims_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as quotas_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.ledger import desired, desired_strings
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.protocol import used_of

CREATED_DURING, GREW, FOREIGN_MIGRATION = "created-during-reservation", "grew", "migration-not-of-this-run"
# a pod whose controller ownerReference names a reserved VM, that is not its active launcher and that KubeVirt does
# not name for the reservation (a tenant may write any ownerReference): over-use, whenever it was created
CLAIMS_LAUNCHER = "claims-to-be-a-launcher"
# a source or target pod KubeVirt named for the reservation's final migration that still counts without being
# removed: over-use too (only what KubeVirt is removing is waited for)
LEFT_OVER = "left-by-its-migration"


def pod_counts(pod, now):
    """Whether a pod still counts in quota usage (as the quota controller sees it)."""
    status = pod.get("status") or {}
    if status.get("phase") in quotas_mod.FINISHED_POD_PHASES:
        return False
    meta = pod.get("metadata") or {}
    deleted = meta.get("deletionTimestamp")
    grace = meta.get("deletionGracePeriodSeconds")
    if deleted and grace is not None:
        return now <= timeutil.parse_time(deleted) + int(grace)
    return True


def _pod_label(pod):
    meta = pod.get("metadata") or {}
    text = "%s (%s" % (meta.get("name"), (pod.get("status") or {}).get("phase") or "Pending")
    if meta.get("deletionTimestamp"):
        text += ", terminating"
    return text + ")"


def ref_items(refs, key, namespace, only_namespace=False):
    """The refs[key] entries as {namespace, name, ...} (a missing namespace is the quota's); with only_namespace,
    only those in that namespace (a quota waits only for its own pods and migrations)."""
    items = []
    for item in (refs or {}).get(key) or []:
        if isinstance(item, str):
            ns, _sep, name = item.rpartition("/")
            items.append({"namespace": ns or namespace, "name": name})
        elif isinstance(item, dict) and item.get("name"):
            entry = dict(item)
            entry.setdefault("namespace", namespace)
            items.append(entry)
    if only_namespace:
        items = [item for item in items if item["namespace"] == namespace]
    return items


def launcher_owner(pod):
    """(name, uid) of the VMI a virt-launcher pod belongs to, by its controller ownerReference
    (ownership.launcher_vmi_uid), or None. Labels are the tenant's to write: never identity."""
    uid = ownership.launcher_vmi_uid(pod)
    if not uid:
        return None
    return next(ref.get("name") for ref in (pod.get("metadata") or {}).get("ownerReferences") or ()
                if isinstance(ref, dict) and ref.get("uid") == uid), uid


def runs_on_launcher(vmi, pod):
    """Whether vmi (None: gone) still runs on pod's node, i.e. pod is its active launcher: the pod must be
    owned by exactly this VMI (uid), not by a namesake."""
    if not ownership.is_launcher_of(pod, vmi):
        return False
    node = (vmi.get("status") or {}).get("nodeName")
    return bool(node) and node == (pod.get("spec") or {}).get("nodeName")


def created_at(obj):
    """metadata.creationTimestamp of obj in epoch seconds (set by the API server: nobody can choose it), or None."""
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    try:
        return timeutil.parse_time(stamp) if stamp else None
    except InputError:
        return None


def _created_no_later(obj, limit):
    """Whether obj was created at or before limit (epoch seconds; None: unknown, so never)."""
    created = created_at(obj)
    return created is not None and limit is not None and created <= limit


def _final_at(vmim):
    """When a migration went final (the later of its migrationState.endTimestamp and the time of its Succeeded or
    Failed phase transition) in epoch seconds, or None when it says neither."""
    status = vmim.get("status") or {}
    stamps = [(status.get("migrationState") or {}).get("endTimestamp")]
    stamps.extend(item.get("phaseTransitionTimestamp") for item in status.get("phaseTransitionTimestamps") or ()
                  if isinstance(item, dict) and item.get("phase") in ownership.FINAL_MIGRATION_PHASES)
    times = []
    for stamp in stamps:
        try:
            when = timeutil.parse_time(stamp) if stamp else None
        except InputError:
            when = None
        if when is not None:
            times.append(when)
    return max(times) if times else None    # the later of the two: clocks of virt-handler and virt-controller


def named_by_kubevirt(entry, namespace, vmims):
    """The pods KubeVirt itself named for this reservation: ({pod UID: text} of its recorded source pods,
    {pod name: (text, not_before, not_after)} of the source and target pods that its migrations (matched by UID:
    refs["migrations"]) name in status.migrationState). A pod named only by name must have been created within
    those bounds (epoch seconds; None: no bound known, so no pod matches): a source pod before its migration, a
    target pod between the migration's creation and its end; so a pod a tenant creates under such a name once
    KubeVirt's is gone is not taken for it. Labels and ownerReferences are the tenant's to write: never used."""
    by_uid = dict((item["uid"], "its recorded source pod")
                  for item in ref_items(entry.refs, "sourcePods", namespace, True) if item.get("uid"))
    own = set(item["uid"] for item in ref_items(entry.refs, "migrations", namespace, True) if item.get("uid"))
    by_name = {}
    for vmim in vmims:
        if not ownership.uid_of(vmim) or ownership.uid_of(vmim) not in own:
            continue
        migration_state = (vmim.get("status") or {}).get("migrationState") or {}
        name = (vmim.get("metadata") or {}).get("name")
        started = created_at(vmim)
        source, target = migration_state.get("sourcePod"), migration_state.get("targetPod")
        if source:
            by_name[source] = ("the source pod of its migration %s" % name, None, started)
        if target:
            by_name[target] = ("the target pod of its migration %s" % name, started, _final_at(vmim))
    return by_uid, by_name


def _kubevirt_named(pod, named):
    """How KubeVirt named pod for the reservation (text), or None (named: named_by_kubevirt)."""
    by_uid, by_name = named
    uid = ownership.uid_of(pod)
    if uid and uid in by_uid:
        return by_uid[uid]
    found = by_name.get((pod.get("metadata") or {}).get("name"))
    if found is None:
        return None
    text, not_before, not_after = found
    created = created_at(pod)
    if created is None or not_after is None or created > not_after:
        return None
    if not_before is not None and created < not_before:
        return None
    return text


def pvc_usage(pvc):
    """What quota charges for an existing PVC (the PVC evaluator): the counts and requests.storage (the larger of
    the request and status.allocatedResources), also per storage class."""
    spec = pvc.get("spec") or {}
    status = pvc.get("status") or {}
    sizes = [((spec.get("resources") or {}).get("requests") or {}).get("storage"),
             (status.get("allocatedResources") or {}).get("storage")]
    storage = max([parse_resource_list({"requests.storage": s}, "PVC storage")["requests.storage"]
                   for s in sizes if s] or [0])
    one = Fraction(1)
    charge = {"persistentvolumeclaims": one, quotas_mod.PVC_COUNT: one, "requests.storage": storage}
    klass = spec.get("storageClassName") or ((pvc.get("metadata") or {}).get("annotations") or {}).get(
        "volume.beta.kubernetes.io/storage-class")
    if klass:
        prefix = klass + quotas_mod.STORAGE_CLASS_SUFFIX
        charge[prefix + "requests.storage"] = storage
        charge[prefix + "persistentvolumeclaims"] = one
    return charge


def object_facts(obj, kind, why, charge, names):
    """What names an object that holds usage: kind, namespace/name, its controller owner, when and by which
    client it was created (managedFields' managers, oldest first, where the object carries them), what it
    charges of names."""
    meta = obj.get("metadata") or {}
    owner = next((ref for ref in meta.get("ownerReferences") or () if isinstance(ref, dict) and ref.get("controller")),
                 None)
    managers = []
    for field in sorted((f for f in meta.get("managedFields") or () if isinstance(f, dict)),
                        key=lambda f: str(f.get("time") or "")):
        if field.get("manager") and field["manager"] not in managers:
            managers.append(str(field["manager"]))
    return {"kind": kind, "namespace": meta.get("namespace"), "name": meta.get("name"),
            "owner": "%s/%s" % (owner.get("kind"), owner.get("name")) if owner else None,
            "created": meta.get("creationTimestamp"), "managers": managers, "why": why,
            "charges": dict((n, _show(v, n)) for n, v in sorted(mask(charge, names).items()) if v)}


def _show(value, name):
    return format_resource_list({name: value}).get(name, "0")


def usage_verdict(used, target, names, charged, known, settling):
    """(lasting, waiting) of names, the resources whose status.used is above the value to restore (target):
    lasting when what the objects there charge (charged, for the names in known; status.used for the others),
    less what is going away by itself (settling), is still above it - the release restores the base all the
    same and reports it; waiting when it fits (the quota controller has not caught up, or a pod KubeVirt is
    removing still counts)."""
    lasting, waiting = [], []
    for name in names:
        now = charged.get(name, 0) if name in known else used[name]
        (lasting if now - settling.get(name, 0) > target[name] else waiting).append(name)
    return lasting, waiting


def listed(texts, sep="; ", most=8):
    """texts joined, the first `most` only (a tenant may create many objects: messages stay readable)."""
    shown = sep.join(texts[:most])
    return shown + (" and %d more" % (len(texts) - most) if len(texts) > most else "")


def object_text(item):
    """One object of an over-use or a capture, as the messages name it."""
    who = "created %s%s" % (item.get("created") or "(time unknown)",
                            " by %s" % ", ".join(item["managers"]) if item.get("managers") else "")
    ref = "%s %s/%s" % (item["kind"], item["namespace"], item["name"])
    charges = ", ".join("%s %s" % kv for kv in sorted((item.get("charges") or {}).items()))
    if item["why"] == GREW:
        grew = ", ".join("%s %s" % kv for kv in sorted((item.get("grew") or {}).items()))
        return ("VM %s came back larger than before its migration: its launcher pod %s (%s) charges %s"
                % (item["vm"], item["name"], who, grew or charges + " (its source pod is gone: not compared)"))
    if item["why"] == FOREIGN_MIGRATION:
        return ("%s (%s; not created by this run) of VM %s: its target pod %s charges %s"
                % (ref, who, item["vm"], item["pod"], charges))
    if item["why"] == CLAIMS_LAUNCHER:
        return ("%s (owner %s, %s) claims to be a launcher pod of VM %s, but KubeVirt does not name it (neither "
                "the VM's active pod nor a source or target pod of the reservation's migrations) and it charges %s"
                % (ref, item.get("owner") or "none", who, item["vm"], charges))
    if item["why"] == LEFT_OVER:
        return ("%s (%s), %s of VM %s, still charges %s although that migration is final, and nothing is removing "
                "it" % (ref, who, item["named"], item["vm"], charges))
    return "%s (owner %s, %s, after the reservation of %s) charges %s" % (
        ref, item.get("owner") or "none", who, item.get("reservation_created"), charges)


# ---------------------------------------------------------------------------
# the reservation's own migrations and source pods

@dataclass(frozen=True)
class OwnFacts:
    """A reservation's own migrations and source pods as read_own found them."""
    migrations: tuple   # (migration ref, the VirtualMachineInstanceMigration or None when gone), refs' order
    sources: tuple      # (pod ref, the pod or None) of its recorded source pods
    lingering: tuple    # (pod ref, the pod or None) of the source pods its migrations name in their status
    vmis: dict          # {(namespace, VMI name): VMI or None} of the counted pods that claim a VMI as owner

    @property
    def pods(self):
        return self.sources + self.lingering


def _own_migration_refs(entry, namespace):
    """The reservation's migrations in namespace, less those the follower gave back to the queue (KubeVirt ran
    another in their room: no longer this reservation's to wait for; the usage check still keeps a release from
    over-using the quota)."""
    given_back = (entry.refs or {}).get("displaced") or {}
    return [m for m in ref_items(entry.refs, "migrations", namespace, True)
            if not (m.get("uid") and isinstance(given_back, dict) and m["uid"] in given_back)]


def _own_migration(ref, vmim):
    """vmim when it is the migration ref names (by UID where recorded): not another object under that name (a
    tenant's); else None."""
    if vmim is None or (ref.get("uid") and (vmim.get("metadata") or {}).get("uid") != ref["uid"]):
        return None
    return vmim


def _lingering(migrations):
    """The source pods the reservation's migrations name in their status, by name only: such a pod must be older
    than its migration (a source pod is), never a pod a tenant created under that name once KubeVirt's was gone."""
    found = []
    for ref, vmim in migrations:
        vmim = _own_migration(ref, vmim)
        source = (((vmim or {}).get("status") or {}).get("migrationState") or {}).get("sourcePod")
        if source:
            found.append({"namespace": ref["namespace"], "name": source, "not_after": created_at(vmim)})
    return found


def _own_pod(ref, pod):
    """pod when it is the one ref names (by UID, or created no later than ref's bound); else None."""
    if pod is None:
        return None
    if ref.get("uid") and (pod.get("metadata") or {}).get("uid") != ref["uid"]:
        return None
    if "not_after" in ref and not _created_no_later(pod, ref["not_after"]):
        return None
    return pod


def _kubevirt_object(cluster, plural, namespace, name):
    """KubeVirt's object of that plural, or None when it is gone."""
    try:
        return cluster.get_custom(*KUBEVIRT, plural, name, namespace=namespace)
    except NotFoundError:
        return None


def _pods(cluster, refs):
    """((ref, the pod it names or None when gone), ...)."""
    found = []
    for ref in refs:
        try:
            found.append((ref, cluster.get_pod(ref["namespace"], ref["name"])))
        except NotFoundError:
            found.append((ref, None))
    return tuple(found)


def read_own(cluster, entry, namespace, now):
    """OwnFacts of a reservation's ledger entry in namespace: each of its migrations, the source pods recorded and
    named by them, and the VMI each still counted pod claims as its owner."""
    migrations = tuple((ref, _kubevirt_object(cluster, "virtualmachineinstancemigrations", ref["namespace"],
                                              ref["name"]))
                       for ref in _own_migration_refs(entry, namespace))
    sources = _pods(cluster, ref_items(entry.refs, "sourcePods", namespace, True))
    lingering = _pods(cluster, _lingering(migrations))
    vmis = {}
    for ref, pod in sources + lingering:
        pod = _own_pod(ref, pod)
        owner = launcher_owner(pod) if pod is not None and pod_counts(pod, now) else None
        key = (ref["namespace"], owner[0]) if owner else None
        if key is not None and key not in vmis:
            vmis[key] = _kubevirt_object(cluster, "virtualmachineinstances", key[0], key[1])
    return OwnFacts(migrations, sources, lingering, vmis)


def _active_launcher(ref, pod, vmis):
    """Whether pod is still its VMI's active launcher: the VM never left it (its migration was never created,
    failed or was cancelled), so it is no lingering source and must not hold the release. Whatever a target pod
    still charges is caught by the usage check."""
    owner = launcher_owner(pod)
    vmi = vmis.get((ref["namespace"], owner[0])) if owner else None
    return vmi is not None and runs_on_launcher(vmi, pod)


def own_blockers(facts, now):
    """(reasons, running): what of the reservation itself is not over yet - its migrations not final, its recorded
    source pods (and those its migrations name) still counted - and (namespace, name) of its migrations still under
    way."""
    reasons, running = [], []
    for ref, vmim in facts.migrations:
        vmim = _own_migration(ref, vmim)
        if vmim is None:
            continue
        phase = (vmim.get("status") or {}).get("phase")
        if phase not in ownership.FINAL_MIGRATION_PHASES:
            reasons.append("migration %s/%s is %s" % (ref["namespace"], ref["name"], phase or "Pending"))
            running.append((ref["namespace"], ref["name"]))
    for ref, pod in facts.pods:
        pod = _own_pod(ref, pod)
        if pod is not None and pod_counts(pod, now) and not _active_launcher(ref, pod, facts.vmis):
            reasons.append("source pod %s/%s still counts (it ends by itself once its migration completed)"
                           % (ref["namespace"], _pod_label(pod)))
    return reasons, running


# ---------------------------------------------------------------------------
# what uses the quota's namespace

@dataclass(frozen=True)
class UsageFacts:
    """What uses a quota's namespace now, as read_usage found it."""
    vmis: tuple         # the namespace's VMIs
    vmims: tuple        # its VirtualMachineInstanceMigrations
    sources: tuple      # (pod ref, the pod or None) of the reservation's recorded source pods (OwnFacts.sources)
    pods: tuple         # its pods
    pvcs: tuple = None  # its PVCs, when a PVC resource is over (None: not read, or not readable)
    kubernetes_minor: int = None  # the API server's minor release: the rules quota charges a pod by (pod_usage)
    claims: tuple = None  # its DRA ResourceClaims, when a claim resource is over (None: not read, or not readable)


def _kubevirt_list(cluster, plural, namespace):
    """KubeVirt's objects of that plural in namespace; none where KubeVirt's API is not served."""
    try:
        return tuple(cluster.list_custom(*KUBEVIRT, plural, namespace=namespace))
    except NotFoundError:
        return ()


def read_usage(cluster, own, namespace, names):
    """(UsageFacts, why the PVCs could not be read or None) of namespace, for the resources names over their
    value to restore; the recorded source pods are those read_own read (own)."""
    vmis = _kubevirt_list(cluster, "virtualmachineinstances", namespace)
    vmims = _kubevirt_list(cluster, "virtualmachineinstancemigrations", namespace)
    sources = own.sources
    pods = tuple(cluster.list_pods(namespace))
    pvcs, claims, problems = None, None, []
    if any(quotas_mod.pvc_tracks(name) for name in names):
        try:
            pvcs = tuple(list_items(cluster, api_path("v1", "persistentvolumeclaims", namespace), None,
                                    "list persistentvolumeclaims in namespace %s" % namespace))
        except ForbiddenError as err:
            problems.append(err.message)
    if any(quotas_mod.claim_tracks(name) for name in names):
        try:
            claims = tuple(list_items(cluster, custom_path(*CLAIMS, namespace=namespace), None,
                                      "list resourceclaims.resource.k8s.io in namespace %s" % namespace))
        except NotFoundError:
            claims = ()   # DRA not served: no claim exists
        except ForbiddenError as err:
            problems.append(err.message)
    return (UsageFacts(vmis, vmims, sources, pods, pvcs, getattr(cluster, "kubernetes_minor", None), claims),
            "; ".join(problems) or None)


# DRA ResourceClaims (resource.k8s.io/v1, served from Kubernetes 1.34)
CLAIMS = ("resource.k8s.io", "v1", "resourceclaims")


def claim_pod_uid(claim):
    """The UID of the pod a ResourceClaim's controller ownerReference names (the resourceclaim controller's claims
    for a pod's template entries), else None. Identity by UID only: names and labels are never used."""
    for ref in ((claim.get("metadata") or {}).get("ownerReferences") or ()):
        if isinstance(ref, dict) and ref.get("controller") and ref.get("kind") == "Pod" and ref.get("uid"):
            return ref["uid"]
    return None


def _source_charges(sources, kubernetes_minor=None):
    """{VMI uid: ResourceList} what each recorded source pod of the reservation charged while it ran (pod_usage of it
    as if still running: its spec and what the kubelet last reported of an in-place resize; the pod may have completed
    since), by the VMI uid of its controller ownerReference; pods gone or replaced are left out."""
    result = {}
    for ref, pod in sources:
        if pod is None or (ref.get("uid") and ownership.uid_of(pod) != ref["uid"]):
            continue
        owner = launcher_owner(pod)
        if owner is not None:
            running = dict(pod, status=dict(pod.get("status") or {}, phase="Running"))
            result[owner[1]] = quotas_mod.pod_usage(running, kubernetes_minor)
    return result


def usage_now(quota, ledger, entry, namespace, names, facts, now):
    """What really uses names in namespace now (facts: read_usage), for quota and its ledger: {charged: ResourceList (pods, and PVCs when a PVC name
    is over), known: the names charged counts for, settling: ResourceList of the pods KubeVirt is removing that it
    named for this reservation (its recorded source pods by UID, the source and target pods its migrations name
    in status.migrationState; named_by_kubevirt), settling_pods, objects: [object_facts] of what took the
    headroom or grew on it}. Identity by controller ownerReference, UID and KubeVirt's status, never by labels; a
    pod whose ownerReference claims a reserved VM but that is neither its active launcher nor named by KubeVirt
    for the reservation (ownerReferences are the tenant's to write) is over-use, named as such."""
    created = timeutil.parse_time(entry.created) if entry.created else None
    recorded = set()
    for item in ledger.reservations.values():
        recorded.update(ownership.ref_uids(item.refs, "migrations").values())
    vmis = dict(((vmi.get("metadata") or {}).get("name"), vmi)
                for vmi in facts.vmis)
    vmims = facts.vmims
    named = named_by_kubevirt(entry, namespace, vmims)
    foreign = {}   # VMI name -> a migration under way that no reservation of this quota recorded
    for vmim in vmims:
        if (vmim.get("status") or {}).get("phase") in ownership.FINAL_MIGRATION_PHASES:
            continue
        if ownership.uid_of(vmim) and ownership.uid_of(vmim) not in recorded:
            foreign.setdefault((vmim.get("spec") or {}).get("vmiName"), vmim)
    reserved = dict((item["uid"], item) for item in ref_items(entry.refs, "vms", namespace, True) if item.get("uid"))
    sources = _source_charges(facts.sources, facts.kubernetes_minor)
    result = {"charged": {}, "known": set(), "settling": {}, "settling_pods": [], "objects": []}
    since = entry.created

    def after_reservation(obj):
        # creation times have a second's resolution: one in the reservation's own second is not named (a pod
        # that was there before must never be called what took the headroom)
        stamp = (obj.get("metadata") or {}).get("creationTimestamp")
        return created is not None and bool(stamp) and timeutil.parse_time(stamp) > created

    result["known"].update(name for name in names if quotas_mod.pod_tracks(name))
    for pod in facts.pods:
        if not quotas_mod.quota_matches_pod(quota, quotas_mod.facts_of_pod(pod)):
            continue
        counts = pod_counts(pod, now)
        charge = quotas_mod.pod_usage(pod, facts.kubernetes_minor) if counts else {quotas_mod.POD_COUNT: Fraction(1)}
        result["charged"] = add(result["charged"], charge)
        if not counts or not any(mask(charge, names).values()):
            continue
        owner = launcher_owner(pod)
        vmi = vmis.get(owner[0]) if owner else None
        if owner and vmi is not None and ownership.uid_of(vmi) != owner[1]:
            vmi = None
        active = owner is not None and runs_on_launcher(vmi, pod)
        mine = owner is not None and owner[1] in reserved
        name = (pod.get("metadata") or {}).get("name")
        kubevirts = _kubevirt_named(pod, named) if mine and not active else None
        if kubevirts and (pod.get("metadata") or {}).get("deletionTimestamp"):
            # KubeVirt named it for this reservation and is removing it: what it charges is going away
            result["settling"] = add(result["settling"], mask(charge, names))
            result["settling_pods"].append("pod %s/%s of VM %s, %s"
                                           % (namespace, _pod_label(pod), owner[0], kubevirts))
        elif owner and not active and owner[0] in foreign:
            vmim = foreign[owner[0]]
            item = object_facts(vmim, "VirtualMachineInstanceMigration", FOREIGN_MIGRATION, charge, names)
            item.update(vm="%s/%s" % (namespace, owner[0]), pod=name)
            result["objects"].append(item)
        elif kubevirts:
            item = object_facts(pod, "Pod", LEFT_OVER, charge, names)
            item.update(vm="%s/%s" % (namespace, owner[0]), named=kubevirts)
            result["objects"].append(item)
        elif mine and not active:
            item = object_facts(pod, "Pod", CLAIMS_LAUNCHER, charge, names)
            item["vm"] = "%s/%s" % (namespace, owner[0])
            result["objects"].append(item)
        elif mine:
            if not after_reservation(pod):
                continue   # the VM never moved: what it charges is what it charged before the reservation
            before = sources.get(owner[1])
            grew = {}
            if before is not None:
                grew = dict((n, "%s -> %s" % (_show(before.get(n, 0), n), _show(v, n)))
                            for n, v in mask(charge, names).items() if v > before.get(n, 0))
            if before is None or grew:
                item = object_facts(pod, "Pod", GREW, charge, names)
                item.update(vm="%s/%s" % (namespace, owner[0]), grew=grew)
                result["objects"].append(item)
        elif after_reservation(pod):
            item = object_facts(pod, "Pod", CREATED_DURING, charge, names)
            item["reservation_created"] = since
            result["objects"].append(item)
    if facts.claims is not None and quotas_mod.quota_matches_claim(quota):
        _claims_usage(result, facts, names, reserved, namespace, now, after_reservation, since)
    pvcs = facts.pvcs
    if pvcs is not None:
        result["known"].update(name for name in names if quotas_mod.pvc_tracks(name))
        for pvc in pvcs:
            charge = pvc_usage(pvc)
            result["charged"] = add(result["charged"], charge)
            if after_reservation(pvc) and any(mask(charge, names).values()):
                item = object_facts(pvc, "PersistentVolumeClaim", CREATED_DURING, charge, names)
                item["reservation_created"] = since
                result["objects"].append(item)
    return result


def _claims_usage(result, facts, names, reserved, namespace, now, after_reservation, since):
    """usage_now's part for DRA ResourceClaims (quota_matches_claim): every claim charges its spec (claim_usage);
    the claim of a recorded source pod that ended (or is gone, or the claim is being deleted) is settling (the
    resourceclaim controller deletes it); a claim of a reserved VMI's launcher pod is the VM's; one created during
    the reservation that is neither took the headroom. Owner by ownerReference UID, never by name or label."""
    result["known"].update(name for name in names if quotas_mod.claim_tracks(name))
    pods = dict((ownership.uid_of(pod), pod) for pod in facts.pods if ownership.uid_of(pod))
    sources = dict((ref.get("uid"), ref) for ref, _pod in facts.sources or () if ref.get("uid"))
    for claim in facts.claims:
        charge = claims_mod.claim_usage(claim)
        result["charged"] = add(result["charged"], charge)
        if not any(mask(charge, names).values()):
            continue
        owner_uid = claim_pod_uid(claim)
        pod = pods.get(owner_uid) if owner_uid else None
        name = (claim.get("metadata") or {}).get("name")
        if owner_uid in sources:
            if pod is None or not pod_counts(pod, now) or (claim.get("metadata") or {}).get("deletionTimestamp"):
                result["settling"] = add(result["settling"], mask(charge, names))
                result["settling_pods"].append("ResourceClaim %s/%s of source pod %s (the resourceclaim controller "
                                               "deletes it)" % (namespace, name, sources[owner_uid].get("name")))
            continue
        owner = launcher_owner(pod) if pod is not None else None
        if owner is not None and owner[1] in reserved:
            continue   # a claim of a reserved VM's launcher pod (its target's, once it moved)
        if after_reservation(claim):
            item = object_facts(claim, "ResourceClaim", CREATED_DURING, charge, names)
            item["reservation_created"] = since
            result["objects"].append(item)


def decide(target, quota, after, used, names, own, usage):
    """(reasons, captured, overuse) of a quota whose status.used is over the value to restore (desired(after)) for
    names: own, the reservation's own blockers (own_blockers), and what uses the namespace (usage_now) give why it
    waits ([]: it can be released), the objects that hold its headroom without being its migrations (as text), and
    the lasting over-use the release reports (overuse_report) or None."""
    reasons = list(own)
    captured = [object_text(item) for item in usage["objects"] if item["why"] not in (GREW, LEFT_OVER)]
    if reasons:
        if captured:
            reasons.append("none of them the reservation's migrations, these hold its headroom: %s" % listed(captured))
        return reasons, captured, None
    restored = desired_strings(after)
    lasting, waiting = usage_verdict(used, desired(after), names, usage["charged"], usage["known"],
                                     usage["settling"])
    if lasting:
        return [], captured, overuse_report(target, quota, after, used, names, usage)
    for name in waiting:
        charged = usage["charged"].get(name, 0)
        if usage["settling"].get(name):
            reasons.append("%s used %s > %s: %s still count%s (KubeVirt, or for a claim the resourceclaim "
                           "controller, is removing what the reservation's migrations left)"
                           % (name, used_of(quota)[name], restored[name], ", ".join(usage["settling_pods"]),
                              "s" if len(usage["settling_pods"]) == 1 else ""))
        else:
            reasons.append("%s used %s > %s, but the pods, PVCs and claims there charge %s: the quota controller has "
                           "not caught up yet" % (name, used_of(quota)[name], restored[name], _show(charged, name)))
    return reasons, captured, None


def overuse_report(target, quota, after, used, names, usage):
    """The over-use of one quota as the release reports it: per resource whose status.used is above the value
    restored, the usage, what the objects there charge (where known), the base and the value restored; and the
    objects that make it (object_facts)."""
    strings = desired_strings(after)
    resources = {}
    for name in names:
        entry = {"used": used_of(quota)[name], "base": after.base.get(name), "restored": strings[name]}
        if name in usage["known"]:
            entry["charged"] = _show(usage["charged"].get(name, 0), name)
        resources[name] = entry
    return {"namespace": target[0], "quota": target[1], "resources": resources,
            "objects": [item for item in usage["objects"] if set(item.get("charges") or ()) & set(names)]}


def overuse_text(reservation_id, report, fence_installed):
    """The warning of a release that restored a quota below its usage: the numbers, what makes it, what ends it.
    Never "raise the base" (that would hand the tenant what it took) nor "delete the VM's pod"."""
    where = "%s/%s" % (report["namespace"], report["quota"])
    numbers = ", ".join("%s used %s > %s%s" % (name, r["used"], r["restored"],
                                               "" if r["restored"] == r["base"] else " (base %s + other reservations)"
                                               % r["base"])
                        for name, r in sorted(report["resources"].items()))
    objects = report["objects"]
    made = listed([object_text(item) for item in objects]) or \
        "no object created during the reservation (pods that were there before use more now)"
    fixes = []
    removable = ["%s %s/%s" % (o["kind"], o["namespace"], o["name"]) for o in objects
                 if o["why"] not in (GREW, LEFT_OVER)]
    if removable:
        fixes.append("remove %s (it took the room reserved for the migrations), and %s the headroom fence "
                     "(ansible-playbook kvquota.maintenance.install) so that only the run's own migrations use a "
                     "reservation"
                     % (listed(removable, ", "), "extend" if fence_installed else "install"))
    grown = [o["vm"] for o in objects if o["why"] == GREW]
    if grown:
        fixes.append("VM %s uses more than before its migration: it keeps running, and its namespace is over its "
                     "base until it is back within it" % ", ".join(grown))
    left = ["%s/%s" % (o["namespace"], o["name"]) for o in objects if o["why"] == LEFT_OVER]
    if left:
        fixes.append("pod %s, which a final migration left, is KubeVirt's to remove: look at virt-controller's "
                     "log and the migration's status" % ", ".join(left))
    held = report.get("held")
    tail = ""
    if held:
        tail = (" The quota's owner refuses a value below usage (Harvester's namespace webhook): %s written at usage, "
                "%s kept in the ledger as reservation '%s' until usage drops; the reaper (kvquota_release "
                "expired: true) restores the base then"
                % (", ".join(sorted(held)), ", ".join("%s=%s" % kv for kv in sorted(held.items())),
                   report.get("held_as")))
    return ("reservation '%s' released: %s is back at its base although its namespace uses more than that (%s); "
            "made by: %s. Kubernetes keeps a quota below its usage: new pods in %s are refused until usage is within "
            "it again.%s%s" % (reservation_id, where, numbers, made, report["namespace"], tail,
                               " To end it: %s." % "; ".join(fixes) if fixes else ""))
