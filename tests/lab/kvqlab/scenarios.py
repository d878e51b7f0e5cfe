"""Declarative lab scenarios: nodes, namespaces, quotas (plain or Rancher-managed), VMs.

    from kvqlab import scenarios
    sc = scenarios.load("a")                 # tests/lab/scenarios/a.yaml, or a path
    result = scenarios.apply(lab, sc)        # creates everything; waits for VMIs Running
    result.timings                           # seconds per phase
    scenarios.delete(lab, sc)                # namespaces (and projects) removed

The format is documented in docs/emulator.md ("Scenario format"); expand() turns the
templated groups (count, {i}, {n}, {m}) into concrete objects and is pure.
"""
import copy
import dataclasses
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

from .emulator import (KNOBS_NAMESPACE, _rest_for, as_identity, ensure_knobs, install_crds, install_identities,
                       rancher_user, render, set_knobs)
from .emulator import rancher as rancher_mod
from .emulator.controller import BULK_ANNOTATION, KV, NODE_LABEL, now_iso, path

SCENARIO_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios")
HARVESTER_RATIO = render.HARVESTER_RATIO_SETTING
HARVESTER_VERSION = "server-version"


class ScenarioError(ValueError):
    pass


@dataclasses.dataclass
class Scenario:
    name: str
    data: dict
    path: str = None

    @property
    def description(self):
        return self.data.get("description", "")

    def expand(self):
        return expand(self.data)


@dataclasses.dataclass
class ApplyResult:
    scenario: str
    timings: dict
    namespaces: list
    vms: list
    quotas: list
    nodes: list


def load(name_or_path):
    """A Scenario from a name in tests/lab/scenarios (with or without .yaml) or a file path."""
    p = name_or_path
    if not os.path.exists(p):
        p = os.path.join(SCENARIO_DIR, name_or_path if name_or_path.endswith(".yaml") else name_or_path + ".yaml")
    if not os.path.exists(p):
        raise ScenarioError("no scenario %r (looked in %s)" % (name_or_path, SCENARIO_DIR))
    with open(p) as fh:
        data = yaml.safe_load(fh) or {}
    validate(data)
    return Scenario(name=data.get("name") or os.path.splitext(os.path.basename(p))[0], data=data, path=p)


def from_dict(data):
    validate(data)
    return Scenario(name=data.get("name", "inline"), data=data)


_TOP = {"name", "description", "kubevirt", "harvester", "emulator", "nodes", "projects", "priorityClasses",
        "namespaces", "vms", "notes", "waitRunning", "concurrency"}
_VM_KEYS = {"name", "namespace", "count", "spreadNamespaces", "spreadNodes", "node", "cpu", "memory", "requests",
            "limits", "guestMemory", "volumes", "running", "kind", "bulk", "labels", "annotations",
            "evictionStrategy", "priorityClassName", "nodeSelector", "runStrategy", "firmware"}


def validate(data):
    """Raise ScenarioError for unknown keys or missing names (a typo must not pass silently)."""
    if not isinstance(data, dict):
        raise ScenarioError("a scenario is a mapping")
    unknown = set(data) - _TOP
    if unknown:
        raise ScenarioError("unknown top-level keys: %s (known: %s)" % (sorted(unknown), sorted(_TOP)))
    for group in data.get("vms") or []:
        bad = set(group) - _VM_KEYS
        if bad:
            raise ScenarioError("vm group %r: unknown keys %s" % (group.get("name"), sorted(bad)))
        if "name" not in group or "namespace" not in group:
            raise ScenarioError("every vm group needs name and namespace: %r" % group)
    for ns in data.get("namespaces") or []:
        if "name" not in ns:
            raise ScenarioError("every namespace needs a name: %r" % ns)


def _fmt(text, **idx):
    return str(text).format(**idx) if text is not None else None


