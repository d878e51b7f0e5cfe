# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stop and start VMs a node's maintenance cannot move (node_maintenance's shutdown policies: VMs that cannot
live-migrate, and those kept back on the node) through KubeVirt's subresource API, and remember which ones were
stopped, in the operator namespace.

The VMs are stopped with PUT .../virtualmachines/<name>/stop and started again with .../start
(subresources.kubevirt.io/v1, what `virtctl stop/start` call): KubeVirt itself changes the VM, so the
collection needs no patch on VM specs (ClusterRole kvquota-shutdown). Which VMs a maintenance stopped is
recorded, before the first stop, in the ConfigMap kvq-stopped-<node> of the operator namespace (Role
kvquota-state): a tenant can neither add a VM to it nor hide one from the restart. A later run (after an
interruption) starts exactly the recorded VMs, each only if its VirtualMachine still has the recorded uid.

KubeVirt's start/stop semantics apply: spec.running false/true, or runStrategy Halted, then Always on start
(a VM that ran with RerunOnFailure comes back with Always).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import custom_path
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    InputError,
    NotFoundError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import KUBEVIRT

SUBRESOURCES = ("subresources.kubevirt.io", "v1")
RECORD_PREFIX = "kvq-stopped-"
RECORD_KEY = "vms"
DEFAULT_OPERATOR_NAMESPACE = store.DEFAULT_OPERATOR_NAMESPACE


def record_name(node):
    """kvq-stopped-<node> (store.record_name: shortened with a hash when too long)."""
    return store.record_name(RECORD_PREFIX, node)


def _no_vm(meta, why):
    return InputError("VMI %s/%s %s: the shutdown policy cannot stop and restart it, nothing was stopped"
                      % (meta.get("namespace"), meta.get("name"), why),
                      "stop or delete it yourself (its namespace's owner), then run again; or leave VMs that "
                      "cannot live-migrate on the node (node_maintenance_non_migratable: skip)")


def owner_vm(vmi):
    """{namespace, name, uid} of the VirtualMachine that owns vmi: its controller ownerReference of KubeVirt's
    API group naming the VMI's own name (KubeVirt's VM controller runs the VMI named like its VM, no other). An
    ownerReference is the tenant's to write: one naming another group, another VM (stopping that one would leave
    this VMI running), or not the controller, is no VirtualMachine of this VMI's; whether it exists with that
    uid is checked before anything stops."""
    meta = vmi.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if (ref.get("kind") == "VirtualMachine" and ref.get("uid") and ref.get("name") == meta.get("name")
                and ref.get("controller")
                and str(ref.get("apiVersion") or "").split("/", maxsplit=1)[0] == KUBEVIRT[0]):
            return {"namespace": meta.get("namespace"), "name": ref.get("name"), "uid": ref.get("uid")}
    raise _no_vm(meta, "has no VirtualMachine of %s of its name as its controller" % KUBEVIRT[0])


def parse_record(configmap):
    """The VMs recorded in a kvq-stopped-<node> ConfigMap (a list of {namespace, name, uid})."""
    text = ((configmap or {}).get("data") or {}).get(RECORD_KEY) or "[]"
    name = ((configmap or {}).get("metadata") or {}).get("name")
    try:
        vms = json.loads(text)
    except ValueError:
        vms = None
    if not isinstance(vms, list) or not all(
            isinstance(vm, dict) and all(isinstance(vm.get(key), str) and vm.get(key) for key in
                                         ("namespace", "name", "uid")) for vm in vms):
        raise InputError("the record of stopped VMs %s is not a list of {namespace, name, uid}" % name,
                         "look at it (kubectl get configmap %s -o yaml in the operator namespace), start the VMs "
                         "it meant by hand and delete it" % name)
    return vms


def _subresource_path(vm, action):
    return custom_path(SUBRESOURCES[0], SUBRESOURCES[1], "virtualmachines", vm["namespace"], vm["name"]) + "/" + action


