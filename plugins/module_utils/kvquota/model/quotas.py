# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which ResourceQuotas a migration target pod is charged against, by how much, and the plan.

Matching follows the apiserver's pod and PVC quota evaluators
(k8s.io/kubernetes pkg/quota/v1/evaluator/core, k8s.io/apiserver pkg/quota/v1/generic):

- a quota applies to a pod when EVERY scope of the quota (spec.scopes, each read as an
  Exists selector, plus spec.scopeSelector.matchExpressions) matches the pod, and the
  quota's hard list names at least one resource the pod evaluator tracks;
- Terminating / NotTerminating: the pod has (not) activeDeadlineSeconds >= 0;
  BestEffort / NotBestEffort: the pod's QoS class; CrossNamespacePodAffinity: a pod
  (anti-)affinity term lists namespaces or has a namespaceSelector; PriorityClass: a
  label selector on the single label PriorityClass=<spec.priorityClassName> (absent
  when the pod has none), so In/NotIn/Exists/DoesNotExist behave as for labels. For
  the other scopes the operator is not looked at;
- a pod's usage: pods=1 and count/pods=1; cpu/requests.cpu, memory/requests.memory,
  ephemeral-storage/requests.ephemeral-storage from the requests (the bare name is an
  alias of the requests.* name); limits.* from the limits; hugepages-<size> and
  requests.hugepages-<size> from the hugepages requests; requests.<name> for extended
  (non-native) resources. A terminal pod (Succeeded/Failed) is charged count/pods only;
- an existing pod's requests and limits follow in-place resize (UseStatusResources):
  while a resize is pending the pod is charged the largest of its desired spec and what
  the kubelet allocated and actuated (status.containerStatuses), the latter two only when
  the resize is Infeasible; 1.33 to 1.36 take that largest per container, 1.37 over the
  pod's sums (pod_requests_limits);
- a PVC is charged persistentvolumeclaims, count/persistentvolumeclaims and
  requests.storage (plus the per-storage-class names); the pod scopes never match it;
- a DRA ResourceClaim (model/claims.py) is charged count/resourceclaims.resource.k8s.io and
  <class>.deviceclass.resource.k8s.io/devices; its evaluator matches no scope, so only a quota
  without scopes charges it;
- admission masks the usage by the names in the quota's hard list and refuses when a
  name with a non-zero request would end above hard.

