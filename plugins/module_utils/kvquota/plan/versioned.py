# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The versioned plan: what kvquota_check planned for a scope, as data kvquota_migrate takes.

The plan holds, per migrating VM, what its reservation is computed from (the target pod's charge, the live source
pod's usage, the pod facts quota scopes look at) with the identity and resourceVersion of everything that
computation read: the VMI, its namespace's labels and the names its quotas track, the KubeVirt CR, the sizing
overrides. Before a batch the executor re-reads only that batch's VMIs, namespaces and quotas (headroom.batch_need)
and uses a VM's planned charge while none of those changed; anything else sizes it again from a fresh read.

Amounts are exact: integers of nano-units (the value x 10^9). Every Kubernetes quantity is a whole number of them
(the apiserver rounds finer values up to 1n), so nothing is formatted and parsed back on the way.

The plan is the operator's data (it comes from their own kvquota_check through their playbook): it decides which
VMs a batch holds, never how much is reserved for them beyond what a fresh quota read and the planned charges
give, and a VM whose VMI is not the planned one (UID, resourceVersion) is sized again.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import datetime
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import labels, meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import round_up
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.quotas import namespace_tracked_names

PLAN_KIND = "kvquota.maintenance/plan"
PLAN_VERSION = 1
NANO_UNITS = 10 ** 9
SIZING_OPTIONS = ("kubevirt_version", "overhead_ratio")
FACT_KEYS = ("priority_class_name", "terminating", "best_effort", "cross_namespace_pod_affinity")
_REGENERATE = "run kvquota_check again with plan: true (with this collection) and pass its plan"


def amounts(resource_list):
    """{name: integer nano-units} of a ResourceList (exact: a value finer than 1n is rounded up, as the apiserver
    stores it)."""
    result = {}
    for name, value in sorted((resource_list or {}).items()):
        scaled = round_up(Fraction(value)) * NANO_UNITS
        result[name] = int(scaled)
    return result


def resource_list(data, what):
    """The ResourceList (Fractions) of plan amounts; InputError naming what on anything else."""
    if not isinstance(data, dict):
        raise InputError("%s in the plan is not a mapping of resource names to amounts" % what, _REGENERATE)
    result = {}
    for name, value in data.items():
        if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, int):
            raise InputError("%s in the plan: %r: %r is not a whole number of nano-units" % (what, name, value),
                             _REGENERATE)
        result[name] = Fraction(value, NANO_UNITS)
    return result


def vm_entry(vm, vmi, source_pod_uid):
    """The plan's entry of one migrating VM (vm: a vm_entries entry, vmi: its VMI object)."""
    return {
        "uid": meta(vmi).get("uid"),
        "resourceVersion": meta(vmi).get("resourceVersion"),
        "node": vm.get("node"),
        "charge": amounts(vm["charge"]),
        "pod_charge": amounts(vm.get("pod_charge", vm["charge"])),
        "source": None if vm.get("source") is None else amounts(vm["source"]),
        "source_pod": None if not vm.get("source_pod") else {"name": vm["source_pod"], "uid": source_pod_uid},
        "facts": dict((key, vm["facts"].get(key)) for key in FACT_KEYS),
        # {entry: {device class: devices}} of the DRA claims its target gets (None: none charged)
        "claims": vm.get("claims") or None,
    }


def namespace_inputs(ns_obj, ns_quotas):
    """What sizing read of a namespace: its labels and the names its quotas track."""
    return {"labels": dict(labels(ns_obj) if ns_obj else {}),
            "tracks": sorted(namespace_tracked_names(ns_quotas))}


def build(snapshot, options, movers, batches, cluster_facts, now):
    """The versioned plan (JSON-safe) of an evaluated snapshot: movers are the migrating VM entries, batches
    kvquota_check's batches of VM keys."""
    vmis = dict(("%s/%s" % (ns, meta(v).get("name")), v) for ns, items in (snapshot.vmis or {}).items()
                for v in items)
    pod_uids = dict(("%s/%s" % (ns, meta(p).get("name")), meta(p).get("uid"))
                    for ns, items in (snapshot.pods or {}).items() for p in items)
    entries = {}
    for vm in movers:
        key = "%s/%s" % (vm["namespace"], vm["name"])
        entries[key] = vm_entry(vm, vmis.get(key) or {}, pod_uids.get("%s/%s" % (vm["namespace"], vm.get("source_pod"))))
    namespaces = {}
    for namespace in sorted(set(vm["namespace"] for vm in movers)):
        namespaces[namespace] = namespace_inputs((snapshot.namespaces or {}).get(namespace),
                                                 (snapshot.quotas or {}).get(namespace) or [])
    kubevirt = snapshot.kubevirt
    return {
        "kind": PLAN_KIND,
        "version": PLAN_VERSION,
        "created": now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "scope": dict(snapshot.scope or {}),
        "sizing": dict((name, options.get(name)) for name in SIZING_OPTIONS),
        "kubevirt": None if not kubevirt else dict((key, meta(kubevirt).get(key))
                                                   for key in ("namespace", "name", "uid", "resourceVersion")),
        "cluster_facts": dict(cluster_facts),
        "batches": [list(batch) for batch in batches],
        "namespaces": namespaces,
        "vms": entries,
    }