def read_record(cluster, operator_namespace, node):
    """(the ConfigMap or None, its VMs)."""
    configmap = store.record_configmap(cluster, operator_namespace, record_name(node))
    return configmap, parse_record(configmap)


def _add_to_record(cluster, operator_namespace, node, vms):
    """Add vms to the node's record (create it, or a conditional update of the current one)."""
    def updated(recorded):
        known = set((vm["namespace"], vm["name"], vm["uid"]) for vm in recorded)
        added = [vm for vm in vms if (vm["namespace"], vm["name"], vm["uid"]) not in known]
        return {RECORD_KEY: json.dumps(recorded + added, sort_keys=True)} if added else None

    name = record_name(node)
    return store.save_record(cluster, operator_namespace, name, lambda: read_record(cluster, operator_namespace, node),
                             updated, {"kvquota.maintenance/node": str(node)},
                             "record the stopped VMs in configmap %s in namespace %s" % (name, operator_namespace))


def _power(cluster, vm, action):
    """PUT the start/stop subresource; False when KubeVirt says it is so already (409), or the VM is gone (404:
    its namespace deleted it meanwhile; its VMI goes with it)."""
    try:
        cluster.request("PUT", _subresource_path(vm, action), body={},
                        what="%s virtualmachine %s in namespace %s" % (action, vm["name"], vm["namespace"]))
    except (ConflictError, NotFoundError):
        return False   # "VM is not running" / "VM is already running" / gone
    return True


def stop(cluster, node, vmis, operator_namespace=DEFAULT_OPERATOR_NAMESPACE, check_mode=False):
    """Record, then stop, the VirtualMachines owning vmis (VMI dicts). Every VMI's VirtualMachine is checked first
    (KubeVirt's, the controller, existing with the uid its ownerReference names): one that is not refuses the
    whole list before anything is recorded or stopped, so no VM stays stopped for a run that cannot go on.
    Returns {vms, stopped, changed}."""
    vms = [owner_vm(vmi) for vmi in vmis]
    for vmi, vm in zip(vmis, vms):
        if _current_uid(cluster, vm) != vm["uid"]:
            raise _no_vm(vmi.get("metadata") or {}, "names VirtualMachine %s with uid %s as its owner, which does "
                         "not exist" % (vm["name"], vm["uid"]))
    if check_mode or not vms:
        return {"vms": vms, "stopped": [], "changed": bool(vms)}
    _add_to_record(cluster, operator_namespace, node, vms)
    stopped = [vm for vm in vms if _power(cluster, vm, "stop")]
    return {"vms": vms, "stopped": stopped, "changed": True}


def _current_uid(cluster, vm):
    """The uid of the VirtualMachine named like vm now, None when there is none."""
    try:
        obj = cluster.get_custom(*KUBEVIRT, "virtualmachines", vm["name"], namespace=vm["namespace"])
    except NotFoundError:
        return None
    return (obj.get("metadata") or {}).get("uid")


def start(cluster, node, operator_namespace=DEFAULT_OPERATOR_NAMESPACE, check_mode=False):
    """Start every VM recorded for node whose VirtualMachine still has the recorded uid (a VM deleted and
    re-created under the same name is not ours to start), then delete the record (conditionally).
    Returns {vms, started, gone, changed}."""
    configmap, vms = read_record(cluster, operator_namespace, node)
    if configmap is None:
        return {"vms": [], "started": [], "gone": [], "changed": False}
    current = [vm for vm in vms if _current_uid(cluster, vm) == vm["uid"]]
    gone = [vm for vm in vms if vm not in current]
    if check_mode:
        return {"vms": current, "started": [], "gone": gone, "changed": True}
    started = [vm for vm in current if _power(cluster, vm, "start")]
    store.delete_record(cluster, operator_namespace, configmap)
    return {"vms": current, "started": started, "gone": gone, "changed": True}
