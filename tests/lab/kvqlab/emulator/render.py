"""Render virt-launcher pods (source and migration target) the way virt-controller does.

Container sizes come from the collection's sizing core (sizing.launcher_pod), with the
cluster configuration read at render time, so the lab charges quotas exactly what
KubeVirt would. The oversize knobs then make the compute container's memory larger
than the formula (an estimate that is short).
"""
import math
from fractions import Fraction

from . import collection

LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:kvqlab-emulated"
SCHEDULABLE_LABEL = "kubevirt.io/schedulable"
MIGRATION_JOB_LABEL = "kubevirt.io/migrationJobUID"
CREATED_BY_LABEL = "kubevirt.io/created-by"
HOSTNAME_KEY = "kubernetes.io/hostname"
INITIAL_NODE_ANNOTATION = "kvqlab.io/initial-node"
HARVESTER_RATIO_SETTING = "additional-guest-memory-overhead-ratio"
# KubeVirt v1.9.0+ (feature gate VmiMemoryOverheadReport, Beta): the overhead virt-controller computed for a launcher
# pod, in decimal bytes on the pod (template.go), copied to the VMI's status as a BinarySI quantity
MEMORY_OVERHEAD_ANNOTATION = "kubevirt.io/memory-overhead-bytes"
OVERHEAD_REPORT_GATE = "VmiMemoryOverheadReport"
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def strip_v(version):
    return version[1:] if version and version[0] in "vV" else version


def cluster_config(kubevirt_cr, harvester_settings=None, default_version=None):
    """ClusterConfig from the KubeVirt CR (and the Harvester settings when that knob is on).

    The KubeVirt version is the CR's status.observedKubeVirtVersion (what a real cluster
    reports), else default_version.
    """
    sizing = collection.core()[0]
    version = None
    if kubevirt_cr:
        version = (kubevirt_cr.get("status") or {}).get("observedKubeVirtVersion")
    version = strip_v(version or default_version)
    return sizing.config_from_cluster(kubevirt_cr, harvester_settings, kubevirt_version=version)


def reports_overhead(config):
    """Whether the emulated KubeVirt reports launcher memory overheads: v1.9.0 or newer, the gate not disabled."""
    return config.version >= (1, 9, 0) and OVERHEAD_REPORT_GATE not in tuple(config.disabled_feature_gates or ())


def binary_si(value):
    """An integer as resource.NewQuantity(value, BinarySI).String() prints it: 280984Ki, 431591616, 0."""
    value = int(value)
    number, power = abs(value), 0
    while number and number % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
        number //= 1024
        power += 1
    return "%s%d%s" % ("-" if value < 0 else "", number, _BINARY_SUFFIXES[power])


def grow_memory(value, knobs):
    """value * (1 + oversize_percent/100) + oversize_bytes, rounded up to a whole byte."""
    if not knobs.oversize_percent and not knobs.oversize_bytes:
        return value
    grown = Fraction(value) * (1 + Fraction(knobs.oversize_percent) / 100) + knobs.oversize_bytes
    return Fraction(math.ceil(grown))


def _container_resources(cr, knobs, is_compute):
    """requests/limits strings of one container: the core's canonical strings, memory grown by the knobs."""
    resources = collection.core()[1]
    fmt = cr.formatted() if hasattr(cr, "formatted") else {
        "requests": resources.format_resource_list(cr.requests), "limits": resources.format_resource_list(cr.limits)}
    out = {}
    for which, rl in (("requests", cr.requests), ("limits", cr.limits)):
        strings = dict(fmt.get(which) or {})
        if is_compute and "memory" in rl:
            grown = grow_memory(rl["memory"], knobs)
            if grown != rl["memory"]:
                strings["memory"] = resources.format_resource_list({"memory": grown})["memory"]
        if strings:
            out[which] = strings
    return out


def quota_tracks(quotas):
    """Names of every resource any of these ResourceQuotas tracks (spec.hard keys)."""
    names = set()
    for q in quotas:
        names.update(((q.get("spec") or {}).get("hard") or {}).keys())
    return frozenset(names)