Everything here is pure: quotas, pods and VMIs are plain dicts (API JSON), resource
lists are dict[str, Fraction]; nothing is mutated.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from dataclasses import dataclass
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import (
    SELECTOR_OPERATORS,
    condition,
    meta,
    requirement_matches,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import (
    BINARY_SI,
    ceil_to,
    format_quantity,
    parse_quantity,
    quantity_format,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import (
    add,
    default_format,
    maximum,
    total,
)

# ---------------------------------------------------------------------------
# Resource names
# ---------------------------------------------------------------------------

POD_COUNT = "count/pods"
# The pod phases after which a pod's containers never run again (the quota controller then charges count/pods only).
FINISHED_POD_PHASES = ("Succeeded", "Failed")
PVC_COUNT = "count/persistentvolumeclaims"

# The fixed names the pod evaluator tracks.
POD_RESOURCE_NAMES = frozenset([
    POD_COUNT, "pods",
    "cpu", "memory", "ephemeral-storage",
    "requests.cpu", "requests.memory", "requests.ephemeral-storage",
    "limits.cpu", "limits.memory", "limits.ephemeral-storage",
])
# The fixed names the PVC evaluator tracks (plus <class>.storageclass.storage.k8s.io/<one of these>).
PVC_RESOURCE_NAMES = frozenset(["persistentvolumeclaims", "requests.storage", PVC_COUNT])
STORAGE_CLASS_SUFFIX = ".storageclass.storage.k8s.io/"

# The bare name is charged exactly what the requests.* name is charged.
REQUEST_ALIASES = {"cpu": "requests.cpu", "memory": "requests.memory",
                   "ephemeral-storage": "requests.ephemeral-storage"}

POD_SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort",
              "PriorityClass", "CrossNamespacePodAffinity")
PVC_SCOPES = ("VolumeAttributesClass",)

# The names the ResourceClaim evaluator tracks (k8s pkg/quota/v1/evaluator/core/resource_claims.go; the
# DRAExtendedResource names requests.deviceclass.resource.kubernetes.io/<class> are not modelled).
CLAIM_COUNT = "count/resourceclaims.resource.k8s.io"
DEVICE_CLASS_SUFFIX = ".deviceclass.resource.k8s.io/devices"

_CPU_NAMES = frozenset(["cpu", "requests.cpu", "limits.cpu"])


def is_native_resource(name):
    """Whether name is a native resource name (no domain, or a kubernetes.io/ one)."""
    return "/" not in name or "kubernetes.io/" in name


def pod_tracks(name):
    """Whether the pod evaluator tracks quota resource name (its MatchingResources for one name)."""
    if name in POD_RESOURCE_NAMES:
        return True
    if name.startswith("hugepages-") or name.startswith("requests.hugepages-"):
        return True
    return name.startswith("requests.") and not is_native_resource(name)


def pvc_tracks(name):
    """Whether the PVC evaluator tracks quota resource name."""
    if name in PVC_RESOURCE_NAMES:
        return True
    return (name.endswith(STORAGE_CLASS_SUFFIX + "requests.storage")
            or name.endswith(STORAGE_CLASS_SUFFIX + "persistentvolumeclaims"))


def claim_tracks(name):
    """Whether the ResourceClaim evaluator tracks quota resource name (of those kvquota charges)."""
    return name == CLAIM_COUNT or (name.endswith(DEVICE_CLASS_SUFFIX) and len(name) > len(DEVICE_CLASS_SUFFIX))


def is_claim_charge_name(name):
    """Whether a charge entry comes from a ResourceClaim (not from a pod or a PVC)."""
    return claim_tracks(name)


def quota_matches_claim(quota):
    """Whether admission charges a ResourceClaim against quota: the quota tracks a claim name and has no scope
    at all (the claim evaluator matches none)."""
    return bool(tracked_names(quota, "claim")) and not scope_selectors(quota)


def is_pvc_charge_name(name):
    """Whether a charge entry comes from a PVC (not from a pod)."""
    return pvc_tracks(name)


def hard_names(quota):
    """The resource names a quota limits: spec.hard, completed by status.hard."""
    names = set((quota.get("spec") or {}).get("hard") or {})
    names.update((quota.get("status") or {}).get("hard") or {})
    return frozenset(names)


def tracked_names(quota, kind="pod"):
    """The names of quota's hard list that the pod (kind='pod'), PVC (kind='pvc') or ResourceClaim (kind='claim')
    evaluator tracks."""
    test = {"pod": pod_tracks, "pvc": pvc_tracks, "claim": claim_tracks}[kind]
    return frozenset(name for name in hard_names(quota) if test(name))


def namespace_tracked_names(quotas):
    """Every resource name any quota of a namespace limits (what sizing's quota_tracks wants)."""
    names = set()
    for quota in quotas:
        names.update(hard_names(quota))
    return frozenset(names)


# ---------------------------------------------------------------------------
# Reading quotas
# ---------------------------------------------------------------------------

def _parse_list(mapping, what):
    """A ResourceList (dict of Fractions) from an API mapping of quantity strings."""
    result = {}
    for name, value in (mapping or {}).items():
        try:
            result[name] = parse_quantity(value, name)
        except InputError as err:
            raise InputError("%s: %s" % (what, err.message), err.fix)
    return result


def quota_key(quota):
    """'namespace/name' of a quota."""
    quota_meta = meta(quota)
    return "%s/%s" % (quota_meta.get("namespace", ""), quota_meta.get("name", ""))


def quota_hard(quota):
    """The limits of a quota: spec.hard (what an operator edits), else status.hard."""
    spec = (quota.get("spec") or {}).get("hard")
    if spec:
        return _parse_list(spec, "spec.hard of quota %s" % quota_key(quota))
    return _parse_list((quota.get("status") or {}).get("hard"), "status.hard of quota %s" % quota_key(quota))


def quota_enforced_hard(quota):
    """status.hard: what admission checks right now (empty until the quota controller synced it)."""
    return _parse_list((quota.get("status") or {}).get("hard"), "status.hard of quota %s" % quota_key(quota))


def quota_used(quota):
    """status.used of a quota, with a zero for every limited name the controller did not fill yet."""
    used = _parse_list((quota.get("status") or {}).get("used"), "status.used of quota %s" % quota_key(quota))
    for name in quota_hard(quota):
        used.setdefault(name, Fraction(0))
    return used


def quota_formats(quota):
    """The quantity format of each limit as written in the quota (for printing fixes alike)."""
    result = {}
    for source in ((quota.get("status") or {}).get("hard") or {}, (quota.get("spec") or {}).get("hard") or {}):
        for name, text in source.items():
            try:
                result[name] = quantity_format(text if isinstance(text, str) else str(text))
            except InputError:
                continue
    return result


def scope_selectors(quota):
    """Every scope requirement of a quota as (scopeName, operator, values)."""
    spec = quota.get("spec") or {}
    result = [(scope, "Exists", ()) for scope in spec.get("scopes") or ()]
    for expr in (spec.get("scopeSelector") or {}).get("matchExpressions") or ():
        result.append((expr.get("scopeName"), expr.get("operator") or "Exists", tuple(expr.get("values") or ())))
    return result


# ---------------------------------------------------------------------------
# Pod facts and scope matching
# ---------------------------------------------------------------------------

def pod_facts(priority_class_name=None, terminating=False, best_effort=False,
              cross_namespace_pod_affinity=False):
    """The four properties of a pod that quota scopes look at, as a plain dict."""
    return {"priority_class_name": priority_class_name or None,
            "terminating": bool(terminating),
            "best_effort": bool(best_effort),
            "cross_namespace_pod_affinity": bool(cross_namespace_pod_affinity)}


def _cross_namespace_terms(terms, weighted):
    """Whether any affinity term lists namespaces or carries a namespaceSelector (even {})."""
    for term in terms or ():
        if weighted:
            term = term.get("podAffinityTerm") or {}
        if term.get("namespaces") or term.get("namespaceSelector") is not None:
            return True
    return False


def uses_cross_namespace_pod_affinity(affinity):
    """Whether a pod (or VMI) affinity has a cross-namespace pod (anti-)affinity term."""
    for key in ("podAffinity", "podAntiAffinity"):
        part = (affinity or {}).get(key) or {}
        if _cross_namespace_terms(part.get("requiredDuringSchedulingIgnoredDuringExecution"), False):
            return True
        if _cross_namespace_terms(part.get("preferredDuringSchedulingIgnoredDuringExecution"), True):
            return True
    return False


def _is_best_effort(spec):
    """QoS BestEffort: no container (nor the pod) requests or limits cpu or memory."""
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or ():
            res = container.get("resources") or {}
            for part in ("requests", "limits"):
                if any(name in ("cpu", "memory") for name in res.get(part) or {}):
                    return False
    res = spec.get("resources") or {}
    for part in ("requests", "limits"):
        if any(name in ("cpu", "memory") for name in res.get(part) or {}):
            return False
    return True


def facts_of_pod(pod):
    """pod_facts of an existing pod manifest."""
    spec = pod.get("spec") or {}
    deadline = spec.get("activeDeadlineSeconds")
    return pod_facts(priority_class_name=spec.get("priorityClassName"),
                     terminating=deadline is not None and deadline >= 0,
                     best_effort=_is_best_effort(spec),
                     cross_namespace_pod_affinity=uses_cross_namespace_pod_affinity(spec.get("affinity")))


def launcher_pod_facts(vmi, default_priority_class=None):
    """pod_facts of the virt-launcher pod KubeVirt renders for a VMI (or a VM's template).

    The launcher pod has no activeDeadlineSeconds, always requests cpu and memory (never
    BestEffort), copies the VMI's priorityClassName and affinity. A pod without a
    priority class gets the cluster's globalDefault PriorityClass at admission (the
    Priority admission plugin runs before quota), so pass that as default_priority_class.
    """
    if (vmi.get("kind") == "VirtualMachine") or ("template" in (vmi.get("spec") or {})
                                                 and "domain" not in (vmi.get("spec") or {})):
        spec = ((vmi.get("spec") or {}).get("template") or {}).get("spec") or {}
    else:
        spec = vmi.get("spec") or {}
    return pod_facts(priority_class_name=spec.get("priorityClassName") or default_priority_class,
                     terminating=False, best_effort=False,
                     cross_namespace_pod_affinity=uses_cross_namespace_pod_affinity(spec.get("affinity")))


def _label_selector_matches(operator, values, value):
    """A one-key scope selector requirement against a value (None = absent)."""
    matches = requirement_matches(operator, values, value)
    if matches is None:
        raise InputError("unknown scope selector operator '%s'" % operator,
                         "use one of %s" % ", ".join(SELECTOR_OPERATORS))
    return matches


def pod_matches_scope(scope, operator, values, facts):
    """Whether a pod with these facts matches one scope requirement of a quota."""
    if scope == "Terminating":
        return facts["terminating"]
    if scope == "NotTerminating":
        return not facts["terminating"]
    if scope == "BestEffort":
        return facts["best_effort"]
    if scope == "NotBestEffort":
        return not facts["best_effort"]
    if scope == "PriorityClass":
        return _label_selector_matches(operator, values, facts.get("priority_class_name"))
    if scope == "CrossNamespacePodAffinity":
        return facts["cross_namespace_pod_affinity"]
    return False


def pvc_matches_scope(scope, operator, values, volume_attributes_class=None):
    """Whether a PVC matches one scope requirement (only VolumeAttributesClass can match)."""
    if scope == "VolumeAttributesClass":
        return _label_selector_matches(operator, values, volume_attributes_class)
    return False


def quota_scope_mismatch(quota, facts):
    """None when every scope of the quota matches the pod, else the first requirement that does not."""
    for scope, operator, values in scope_selectors(quota):
        if not pod_matches_scope(scope, operator, values, facts):
            if values:
                return "%s %s (%s)" % (scope, operator, ", ".join(values))
            return scope
    return None


def quota_matches_pod(quota, facts):
    """Whether admission charges a pod with these facts against quota."""
    return bool(tracked_names(quota, "pod")) and quota_scope_mismatch(quota, facts) is None


def quota_matches_pvc(quota, volume_attributes_class=None):
    """Whether admission charges a (KubeVirt backend-storage) PVC against quota."""
    if not tracked_names(quota, "pvc"):
        return False
    return all(pvc_matches_scope(scope, op, values, volume_attributes_class)
               for scope, op, values in scope_selectors(quota))


def why_not_matching(quota, facts):
    """A short reason a quota is not charged for the pod ('' when it is)."""
    mismatch = quota_scope_mismatch(quota, facts)
    if mismatch:
        return "scope %s does not match a virt-launcher pod" % mismatch
    if not tracked_names(quota, "pod"):
        return "limits no pod resource"
    return ""


# ---------------------------------------------------------------------------
# Usage and charges
# ---------------------------------------------------------------------------

def expand_aliases(charge):
    """A pod charge with the alias names filled in: cpu=requests.cpu, memory=requests.memory,
    ephemeral-storage=requests.ephemeral-storage, hugepages-X=requests.hugepages-X."""
    result = dict(charge)
    for bare, full in REQUEST_ALIASES.items():
        if full in charge and bare not in charge:
            result[bare] = charge[full]
        elif bare in charge and full not in charge:
            result[full] = charge[bare]
    for name, value in charge.items():
        if name.startswith("requests.hugepages-"):
            result.setdefault(name[len("requests."):], value)
        elif name.startswith("hugepages-"):
            result.setdefault("requests." + name, value)
    return result


_PARSED = {}


def _amount(value, label):
    """parse_quantity, remembered for quantity strings (pods repeat the same few strings)."""
    if isinstance(value, Fraction):
        return value
    if not isinstance(value, str):
        return parse_quantity(value, label)
    found = _PARSED.get(value)
    if found is None:
        found = parse_quantity(value, label)
        if len(_PARSED) < 100000:
            _PARSED[value] = found
    return found


def _add_into(acc, resources):
    """acc += resources (Fractions; None adds nothing), in place on a private accumulator."""
    for name, value in (resources or {}).items():
        acc[name] = acc.get(name, Fraction(0)) + value


def _larger_into(acc, resources):
    """acc = max(acc, resources) per name, in place on a private accumulator; a name acc lacks is taken even at zero,
    as Kubernetes' maxResourceList does (a zero limit still shows in the usage)."""
    for name, value in (resources or {}).items():
        if name not in acc or value > acc[name]:
            acc[name] = value


def pod_resources(containers, init_containers, add, larger):
    """PodRequests / PodLimits (k8s.io/component-helpers/resource), the one implementation of it here: the app
    containers and the sidecars (restartable init containers) summed, against the largest of each plain init
    container plus the sidecars started before it. containers: ResourceLists; init_containers: (ResourceList,
    restartable) pairs in pod order; add(total, rl) sums rl into total and larger(total, rl) keeps the larger value
    per name, so the values may be Fractions (a pod manifest's usage) or quantities with their formats (sizing)."""
    total = {}
    for resources in containers:
        add(total, resources)
    sidecars, init_peak = {}, {}
    for resources, restartable in init_containers:
        if restartable:
            add(sidecars, resources)
            larger(init_peak, sidecars)
        else:
            step = {}
            add(step, resources)   # its own first, then the sidecars: Quantity.Add keeps the first addend's format
            add(step, sidecars)
            larger(init_peak, step)
    add(total, sidecars)
    larger(total, init_peak)
    return total


# ---------------------------------------------------------------------------
# What quota charges for an existing pod: its spec, and what the kubelet reports of in-place resizes
# ---------------------------------------------------------------------------

# Since in-place pod resize (InPlacePodVerticalScaling: beta and on in 1.33, GA in 1.35) the pod evaluator reads the
# kubelet's status.containerStatuses[].allocatedResources and .resources besides the spec (pods.go PodUsageFunc,
# UseStatusResources), so that a pod is charged what it may hold until a resize is done. From this minor release on it
# takes the largest of the pod's summed desired, allocated and actual resources; 1.33 to 1.36 sum the largest of each
# container (k8s.io/component-helpers resource/helpers.go AggregateContainerRequests/Limits, changed in v0.37 "to
# prevent resource inflation for resize").
MAX_OF_SUMS_MINOR = 37
# The pod condition by which the kubelet says a resize waits, and the reason that says it never will be done.
RESIZE_PENDING_CONDITION = "PodResizePending"
RESIZE_INFEASIBLE = "Infeasible"
_SIDES = ("requests", "limits")


def is_pod_level_resource(name):
    """Whether spec.resources (pod-level resources) may set name, which then replaces the containers' value:
    cpu, memory and hugepages-<size> (IsSupportedPodLevelResource)."""
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def pod_resize_infeasible(pod):
    """Whether the kubelet found a pending resize of the pod impossible on its node (the first PodResizePending
    condition has reason Infeasible: IsPodResizeInfeasible). Quota then charges what the kubelet allocated and
    actuated, not a desired spec the pod will not get."""
    pending = condition(pod, RESIZE_PENDING_CONDITION)
    return pending is not None and pending.get("reason") == RESIZE_INFEASIBLE


def _parsed(mapping, where):
    """A ResourceList (Fractions) of an API mapping of quantities; None when the field is absent (Kubernetes tells an
    absent list from an empty one: only a reported list replaces the spec)."""
    if mapping is None:
        return None
    return dict((name, _amount(value, "%s %s" % (where, name))) for name, value in mapping.items())


def _pod_label(pod):
    """'pod namespace/name' for errors ('pod' when it has no name)."""
    pod_meta = meta(pod)
    return "pod %s/%s" % (pod_meta.get("namespace", ""), pod_meta["name"]) if pod_meta.get("name") else "pod"


def _pod_containers(pod, label):
    """The pod's containers as quota reads them, app containers first, then init containers in pod order: dicts of
    spec ({requests, limits}), init, restartable (a sidecar: restartPolicy Always) and reported, the kubelet's status
    of the container by name (None: none), as allocated (allocatedResources) and actual (resources as {requests,
    limits}; None when the kubelet reported no resources). Quantities are parsed here, errors name the field."""
    status = pod.get("status") or {}
    reported = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for entry in status.get(key) or ():
            name = entry.get("name", "")
            if name in reported:
                continue
            where = "%s status.%s[%s]" % (label, key, name)
            actual = entry.get("resources")
            if actual is not None:
                actual = dict((side, _parsed(actual.get(side), "%s.resources.%s" % (where, side))) for side in _SIDES)
            reported[name] = {"allocated": _parsed(entry.get("allocatedResources"), where + ".allocatedResources"),
                              "actual": actual}
    spec = pod.get("spec") or {}
    result = []
    for key in ("containers", "initContainers"):
        for entry in spec.get(key) or ():
            name = entry.get("name", "")
            resources = entry.get("resources") or {}
            where = "%s spec.%s[%s].resources" % (label, key, name)
            result.append({"spec": dict((side, _parsed(resources.get(side), "%s.%s" % (where, side))) for side in _SIDES),
                           "init": key == "initContainers",
                           "restartable": key == "initContainers" and entry.get("restartPolicy") == "Always",
                           "reported": reported.get(name)})
    return result


def _largest(lists):
    """The largest value per name over ResourceLists (None: an absent list, skipped), Kubernetes' max(a, b...)."""
    result = {}
    for resources in lists:
        _larger_into(result, resources)
    return result


def _summed(containers, pick):
    """pod_resources of the list pick(container) gives for each container (None: nothing)."""
    return pod_resources([pick(c) for c in containers if not c["init"]],
                         [(pick(c), c["restartable"]) for c in containers if c["init"]], _add_into, _larger_into)


def _each_container_largest(container, side, infeasible):
    """One container's requests or limits (side) on 1.33 to 1.36 (determineContainerReqs/Limits): for an app
    container or a sidecar whose status carries .resources, the largest of the desired spec, the actual and (requests
    only) the allocated resources, the spec left out while the resize is Infeasible; otherwise the spec. A plain init
    container is never resized: its spec."""
    reported = container["reported"]
    if reported is None or reported["actual"] is None or (container["init"] and not container["restartable"]):
        return container["spec"][side]
    held = [reported["actual"][side], reported["allocated"] if side == "requests" else None]
    return _largest(held if infeasible else [container["spec"][side]] + held)


def _allocated(container, infeasible):
    """A container's allocated requests on 1.37 (containerAllocatedRequests): status allocatedResources; without it
    the desired spec, or nothing while the resize is Infeasible (the spec is not what the pod holds)."""
    reported = container["reported"]
    if reported is not None and reported["allocated"] is not None:
        return reported["allocated"]
    return None if infeasible else container["spec"]["requests"]


def _actual(container, side, infeasible):
    """A container's actual requests or limits (side) on 1.37 (containerActuatedRequests/Limits): status
    resources.<side>; for requests without it the allocated ones; then the desired spec, or nothing while the resize
    is Infeasible."""
    reported = container["reported"]
    if reported is not None:
        if reported["actual"] is not None and reported["actual"][side] is not None:
            return reported["actual"][side]
        if side == "requests" and reported["allocated"] is not None:
            return reported["allocated"]
    return None if infeasible else container["spec"][side]


def _containers_side(containers, side, infeasible, max_of_sums):
    """The containers' part of the pod's requests or limits (side), with what the kubelet reports: on 1.37
    (max_of_sums) the largest of the summed desired, actual and (requests) allocated resources, the desired left out
    while the resize is Infeasible; before, the sum of each container's largest."""
    if not max_of_sums:
        return _summed(containers, lambda c: _each_container_largest(c, side, infeasible))
    held = [_summed(containers, lambda c: _actual(c, side, infeasible))]
    if side == "requests":
        held.append(_summed(containers, lambda c: _allocated(c, infeasible)))
    if infeasible:
        return _largest(held)
    return _largest([_summed(containers, lambda c: c["spec"][side])] + held)


def pod_requests_limits(pod, kubernetes_minor=None):
    """(requests, limits) of an existing pod as the pod quota evaluator computes them on Kubernetes
    1.<kubernetes_minor> (PodRequests/PodLimits with UseStatusResources on; None: the rule of 1.33 to 1.36).

    The containers' part (_containers_side) takes in-place resizes into account: while one is pending the pod is
    charged the most it may hold. A pod-level spec.resources value replaces the containers' for the names it may set
    (the desired value: the evaluator does not ask for the pod-level status, InPlacePodLevelResourcesVerticalScaling,
    up to 1.37.2 at least). spec.overhead is added to the requests, and to a
    limit only where the pod has that limit and it is not zero.
    """
    if kubernetes_minor is not None and (isinstance(kubernetes_minor, bool) or not isinstance(kubernetes_minor, int)):
        raise InputError("kubernetes_minor %r is not a Kubernetes minor release number" % (kubernetes_minor,),
                         "pass the minor release as an integer (37 for Kubernetes 1.37), or None when it is not known")
    max_of_sums = kubernetes_minor is not None and kubernetes_minor >= MAX_OF_SUMS_MINOR
    infeasible = pod_resize_infeasible(pod)
    label = _pod_label(pod)
    containers = _pod_containers(pod, label)
    spec = pod.get("spec") or {}
    pod_level = spec.get("resources") or {}
    overhead = _parsed(spec.get("overhead"), label + " spec.overhead") or {}
    result = []
    for side in _SIDES:
        values = _containers_side(containers, side, infeasible, max_of_sums)
        for name, value in (_parsed(pod_level.get(side), "%s spec.resources.%s" % (label, side)) or {}).items():
            if is_pod_level_resource(name):
                values[name] = value
        for name, value in overhead.items():
            if side == "requests":
                values[name] = values.get(name, Fraction(0)) + value
            elif values.get(name):
                values[name] = values[name] + value
        result.append(values)
    return result[0], result[1]


def usage_from_requests_limits(requests, limits, one=Fraction(1)):
    """The quota usage of a live (non-terminal) pod with these pod-level requests and limits (the pod
    evaluator's rule; values are copied as given, so any quantity type works; one: the value of a count)."""
    result = {"pods": one, POD_COUNT: one}
    for base in ("cpu", "memory", "ephemeral-storage"):
        if base in requests:
            result[base] = requests[base]
            result["requests." + base] = requests[base]
        if base in limits:
            result["limits." + base] = limits[base]
    for name, value in requests.items():
        if name.startswith("hugepages-"):
            result[name] = value
            result["requests." + name] = value
        elif not is_native_resource(name) and not name.startswith("requests."):
            result["requests." + name] = value
    return result


def pod_is_terminal(pod):
    """Succeeded or Failed: such a pod counts only against count/pods."""
    return ((pod.get("status") or {}).get("phase")) in FINISHED_POD_PHASES


def pod_usage(pod, kubernetes_minor=None):
    """What quota charges for an existing pod manifest (the pod evaluator's Usage) on Kubernetes 1.<kubernetes_minor>.

    Its spec and, since in-place resize, what the kubelet reports of it (pod_requests_limits): a tenant who resizes a
    pod is charged the most the pod may hold until the resize is done. 1.33 to 1.36 and 1.37 differ where several
    containers resize at once, where the status lacks .resources, for plain init containers' status and for an
    Infeasible resize of a container the kubelet reports nothing for; None (the release is not known here) follows
    1.33 to 1.36.
    """
    if pod_is_terminal(pod):
        return {POD_COUNT: Fraction(1)}
    requests, limits = pod_requests_limits(pod, kubernetes_minor)
    return usage_from_requests_limits(requests, limits)


def released_by_completion(usage):
    """What a pod's usage stops charging when it reaches Succeeded (all but count/pods)."""
    return dict((name, value) for name, value in usage.items() if name != POD_COUNT)


class QuotaMatcher(object):
    """What one quota charges of migration charges, with its scopes and names read once.

    matcher.part(charge, facts) == charged_part(quota, charge, facts); matching results are
    remembered per set of pod facts, so planning thousands of VMs stays cheap.
    """

    def __init__(self, quota, volume_attributes_class=None):
        self.quota = quota
        self.pod_names = tracked_names(quota, "pod")
        self.pvc_names = tracked_names(quota, "pvc")
        self.pvc_match = bool(self.pvc_names) and quota_matches_pvc(quota, volume_attributes_class)
        self.claim_names = tracked_names(quota, "claim")
        self.claim_match = bool(self.claim_names) and quota_matches_claim(quota)
        self._pod_match = {}

    def matches_pod(self, facts):
        """Whether the quota charges a pod with these facts."""
        key = (facts.get("priority_class_name"), facts.get("terminating"), facts.get("best_effort"),
               facts.get("cross_namespace_pod_affinity"))
        if key not in self._pod_match:
            self._pod_match[key] = bool(self.pod_names) and quota_scope_mismatch(self.quota, facts) is None
        return self._pod_match[key]

    def part(self, charge, facts):
        """The part of charge admission charges against the quota (see charged_part)."""
        result = {}
        pod_match = None
        for name, value in charge.items():
            if is_pvc_charge_name(name):
                if self.pvc_match and name in self.pvc_names:
                    result[name] = value
                continue
            if is_claim_charge_name(name):
                if self.claim_match and name in self.claim_names:
                    result[name] = value
                continue
            if pod_match is None:
                pod_match = self.matches_pod(facts)
            if not pod_match:
                continue
            if name in self.pod_names:
                result[name] = value
            alias = _alias_of(name)
            if alias and alias in self.pod_names and alias not in charge:
                result[alias] = value
        return result


def _alias_of(name):
    """The other spelling of a request name: requests.cpu <-> cpu, hugepages-X <-> requests.hugepages-X."""
    if name in REQUEST_ALIASES:
        return REQUEST_ALIASES[name]
    for bare, full in REQUEST_ALIASES.items():
        if name == full:
            return bare
    if name.startswith("requests.hugepages-"):
        return name[len("requests."):]
    if name.startswith("hugepages-"):
        return "requests." + name
    return None


def charged_part(quota, charge, facts, volume_attributes_class=None):
    """The part of a migration charge that admission charges against quota.

    The pod part (aliases expanded) when the quota's scopes match the pod, the PVC part
    when they match a PVC, the ResourceClaim part when the quota has no scope, each masked
    by the names the quota limits.
    """
    return QuotaMatcher(quota, volume_attributes_class).part(charge, facts)


# ---------------------------------------------------------------------------
# Headroom arithmetic (pure, on ResourceLists)
# ---------------------------------------------------------------------------

def _get(rl, name):
    return rl.get(name, Fraction(0))


def positive(rl):
    """The names with a positive value."""
    return dict((name, value) for name, value in rl.items() if value > 0)


def free_room(used, hard):
    """hard - used for every limited name (negative when usage is above hard)."""
    return dict((name, hard[name] - _get(used, name)) for name in hard)


def over_hard(used, hard):
    """How far usage is above hard, for the names where it is."""
    return positive(dict((name, _get(used, name) - hard[name]) for name in hard))


def headroom_needed(used, hard, charge):
    """How much hard must grow for admission to accept charge on top of used.

    Admission checks only names with a non-zero request, so a name the charge does not
    touch needs nothing even when its usage is above hard.
    """
    result = {}
    for name, value in charge.items():
        if value > 0 and name in hard:
            short = _get(used, name) + value - hard[name]
            if short > 0:
                result[name] = short
    return result


def growth_of(target_charge, source_usage, source_deleted=False):
    """How a namespace's usage changes once a migration is done and its source pod completed.

    The target pod stays (its whole charge); the source pod stops counting, except in
    count/pods while the completed pod object still exists (source_deleted=False: nothing
    deletes it, as KubeVirt leaves it Completed). source_usage None means the source pod is
    not known: it is taken to be as large as the target.
    """
    if source_usage is None:
        if source_deleted or POD_COUNT not in target_charge:
            return {}
        return {POD_COUNT: _get(target_charge, POD_COUNT)}
    released = source_usage if source_deleted else released_by_completion(source_usage)
    result = dict(target_charge)
    for name, value in released.items():
        if name in result or name != POD_COUNT:
            result[name] = result.get(name, Fraction(0)) - value
    return dict((name, value) for name, value in result.items() if value != 0)


# ---------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------

def vm_key(vm):
    """'namespace/name' of a VM entry."""
    return "%s/%s" % (vm["namespace"], vm["name"])


def batch_index(batches):
    """{VM key: index of its batch}."""
    result = {}
    for index, batch in enumerate(batches):
        for key in batch:
            result[key] = index
    return result


@dataclass(frozen=True)
class BatchNeed:
    """One batch of a quota's headroom plan that holds a VM the quota charges."""

    index: int          # the batch's place in the schedule (0-based)
    vms: tuple          # keys ('namespace/name') of the batch's VMs this quota charges, in schedule order
    charge: dict        # what their migrations charge the quota
    used_before: dict   # the quota's usage when the batch starts (earlier batches' growth included)
    needed: dict        # the headroom the batch lacks (headroom_needed)


@dataclass(frozen=True)
class HeadroomPlan:
    """The headroom plan of one quota for a batch schedule (plan_quota); every amount exact (Fractions)."""

    hard: dict                  # spec.hard, as planned against
    used: dict                  # status.used now
    charges: dict               # {vm key: what its migration charges the quota}
    growths: dict               # {vm key: what stays charged after its migration (target above source)}
    charge_total: dict          # every VM's charge together
    batches: tuple              # BatchNeed per batch holding a VM the quota charges
    needed: dict                # the most any batch lacks
    needed_all_at_once: dict    # what one batch of every VM would lack
    over_hard: dict             # names the VMs charge where usage is above hard now
    over_hard_untouched: dict   # names above hard now that no VM charges
    growth: dict                # every VM's growth together
    used_after: dict            # usage after every migration (tracked names)
    over_after: dict            # names above hard after every migration


def plan_quota(quota, vms, batches, batch_of=None, source_pods_deleted=False):
    """The headroom plan of one quota for a batch schedule.

    vms: list of dicts with namespace, name, charge (migration charge: target pod + extra
    pods + PVCs), facts (pod_facts of the launcher), and optionally pod_charge (target
    pod alone) and source (usage of the source pod, None when unknown).
    batches: list of lists of VM keys ('namespace/name') in migration order; batch_of:
    batch_index(batches), when the caller already has it. source_pods_deleted: the
    completed source pods are deleted after each batch (else they keep counting in
    count/pods).

    Returns a HeadroomPlan (ResourceLists of Fractions).
    """
    hard = quota_hard(quota)
    used = quota_used(quota)
    matcher = QuotaMatcher(quota)
    charges = {}
    growths = {}
    for vm in vms:
        key = vm_key(vm)
        part = matcher.part(vm["charge"], vm["facts"])
        if not part:
            continue
        charges[key] = part
        target = matcher.part(vm["pod_charge"], vm["facts"]) if "pod_charge" in vm else part
        source = vm.get("source")
        source_part = None
        if source is not None:
            source_part = dict((n, v) for n, v in expand_aliases(source).items() if n in target or n in part)
        growths[key] = growth_of(target, source_part, source_pods_deleted)
    plans = []
    grown = {}
    needed = {}
    if batch_of is None:
        batch_of = batch_index(batches)
    # only the batches holding a VM this quota charges: in the others its usage does not change
    keys_by_batch = {}
    for key in charges:
        if key in batch_of:
            keys_by_batch.setdefault(batch_of[key], []).append(key)
    for index in sorted(keys_by_batch):
        keys = [key for key in batches[index] if key in charges]
        charge = total(charges[key] for key in keys)
        before = add(used, grown)
        need = headroom_needed(before, hard, charge)
        plans.append(BatchNeed(index, tuple(keys), charge, before, need))
        needed = maximum(needed, need)
        grown = add(grown, total(growths[key] for key in keys))
    charge_total = total(charges.values())
    growth = total(growths.values())
    used_after = dict((name, value) for name, value in add(used, growth).items() if name in hard)
    over_now = over_hard(used, hard)
    return HeadroomPlan(
        hard=hard,
        used=used,
        charges=charges,
        growths=growths,
        charge_total=charge_total,
        batches=tuple(plans),
        needed=needed,
        needed_all_at_once=headroom_needed(used, hard, charge_total),
        over_hard=dict((n, v) for n, v in over_now.items() if _get(charge_total, n) > 0),
        over_hard_untouched=dict((n, v) for n, v in over_now.items() if _get(charge_total, n) <= 0),
        growth=growth,
        used_after=used_after,
        over_after=over_hard(used_after, hard),
    )


def plan_with_base(plan, base):
    """The per-batch headroom if the quota's hard were base instead (used to price a permanent fix)."""
    needed = {}
    for batch in plan.batches:
        needed = maximum(needed, headroom_needed(batch.used_before, base, batch.charge))
    return needed


def plan_namespace(namespace, quotas, vms, batches, batch_of=None, source_pods_deleted=False):
    """plan_quota for every quota of a namespace that a migrating VM is charged against.

    Returns (matching, not_matching): matching is a list of (quota, plan); not_matching a
    list of (quota, reason) for quotas that no VM of the plan is charged against.
    """
    matching = []
    not_matching = []
    own = [vm for vm in vms if vm["namespace"] == namespace]
    if batch_of is None:
        batch_of = batch_index(batches)
    for quota in quotas:
        plan = plan_quota(quota, own, batches, batch_of, source_pods_deleted)
        if plan.charges:
            matching.append((quota, plan))
        else:
            reason = "no VM of the plan"
            if own:
                reason = why_not_matching(quota, own[0]["facts"]) or "tracks nothing a migration charges"
            not_matching.append((quota, reason))
    return matching, not_matching


# ---------------------------------------------------------------------------
# Fixes
# ---------------------------------------------------------------------------

def _is_byte_name(name):
    """Memory, storage and hugepages names (their values are bytes)."""
    return default_format(name) == BINARY_SI


def suggested_value(name, value, fmt=None):
    """value rounded UP to a unit an operator would type: whole Mi (BinarySI bytes),
    whole M (decimal bytes), whole millicores (cpu), whole units (counts, devices)."""
    value = Fraction(value)
    fmt = fmt or default_format(name)
    if value <= 0:
        return Fraction(0)
    if name in _CPU_NAMES:
        return ceil_to(value, Fraction(1, 1000))
    if _is_byte_name(name):
        step = Fraction(2 ** 20) if fmt == BINARY_SI else Fraction(10 ** 6)
        if value < step:
            step = Fraction(1024) if fmt == BINARY_SI else Fraction(1000)
        return ceil_to(value, step)
    return ceil_to(value, Fraction(1))


def show(value, name, fmt=None):
    """A canonical quantity string for value of resource name."""
    return format_quantity(value, fmt or default_format(name))


def approx(value, name, fmt=None):
    """show(value) plus, for byte values without a binary suffix, a readable size: '4278651810 (about 3.98Gi)'."""
    text = show(value, name, fmt)
    value = Fraction(value)
    if not _is_byte_name(name) or not text.lstrip("-").isdigit() or abs(value) < 2 ** 20:
        return text
    if abs(value) >= 2 ** 30:
        return "%s (about %.2fGi)" % (text, float(value) / 2 ** 30)
    return "%s (about %.1fMi)" % (text, float(value) / 2 ** 20)


def make_fix(namespace, quota_name, name, current, required, fmt=None, reason="", owner="plain", permanent=False,
             key_for=None):
    """One fix as data and text: raise resource name of a quota from current to (at least) required.

    The text names a value rounded up for humans ('6000Mi'); the data also carries the
    exact minimum. key_for (the quota owner's operator_key) gives the key an operator raises name under in
    Rancher's namespace annotation, which Rancher rebuilds the quota from; None: spec.hard itself. owner is the
    owner's name, reported beside the fix.
    """
    fmt = fmt or default_format(name)
    target = suggested_value(name, required, fmt)
    if target < required:  # never suggest less than required
        target = Fraction(required)
    shown = show(target, name, fmt)
    when = "" if permanent else " for the maintenance window"
    key = key_for(name) if key_for is not None else None
    if key:
        text = ("raise %s in annotation field.cattle.io/resourceQuota of namespace %s to %s%s "
                "(Rancher rebuilds quota %s/%s from it)" % (key, namespace, shown, when, namespace, quota_name))
    else:
        text = "raise %s of quota %s/%s to %s%s" % (name, namespace, quota_name, shown, when)
    if reason:
        text += ": " + reason
    return {
        "namespace": namespace,
        "quota": quota_name,
        "resource": name,
        "current": show(current, name, fmt),
        "required": show(required, name, fmt),
        "suggested": shown,
        "increase": show(target - current, name, fmt) if target > current else "0",
        "permanent": permanent,
        "owner": owner,
        "rancher_key": key,
        "reason": reason,
        "text": text,
    }


def fixes_for_plan(namespace, quota, plan, owner="plain", key_for=None):
    """The fixes a quota's plan calls for: permanent ones (usage above hard now or after the
    migrations) and the temporary headroom for the maintenance window (on top of any
    permanent raise)."""
    name_of_quota = (quota.get("metadata") or {}).get("name", "")
    formats = quota_formats(quota)
    hard = plan.hard
    fixes = []
    base = dict(hard)
    for name in sorted(set(plan.over_hard) | set(plan.over_after)):
        required = max(_get(plan.used, name), _get(plan.used_after, name))
        why = []
        if name in plan.over_hard:
            why.append("usage %s is above hard %s" % (approx(plan.used[name], name, formats.get(name)),
                                                      show(hard[name], name, formats.get(name))))
        if name in plan.over_after:
            cause = ("completed source pods keep counting until deleted; deleting them after each batch "
                     "avoids this" if name == POD_COUNT else "target pods larger than their source pods")
            why.append("after the migrations usage will be %s (%s)"
                       % (approx(plan.used_after[name], name, formats.get(name)), cause))
        fix = make_fix(namespace, name_of_quota, name, hard[name], required, formats.get(name),
                       "; ".join(why), owner, permanent=True, key_for=key_for)
        fixes.append(fix)
        base[name] = max(base[name], parse_quantity(fix["suggested"]))
    window = plan_with_base(plan, base) if base != hard else plan.needed
    for name in sorted(window):
        required = base[name] + window[name]
        batches = [str(b.index + 1) for b in plan.batches
                   if headroom_needed(b.used_before, base, b.charge).get(name, 0) == window[name]]
        which = ", ".join(batches[:3]) + ("..." if len(batches) > 3 else "")
        reason = "batch %s needs %s more" % (which, approx(window[name], name, formats.get(name)))
        fixes.append(make_fix(namespace, name_of_quota, name, base[name], required, formats.get(name),
                              reason, owner, permanent=False, key_for=key_for))
    return fixes