def expand(data):
    """Concrete {'nodes', 'namespaces', 'vms', 'projects'} lists from the templated scenario."""
    nodes = []
    for g in data.get("nodes") or []:
        n = int(g.get("count", 1))
        for i in range(1, n + 1):
            d = {k: v for k, v in g.items() if k != "count"}
            d["name"] = _fmt(g["name"], i=i)
            nodes.append(d)
    namespaces = []
    for g in data.get("namespaces") or []:
        n = int(g.get("count", 1))
        for i in range(1, n + 1):
            d = copy.deepcopy({k: v for k, v in g.items() if k != "count"})
            d["name"] = _fmt(g["name"], i=i)
            for q in d.get("quotas") or []:
                q["name"] = _fmt(q["name"], i=i)
            namespaces.append(d)
    vms = []
    for g in data.get("vms") or []:
        n = int(g.get("count", 1))
        spread_ns = int(g.get("spreadNamespaces", 1))
        spread_nodes = int(g.get("spreadNodes", 1))
        for i in range(1, n + 1):
            idx = {"i": i, "n": (i - 1) % spread_ns + 1, "m": (i - 1) % spread_nodes + 1}
            d = copy.deepcopy({k: v for k, v in g.items() if k not in ("count", "spreadNamespaces", "spreadNodes")})
            d["name"] = _fmt(g["name"], **idx)
            d["namespace"] = _fmt(g["namespace"], **idx)
            if g.get("node"):
                d["node"] = _fmt(g["node"], **idx)
            vms.append(d)
    return {"nodes": nodes, "namespaces": namespaces, "vms": vms, "projects": list(data.get("projects") or [])}


# ------------------------------------------------------------------ object builders (pure)

def kubevirt_cr(data):
    kv = data.get("kubevirt") or {}
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": copy.deepcopy(kv.get("configuration") or {})},
        "status": {"observedKubeVirtVersion": "v" + render.strip_v(str(kv.get("version", "1.5.0"))),
                   "phase": "Deployed"},
    }


def has_rancher_quotas(data):
    """True when the scenario has Rancher-managed quotas (a quota marked rancher, or a Rancher limit)."""
    for ns in data.get("namespaces") or []:
        if (ns.get("rancher") or {}).get("limit") or any(q.get("rancher") for q in ns.get("quotas") or []):
            return True
    return bool(data.get("projects"))


def harvester_settings(data):
    h = data.get("harvester") or {}
    if not h.get("enabled"):
        return None
    value = h.get("overheadRatio")
    return {HARVESTER_RATIO: {"apiVersion": "harvesterhci.io/v1beta1", "kind": "Setting",
                              "metadata": {"name": HARVESTER_RATIO}, "default": "1.5",
                              "value": "" if value is None else str(value)},
            # every Harvester has it; its presence is how kvquota tells Harvester from a bare settings CRD
            HARVESTER_VERSION: {"apiVersion": "harvesterhci.io/v1beta1", "kind": "Setting",
                                "metadata": {"name": HARVESTER_VERSION}, "default": "",
                                "value": str(h.get("version") or "v1.6.0")}}


def vm_template_spec(vm):
    """VMI spec for a scenario VM entry."""
    requests = dict(vm.get("requests") or {})
    limits = dict(vm.get("limits") or {})
    if vm.get("memory") is not None:
        requests.setdefault("memory", str(vm["memory"]))
    domain = {"devices": {"disks": [], "interfaces": []}, "resources": {}}
    if vm.get("cpu") is not None:
        domain["cpu"] = {"cores": int(vm["cpu"]), "sockets": 1, "threads": 1}
    if requests:
        domain["resources"]["requests"] = {k: str(v) for k, v in requests.items()}
    if limits:
        domain["resources"]["limits"] = {k: str(v) for k, v in limits.items()}
    if vm.get("guestMemory"):
        domain["memory"] = {"guest": str(vm["guestMemory"])}
    if vm.get("firmware"):
        # e.g. {bootloader: {efi: {persistent: true}}}: a persistent EFI keeps its state in a backend-storage PVC
        domain["firmware"] = copy.deepcopy(vm["firmware"])
    volumes = []
    for vol in vm.get("volumes") or [{"name": "rootdisk", "containerDisk": True}]:
        name = vol["name"]
        domain["devices"]["disks"].append({"name": name, "disk": {"bus": "virtio"}})
        if vol.get("pvc") or vol.get("claimName"):
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": vol.get("pvc") or vol["claimName"]}})
        elif vol.get("dataVolume"):
            volumes.append({"name": name, "dataVolume": {"name": vol["dataVolume"]}})
        else:
            volumes.append({"name": name, "containerDisk": {"image": "quay.io/containerdisks/fedora:latest"}})
    spec = {"domain": domain, "volumes": volumes, "terminationGracePeriodSeconds": 0}
    if vm.get("evictionStrategy"):
        spec["evictionStrategy"] = vm["evictionStrategy"]
    if vm.get("priorityClassName"):
        spec["priorityClassName"] = vm["priorityClassName"]
    if vm.get("nodeSelector"):
        spec["nodeSelector"] = dict(vm["nodeSelector"])
    return spec