def launcher_pod(vmi, config, knobs, namespace_labels=None, tracks=frozenset(),
                 migration=None, initial_node=None, bulk_node=None):
    """The pod manifest virt-controller would create for this VMI.

    migration: the VirtualMachineInstanceMigration when rendering a migration target
    (labels kubevirt.io/migrationJobUID, anti-affinity to the VMI's other pods).
    initial_node: required node affinity to that node (first start only, for scenarios).
    bulk_node: bind directly with spec.nodeName (bulk scenario creation, no scheduler).
    """
    sizing = collection.core()[0]
    lp = sizing.launcher_pod(vmi, config, namespace_labels=namespace_labels or {}, quota_tracks=tracks)
    md = vmi["metadata"]
    spec = vmi.get("spec") or {}
    labels = dict(md.get("labels") or {})
    labels.pop("kubevirt.io/nodeName", None)
    labels.update({"kubevirt.io": "virt-launcher", CREATED_BY_LABEL: md["uid"]})
    annotations = {"kubevirt.io/domain": md["name"]}
    if reports_overhead(config):
        # the overhead of the sizing, before the oversize knobs (which stand for a pod larger than KubeVirt computes)
        annotations[MEMORY_OVERHEAD_ANNOTATION] = str(math.ceil(lp.memory_overhead))
    if migration is not None:
        labels[MIGRATION_JOB_LABEL] = migration["metadata"]["uid"]
        annotations["kubevirt.io/migrationJobName"] = migration["metadata"]["name"]
    containers = []
    for i, cr in enumerate(lp.containers):
        containers.append({
            "name": cr.name,
            "image": LAUNCHER_IMAGE,
            "command": ["/usr/bin/virt-launcher-monitor"] if i == 0 else ["/usr/bin/virt-tail"],
            "resources": _container_resources(cr, knobs, i == 0),
        })
    init_containers = []
    for cr in lp.init_containers:
        init = {"name": cr.name, "image": LAUNCHER_IMAGE, "command": ["/usr/bin/container-disk", "--no-op"],
                "resources": _container_resources(cr, knobs, False)}
        if getattr(cr, "restartable", False):
            # v1.6+ renders guest-console-log as a native sidecar; quota charges it in full.
            init["command"] = ["/usr/bin/virt-tail"]
            init["restartPolicy"] = "Always"
        init_containers.append(init)
    node_selector = dict(spec.get("nodeSelector") or {})
    node_selector.setdefault(SCHEDULABLE_LABEL, "true")
    affinity = _deep_copy(spec.get("affinity")) or {}
    if migration is not None:
        anti = affinity.setdefault("podAntiAffinity", {})
        anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append({
            "labelSelector": {"matchExpressions": [
                {"key": CREATED_BY_LABEL, "operator": "In", "values": [md["uid"]]}]},
            "topologyKey": HOSTNAME_KEY,
        })
    if initial_node:
        na = affinity.setdefault("nodeAffinity", {})
        req = na.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": [{}]})
        terms = req.setdefault("nodeSelectorTerms", [{}]) or [{}]
        for term in terms:
            term.setdefault("matchExpressions", []).append(
                {"key": HOSTNAME_KEY, "operator": "In", "values": [initial_node]})
        req["nodeSelectorTerms"] = terms
    tolerations = list(spec.get("tolerations") or [])
    tolerations.append({"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"})
    pod_spec = {
        "containers": containers,
        "nodeSelector": node_selector,
        "tolerations": tolerations,
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": int(spec.get("terminationGracePeriodSeconds", 30)) + 15,
        "hostname": spec.get("hostname") or md["name"],
    }
    if init_containers:
        pod_spec["initContainers"] = init_containers
    if affinity:
        pod_spec["affinity"] = affinity
    if spec.get("priorityClassName"):
        pod_spec["priorityClassName"] = spec["priorityClassName"]
    if spec.get("schedulerName"):
        pod_spec["schedulerName"] = spec["schedulerName"]
    if bulk_node:
        pod_spec["nodeName"] = bulk_node
    # DRA: virt-controller copies the VMI's spec.resourceClaims into every launcher pod, a migration target's too
    # (same render): a resourceClaimTemplateName entry makes the resourceclaim controller create the pod's own
    # claim (charged to quota), a resourceClaimName entry shares the existing one. Dropped by the apiserver where
    # DRA is off (Kubernetes 1.33).
    claims = [dict((key, entry[key]) for key in ("name", "resourceClaimName", "resourceClaimTemplateName")
                   if entry.get(key)) for entry in spec.get("resourceClaims") or () if isinstance(entry, dict)]
    if claims:
        pod_spec["resourceClaims"] = claims
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "virt-launcher-%s-" % md["name"],
            "namespace": md["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "name": md["name"], "uid": md["uid"], "controller": True, "blockOwnerDeletion": True,
            }],
        },
        "spec": pod_spec,
    }


def guest_memory_bytes(vmi):
    """Bytes a live migration copies: spec.domain.memory.guest, else requests/limits.memory."""
    resources = collection.core()[1]
    dom = (vmi.get("spec") or {}).get("domain") or {}
    guest = (dom.get("memory") or {}).get("guest")
    res = dom.get("resources") or {}
    text = guest or (res.get("requests") or {}).get("memory") or (res.get("limits") or {}).get("memory") or "1Gi"
    return int(resources.parse_resource_list({"memory": text})["memory"])


def _deep_copy(obj):
    if isinstance(obj, dict):
        return {k: _deep_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deep_copy(v) for v in obj]
    return obj