class Plan(object):
    """A loaded, checked plan: batches (lists of 'namespace/name'), and per VM its planned inputs."""

    def __init__(self, data):
        self.data = data
        self.batches = data["batches"]
        self.scope = data["scope"]
        self.sizing = data["sizing"]
        self.kubevirt = data["kubevirt"]
        self.cluster_facts = data["cluster_facts"]
        self.namespaces = data["namespaces"]
        self.vms = data["vms"]

    def entry(self, namespace, name):
        """The vm_entries-shaped entry (Fractions) of a planned VM, or None."""
        planned = self.vms.get("%s/%s" % (namespace, name))
        if planned is None:
            return None
        what = "vms.%s/%s" % (namespace, name)
        return {
            "namespace": namespace,
            "name": name,
            "node": planned.get("node"),
            "migratable": True,
            "facts": dict(planned["facts"]),
            "charge": resource_list(planned["charge"], what + ".charge"),
            "pod_charge": resource_list(planned["pod_charge"], what + ".pod_charge"),
            "source": None if planned.get("source") is None else resource_list(planned["source"], what + ".source"),
            "source_pod": (planned.get("source_pod") or {}).get("name"),
        }

    def sizing_matches(self, options):
        """Whether the sizing overrides given now are those the plan was made with."""
        return all((options or {}).get(name) == self.sizing.get(name) for name in SIZING_OPTIONS)


def _claims_shape(claims):
    """Whether a planned VM's claims are None or {entry: {device class: devices (int > 0)}}."""
    if claims is None:
        return True
    return isinstance(claims, dict) and all(
        isinstance(entry, str) and isinstance(devices, dict) and all(
            isinstance(klass, str) and isinstance(count, int) and not isinstance(count, bool) and count > 0
            for klass, count in devices.items())
        for entry, devices in claims.items())


def _require(condition, problem):
    if not condition:
        raise InputError("plan: %s" % problem, _REGENERATE)


def load(data, nodes=None):
    """Plan(data) after checking its kind, version and shape (InputError naming the problem, nothing changed).
    nodes: the nodes the plan must cover (kvquota_migrate's node, or the nodes of a wave)."""
    _require(isinstance(data, dict), "not a mapping (give kvquota_check's result field plan)")
    _require(data.get("kind") == PLAN_KIND, "kind is %r, not %s" % (data.get("kind"), PLAN_KIND))
    version = data.get("version")
    if version != PLAN_VERSION:
        raise InputError("plan version %r is not supported by this collection (it reads version %d)"
                         % (version, PLAN_VERSION), _REGENERATE)
    for key, kind in (("batches", list), ("vms", dict), ("namespaces", dict), ("scope", dict), ("sizing", dict),
                      ("cluster_facts", dict)):
        _require(isinstance(data.get(key), kind), "%s is not a %s" % (key, kind.__name__))
    _require(data.get("kubevirt") is None or isinstance(data["kubevirt"], dict), "kubevirt is not a mapping")
    seen = set()
    for index, batch in enumerate(data["batches"]):
        _require(isinstance(batch, list) and batch, "batch %d is not a non-empty list of 'namespace/name'" % index)
        for key in batch:
            _require(isinstance(key, str) and key.count("/") == 1 and all(key.split("/")),
                     "batch %d: %r is not 'namespace/name'" % (index, key))
            _require(key not in seen, "%s is in two batches" % key)
            _require(key in data["vms"], "batch %d: %s has no entry in vms" % (index, key))
            seen.add(key)
    for key, planned in data["vms"].items():
        _require(isinstance(planned, dict), "vms.%s is not a mapping" % key)
        for field in ("uid", "resourceVersion"):
            _require(isinstance(planned.get(field), str) and planned[field], "vms.%s has no %s" % (key, field))
        _require(isinstance(planned.get("facts"), dict) and set(planned["facts"]) == set(FACT_KEYS),
                 "vms.%s.facts does not have the keys %s" % (key, ", ".join(FACT_KEYS)))
        source_pod = planned.get("source_pod")
        _require(source_pod is None or (isinstance(source_pod, dict) and isinstance(source_pod.get("name"), str)),
                 "vms.%s.source_pod is neither null nor {name, uid}" % key)
        _require(_claims_shape(planned.get("claims")),
                 "vms.%s.claims is neither null nor {entry: {device class: devices}}" % key)
    for namespace, inputs in data["namespaces"].items():
        _require(isinstance(inputs, dict) and isinstance(inputs.get("labels"), dict)
                 and isinstance(inputs.get("tracks"), list), "namespaces.%s is not {labels, tracks}" % namespace)
    planned_nodes = data["scope"].get("nodes") or []
    for node in nodes or ():
        _require(node in planned_nodes, "it was made for nodes %s, not for node %s" % (planned_nodes or "(all)", node))
    plan = Plan(data)
    for key in seen:
        namespace, name = key.split("/")
        plan.entry(namespace, name)  # every amount parses
    return plan