def vm_object(vm):
    labels = dict(vm.get("labels") or {})
    tmpl_labels = dict(labels)
    tmpl_labels["kubevirt.io/domain"] = vm["name"]
    md = {"name": vm["name"], "namespace": vm["namespace"], "labels": labels,
          "annotations": dict(vm.get("annotations") or {})}
    if vm.get("node"):
        md["annotations"][render.INITIAL_NODE_ANNOTATION] = vm["node"]
    spec = {"template": {"metadata": {"labels": tmpl_labels}, "spec": vm_template_spec(vm)}}
    if vm.get("runStrategy"):
        spec["runStrategy"] = vm["runStrategy"]
    else:
        spec["running"] = bool(vm.get("running", True))
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": md, "spec": spec}


def vmi_object(vm, node=None, bulk=False):
    labels = dict(vm.get("labels") or {})
    labels["kubevirt.io/domain"] = vm["name"]
    labels["vm.kubevirt.io/name"] = vm["name"]
    ann = dict(vm.get("annotations") or {})
    if bulk:
        ann[BULK_ANNOTATION] = "true"
        if node:
            labels[NODE_LABEL] = node
    elif vm.get("node"):
        ann[render.INITIAL_NODE_ANNOTATION] = vm["node"]
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": vm["name"], "namespace": vm["namespace"], "labels": labels, "annotations": ann},
            "spec": vm_template_spec(vm)}


def rancher_annotations(ns):
    r = ns.get("rancher") or {}
    ann = {}
    if r.get("limit") is not None:
        ann[rancher_mod.QUOTA_ANNOTATION] = json.dumps({"limit": r["limit"]}, sort_keys=True)
    if r.get("project"):
        ann[rancher_mod.PROJECT_ANNOTATION] = r["project"]
    return ann


_CHARGE_CACHE = {}


def launcher_charge(vm, config, ns_labels, tracks):
    """The quota charge (dict name -> Fraction) of one VM's launcher pod under config (memoised by shape)."""
    sizing = render.collection.core()[0]
    vmi = vmi_object(vm)
    key = (json.dumps(vmi["spec"], sort_keys=True), repr(config), json.dumps(ns_labels or {}, sort_keys=True),
           tuple(sorted(tracks)))
    if key not in _CHARGE_CACHE:
        _CHARGE_CACHE[key] = sizing.launcher_pod(vmi, config, namespace_labels=ns_labels or {},
                                                 quota_tracks=frozenset(tracks)).charge
    return _CHARGE_CACHE[key]


def computed_hard(quota, ns, vms, config):
    """spec.hard of a quota with 'hardFromUsage': the namespace's VM usage plus a margin.

    hardFromUsage: {resources: [limits.cpu, limits.memory], margin: {limits.memory: 100Mi},
                    marginPercent: 5, fraction: 0.89}
    fraction: hard = usage / fraction (the tenant then sits at that fraction of its quota).
    vms: the scenario's VMs of this namespace (or all of them; others are skipped).
    """
    from fractions import Fraction
    resources = render.collection.core()[1]
    spec = quota["hardFromUsage"]
    names = list(spec.get("resources") or ["limits.cpu", "limits.memory"])
    tracks = set(names) | set((quota.get("hard") or {}).keys())
    used = resources.total(launcher_charge(vm, config, ns.get("labels"), tracks)
                           for vm in vms if vm["namespace"] == ns["name"] and vm.get("running", True))
    used = resources.mask(used, names)
    for n in names:
        used.setdefault(n, Fraction(0))

    def up(name, value):
        """Round up to a whole unit (bytes, pods) or to a milli-unit (cpu)."""
        step = Fraction(1, 1000) if name.endswith("cpu") else Fraction(1)
        return -(-value // step) * step

    if spec.get("fraction"):
        f = Fraction(str(spec["fraction"]))
        used = {n: up(n, v / f) for n, v in used.items()}
    if spec.get("marginPercent"):
        p = Fraction(str(spec["marginPercent"])) / 100
        used = {n: up(n, v * (1 + p)) for n, v in used.items()}
    margin = resources.parse_resource_list(spec.get("margin") or {})
    hard = resources.add(used, resources.mask(margin, names))
    out = dict(quota.get("hard") or {})
    out.update(resources.format_resource_list(hard))
    return out


# ------------------------------------------------------------------ apply

def _ignore_conflict(fn, *args):
    from kubernetes.client.exceptions import ApiException
    try:
        return fn(*args)
    except ApiException as exc:
        if exc.status != 409:
            raise
        return None


def _wait_not_terminating(rest, name, timeout=180):
    """Wait until namespace name is not being deleted: an earlier application's namespace of the same name still
    terminating would otherwise be "created" (409, tolerated) and lose the objects made in it now, or show its
    old objects beside the new ones."""
    deadline = time.time() + timeout
    while True:
        current = rest.get_or_none("/api/v1/namespaces/" + name)
        if current is None or not (current.get("metadata") or {}).get("deletionTimestamp"):
            return
        if time.time() > deadline:
            raise TimeoutError("namespace %s still terminating after %ss" % (name, timeout))
        time.sleep(0.5)


def apply(lab, scenario, wait=True, timeout=300, concurrency=None, log=None):
    """Create the scenario's objects in the lab; returns an ApplyResult with timings.

    VMs without bulk are created as VirtualMachine objects (the emulator starts them);
    bulk groups are created as VMIs + launcher pods (bound directly to their node) + status,
    concurrently, so the emulator only has to observe them. wait: wait until every VMI is
    Running (needs the emulator running) and every quota's status is filled.
    """
    if isinstance(scenario, str):
        scenario = load(scenario)
    data = scenario.data
    log = log or (lambda msg: None)
    rest = _rest_for(lab)
    timings = {}
    t_all = time.monotonic()
    ex = scenario.expand()
    conc = int(concurrency or data.get("concurrency") or 32)

    def mark(step, t0):
        timings[step] = round(time.monotonic() - t0, 3)
        log("%s: %.2fs" % (step, timings[step]))

    t0 = time.monotonic()
    install_crds(rest)
    mark("crds", t0)

    # KubeVirt CR, Harvester setting, knobs
    t0 = time.monotonic()
    _ignore_conflict(rest.create, "/api/v1/namespaces", {"metadata": {"name": "kubevirt"}})
    kv = kubevirt_cr(data)
    cur = rest.get_or_none(KV + "/namespaces/kubevirt/kubevirts/kubevirt")
    if cur is None:
        cur = rest.create(KV + "/namespaces/kubevirt/kubevirts", {k: v for k, v in kv.items() if k != "status"})
    else:
        cur = rest.patch(KV + "/namespaces/kubevirt/kubevirts/kubevirt", {"spec": {"configuration": None}})
        cur = rest.patch(KV + "/namespaces/kubevirt/kubevirts/kubevirt", {"spec": kv["spec"]})
    rest.patch(KV + "/namespaces/kubevirt/kubevirts/kubevirt/status", {"status": kv["status"]})
    hs = harvester_settings(data)
    knobs = dict(data.get("emulator") or {})
    knobs["harvester"] = bool(hs)
    # Rancher 2.14.6+/2.15.2+ refuses every write of a Rancher quota but Rancher's own: Rancher scenarios run with
    # that lock-down unless they say rancher_lockdown: false. Harvester scenarios too: the lock-down refuses
    # Harvester's own quota writes like anyone's (its controllers write as its ServiceAccount), and a Harvester
    # meets it with an embedded Rancher at those releases (v1.9.0-rc6 embeds v2.15.0, below them).
    knobs.setdefault("rancher_lockdown", has_rancher_quotas(data))
    install_identities(rest)
    rancher_rest = as_identity(rest, rancher_user())
    if hs:
        for name, setting in sorted(hs.items()):
            cur_s = rest.get_or_none("/apis/harvesterhci.io/v1beta1/settings/" + name)
            if cur_s is None:
                rest.create("/apis/harvesterhci.io/v1beta1/settings", setting)
            else:
                rest.patch("/apis/harvesterhci.io/v1beta1/settings/" + name,
                           {"value": setting["value"], "default": setting["default"]})
    elif rest.get_or_none("/apis/harvesterhci.io/v1beta1/settings/" + HARVESTER_VERSION) is not None:
        rest.delete("/apis/harvesterhci.io/v1beta1/settings/" + HARVESTER_VERSION)   # not Harvester any more
    ensure_knobs(rest, KNOBS_NAMESPACE, **knobs)
    config = render.cluster_config(kv, hs)
    mark("kubevirt", t0)

    # nodes
    t0 = time.monotonic()
    existing = {n["metadata"]["name"]: n for n in rest.get("/api/v1/nodes")["items"]}
    added = []
    for node in ex["nodes"]:
        labels = dict(node.get("labels") or {})
        res = {"cpu": str(node.get("cpu", "32")), "memory": str(node.get("memory", "128Gi")),
               "pods": str(node.get("pods", "110"))}
        if node["name"] in existing:
            rest.patch("/api/v1/nodes/%s/status" % node["name"], {"status": {"capacity": res, "allocatable": res}})
            if labels:
                rest.patch("/api/v1/nodes/" + node["name"], {"metadata": {"labels": labels}})
            continue
        lab.add_node(node["name"], cpu=res["cpu"], memory=res["memory"], pods=res["pods"], labels=labels,
                     wait=False)
        added.append(node["name"])
    for name in added:
        lab.wait_node_ready(name, 60)
    mark("nodes", t0)

    # priority classes, projects, namespaces, quotas, PVCs
    t0 = time.monotonic()
    for pc in data.get("priorityClasses") or []:
        _ignore_conflict(rest.create, "/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": pc["name"]},
            "value": int(pc.get("value", 1000)), "globalDefault": False})
    for pr in ex["projects"]:
        _ignore_conflict(rest.create, "/api/v1/namespaces", {"metadata": {"name": pr["cluster"]}})
        body = {"apiVersion": "management.cattle.io/v3", "kind": "Project",
                "metadata": {"name": pr["name"], "namespace": pr["cluster"]},
                "spec": {"clusterName": pr["cluster"], "displayName": pr.get("displayName", pr["name"]),
                         "resourceQuota": {"limit": pr.get("limit") or {}},
                         "namespaceDefaultResourceQuota": {"limit": pr.get("namespaceDefault") or {}}}}
        if _ignore_conflict(rest.create, "/apis/management.cattle.io/v3/namespaces/%s/projects" % pr["cluster"], body) is None:
            rest.patch("/apis/management.cattle.io/v3/namespaces/%s/projects/%s" % (pr["cluster"], pr["name"]),
                       {"spec": body["spec"]})

    def make_ns(ns):
        ann = dict(ns.get("annotations") or {})
        ann.update(rancher_annotations(ns))
        labels = dict(ns.get("labels") or {})
        labels.setdefault("kvqlab.io/scenario", scenario.name)
        rancher_quotas = [q for q in ns.get("quotas") or [] if q.get("rancher")]
        first = dict(ann)
        if rancher_quotas:
            # create the namespace's Rancher quota under its scenario name before the
            # annotation appears, or the emulated agent creates its own default-xxxxx
            first.pop(rancher_mod.QUOTA_ANNOTATION, None)
            first.pop(rancher_mod.PROJECT_ANNOTATION, None)   # a project's namespace default would do it too
        _wait_not_terminating(rest, ns["name"])
        if _ignore_conflict(rest.create, "/api/v1/namespaces", {"metadata": {
                "name": ns["name"], "labels": labels, "annotations": first}}) is None:
            rest.patch("/api/v1/namespaces/" + ns["name"], {"metadata": {"labels": labels, "annotations": first}})
        lim = (ns.get("rancher") or {}).get("limit")
        for q in rancher_quotas:
            _ignore_conflict(rancher_rest.create, path("rq", ns["name"]), {
                "metadata": {"name": q["name"], "labels": {rancher_mod.RANCHER_LABEL: "true"}},
                "spec": {"hard": rancher_mod.rancher_limit_to_hard(lim or {}) or dict(q.get("hard") or {})}})
        if first != ann:
            rest.patch("/api/v1/namespaces/" + ns["name"], {"metadata": {"annotations": ann}})
        for pvc in ns.get("pvcs") or []:
            _ignore_conflict(rest.create, path("pvc", ns["name"]), {
                "metadata": {"name": pvc["name"], "labels": dict(pvc.get("labels") or {})},
                "spec": {"accessModes": list(pvc.get("accessModes") or ["ReadWriteOnce"]),
                         "resources": {"requests": {"storage": str(pvc.get("size", "10Gi"))}},
                         "volumeMode": pvc.get("volumeMode", "Block")}})

    with ThreadPoolExecutor(conc) as pool:
        list(pool.map(make_ns, ex["namespaces"]))
    mark("namespaces", t0)

    t0 = time.monotonic()
    quota_names = []

    vms_by_ns = {}
    for vm in ex["vms"]:
        vms_by_ns.setdefault(vm["namespace"], []).append(vm)

    def make_quotas(ns):
        for q in ns.get("quotas") or []:
            hard = dict(q.get("hard") or {})
            if q.get("hardFromUsage"):
                hard = computed_hard(q, ns, vms_by_ns.get(ns["name"], []), config)
            labels = dict(q.get("labels") or {})
            if q.get("rancher"):
                labels[rancher_mod.RANCHER_LABEL] = "true"
                lim = (ns.get("rancher") or {}).get("limit")
                if lim is not None and not q.get("hard") and not q.get("hardFromUsage"):
                    hard = rancher_mod.rancher_limit_to_hard(lim)
            spec = {"hard": {k: str(v) for k, v in hard.items()}}
            if q.get("scopes"):
                spec["scopes"] = list(q["scopes"])
            if q.get("scopeSelector"):
                spec["scopeSelector"] = q["scopeSelector"]
            body = {"metadata": {"name": q["name"], "namespace": ns["name"], "labels": labels,
                                 "annotations": dict(q.get("annotations") or {})}, "spec": spec}
            writer = rest
            if _ignore_conflict(rancher_rest.create if q.get("rancher") else rest.create, path("rq", ns["name"]),
                                body) is None:
                cur = rest.get(path("rq", ns["name"], q["name"]))
                if q.get("rancher") or rancher_mod.RANCHER_LABEL in (cur["metadata"].get("labels") or {}):
                    writer = rancher_rest   # a Rancher quota: only Rancher may change it (or take it over)
                cur["spec"] = spec
                cur["metadata"]["labels"] = labels
                writer.replace(path("rq", ns["name"], q["name"]), cur)
            quota_names.append((ns["name"], q["name"]))

    with ThreadPoolExecutor(conc) as pool:
        list(pool.map(make_quotas, ex["namespaces"]))
    _wait_quotas_ready(rest, quota_names, timeout)
    mark("quotas", t0)

    # VMs
    t0 = time.monotonic()
    plain = [vm for vm in ex["vms"] if not vm.get("bulk")]
    bulk = [vm for vm in ex["vms"] if vm.get("bulk")]
    ns_labels = {ns["name"]: ns.get("labels") or {} for ns in ex["namespaces"]}
    tracks_cache = {}
    lock = threading.Lock()

    def tracks_of(ns):
        with lock:
            if ns not in tracks_cache:
                tracks_cache[ns] = render.quota_tracks(rest.get(path("rq", ns))["items"])
            return tracks_cache[ns]

    def make_vm(vm):
        kind = vm.get("kind", "vm")
        if kind == "vm":
            _ignore_conflict(rest.create, path("vm", vm["namespace"]), vm_object(vm))
        else:
            _ignore_conflict(rest.create, path("vmi", vm["namespace"]), vmi_object(vm))

    from .emulator.knobs import parse_knobs
    knob_values = parse_knobs({k: str(v) for k, v in (data.get("emulator") or {}).items()
                               if k in ("oversize_percent", "oversize_bytes")})
    node_names = [n["name"] for n in ex["nodes"]] or list(existing)

    def make_bulk(arg):
        i, vm = arg
        node = vm.get("node") or node_names[i % len(node_names)]
        owner = None
        if vm.get("kind", "vmi") == "vm":
            body = vm_object(vm)
            body["spec"].pop("running", None)
            body["spec"]["runStrategy"] = "Always"
            created = _ignore_conflict(rest.create, path("vm", vm["namespace"]), body) or \
                rest.get(path("vm", vm["namespace"], vm["name"]))
            owner = created["metadata"]
        body = vmi_object(vm, node=node, bulk=True)
        if owner:
            body["metadata"]["ownerReferences"] = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                                                    "name": owner["name"], "uid": owner["uid"],
                                                    "controller": True, "blockOwnerDeletion": True}]
        vmi = _ignore_conflict(rest.create, path("vmi", vm["namespace"]), body)
        if vmi is None:
            return  # already there (re-apply)
        pod = render.launcher_pod(vmi, config, knob_values, namespace_labels=ns_labels.get(vm["namespace"]),
                                  tracks=tracks_of(vm["namespace"]), bulk_node=node)
        pod = rest.create(path("pod", vm["namespace"]), pod)
        ok = True
        conds = [{"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": now_iso()},
                 {"type": "LiveMigratable", "status": "True" if ok else "False", "lastProbeTime": None,
                  "lastTransitionTime": now_iso()}]
        rest.patch(path("vmi", vm["namespace"], vm["name"], "status"), {"status": {
            "phase": "Running", "nodeName": node, "migrationMethod": "BlockMigration",
            "activePods": {pod["metadata"]["uid"]: node}, "conditions": conds, "qosClass": "Burstable",
            "launcherContainerImageVersion": render.LAUNCHER_IMAGE,
            "phaseTransitionTimestamps": [{"phase": "Running", "phaseTransitionTimestamp": now_iso()}]}})

    with ThreadPoolExecutor(conc) as pool:
        list(pool.map(make_vm, plain))
        list(pool.map(make_bulk, enumerate(bulk)))
    mark("vms_created", t0)

    if wait and data.get("waitRunning", True):
        if plain:
            from . import emulator as emulator_mod
            if not emulator_mod.attach(lab).running():
                log("no emulator runs for this lab: starting one (VMs need it)")
                emulator_mod.start(lab, install=False)
        t0 = time.monotonic()
        _wait_running(rest, ex["vms"], timeout)
        mark("vms_running", t0)
        t0 = time.monotonic()
        _wait_quota_usage(rest, quota_names, timeout)
        mark("quota_usage", t0)
    timings["total"] = round(time.monotonic() - t_all, 3)
    return ApplyResult(scenario=scenario.name, timings=timings, namespaces=[n["name"] for n in ex["namespaces"]],
                       vms=[(v["namespace"], v["name"]) for v in ex["vms"]], quotas=quota_names, nodes=added)


def _wait_quotas_ready(rest, quota_names, timeout):
    want = {}
    for ns, name in quota_names:
        want.setdefault(ns, set()).add(name)
    deadline = time.monotonic() + timeout
    while want:
        items = rest.list_items("/api/v1/resourcequotas")
        for q in items:
            md = q["metadata"]
            if md["namespace"] in want and md["name"] in want[md["namespace"]]:
                st = q.get("status") or {}
                if st.get("hard") is not None and set(st["hard"]) == set(q["spec"].get("hard") or {}):
                    want[md["namespace"]].discard(md["name"])
                    if not want[md["namespace"]]:
                        del want[md["namespace"]]
        if not want:
            return
        if time.monotonic() > deadline:
            raise TimeoutError("quotas without status.hard after %ss: %s" % (timeout, sorted(want)[:10]))
        time.sleep(0.2)


def _wait_running(rest, vms, timeout):
    pending = {(v["namespace"], v["name"]) for v in vms if v.get("running", True)
               and v.get("runStrategy", "Always") in ("Always", "RerunOnFailure", "Once")}
    deadline = time.monotonic() + timeout
    while pending:
        items = rest.list_items(KV + "/virtualmachineinstances")
        for vmi in items:
            k = (vmi["metadata"]["namespace"], vmi["metadata"]["name"])
            if k in pending and (vmi.get("status") or {}).get("phase") == "Running":
                pending.discard(k)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError("VMIs not Running after %ss (is the emulator running?): %s"
                               % (timeout, sorted(pending)[:10]))
        time.sleep(0.25)


def _wait_quota_usage(rest, quota_names, timeout):
    """Wait until the quota controller has charged every running launcher pod (used stable)."""
    if not quota_names:
        return
    namespaces = {ns for ns, _quota in quota_names}
    deadline = time.monotonic() + timeout
    while True:
        pods = rest.list_items("/api/v1/pods", labelSelector="kubevirt.io=virt-launcher")
        count = {}
        for p in pods:
            if p["metadata"]["namespace"] in namespaces and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                count[p["metadata"]["namespace"]] = count.get(p["metadata"]["namespace"], 0) + 1
        ok = True
        for q in rest.list_items("/api/v1/resourcequotas"):
            ns = q["metadata"]["namespace"]
            if (ns, q["metadata"]["name"]) not in quota_names:
                continue
            used = (q.get("status") or {}).get("used") or {}
            for key in ("pods", "count/pods"):
                if key in used and int(used[key]) != count.get(ns, 0):
                    ok = False
        if ok or time.monotonic() > deadline:
            return
        time.sleep(0.25)


def delete(lab, scenario, wait=True, timeout=120):
    """Delete the scenario's namespaces and projects (needs the emulator for VMIM finalizers)."""
    if isinstance(scenario, str):
        scenario = load(scenario)
    rest = _rest_for(lab)
    ex = scenario.expand()
    names = [ns["name"] for ns in ex["namespaces"]]
    if has_rancher_quotas(scenario.data):
        # back to the knob's default (off) for what runs next on this lab; the namespace controller may
        # delete the Rancher quotas of terminating namespaces either way
        set_knobs(rest, KNOBS_NAMESPACE, rancher_lockdown=None)
    for name in names:
        rest.delete("/api/v1/namespaces/" + name)
    for pr in ex["projects"]:
        rest.delete("/apis/management.cattle.io/v3/namespaces/%s/projects/%s" % (pr["cluster"], pr["name"]))
    if not wait:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [n for n in names if rest.get_or_none("/api/v1/namespaces/" + n) is not None]
        if not left:
            return
        time.sleep(0.5)
    raise TimeoutError("namespaces still terminating: %s" % left[:10])
