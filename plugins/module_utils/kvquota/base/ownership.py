# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which objects belong to which: by ownerReferences and UIDs, never by labels or names.

A tenant may put any label on a pod of its own (`kubevirt.io=virt-launcher`, `kubevirt.io/created-by`,
`vm.kubevirt.io/name`) and may post Events saying anything; labels and Event texts are display only here.
A virt-launcher pod is the pod whose controller ownerReference is the VirtualMachineInstance (kind and UID,
as virt-controller sets it); its active launcher is, in addition, one the VMI's status lists in activePods.
KubeVirt writes that status, but the VMI has no status subresource, so a tenant with KubeVirt's edit role can
write it too, and a tenant may create a pod owned by its own VMI: which pod is a VM's active launcher is the
tenant's input for that VM, never an amount that widens anything beyond it. An Event may say which object it is
about only when its involvedObject carries that object's UID and its reporting component is KubeVirt's
controller; even then it is only a pointer, never a source of amounts.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta as _meta

VMI_KIND = "VirtualMachineInstance"
KUBEVIRT_GROUP = "kubevirt.io"
KUBEVIRT = (KUBEVIRT_GROUP, "v1")   # KubeVirt's API (group, version), for the custom-object calls
VIRT_CONTROLLER = "virt-controller"
# The phases after which a VirtualMachineInstanceMigration changes no more (KubeVirt's MigrationSucceeded/Failed).
FINAL_MIGRATION_PHASES = ("Succeeded", "Failed")


def uid_of(obj):
    """metadata.uid of an API object, or None."""
    return _meta(obj).get("uid") or None


def launcher_vmi_ref(pod):
    """The pod's controller ownerReference to a VirtualMachineInstance (kind VirtualMachineInstance, API group
    kubevirt.io, with a uid), or None: the pod is no virt-launcher pod."""
    for ref in _meta(pod).get("ownerReferences") or ():
        if not isinstance(ref, dict) or ref.get("kind") != VMI_KIND or not ref.get("controller"):
            continue
        if str(ref.get("apiVersion") or "").split("/", 1)[0] != KUBEVIRT_GROUP:
            continue
        if ref.get("uid"):
            return ref
    return None


def launcher_vmi_uid(pod):
    """The UID of the VirtualMachineInstance a pod's controller ownerReference names, or None (launcher_vmi_ref)."""
    ref = launcher_vmi_ref(pod)
    return ref["uid"] if ref else None


def is_launcher_of(pod, vmi):
    """Whether pod is a virt-launcher pod of vmi: its controller ownerReference names vmi's UID."""
    uid = uid_of(vmi)
    return bool(uid) and launcher_vmi_uid(pod) == uid


def is_active_launcher_of(pod, vmi):
    """Whether pod is a launcher of vmi that KubeVirt counts as active: owned by vmi and listed in
    vmi.status.activePods (pod UID -> node). A VMI that reports no activePods at all (older KubeVirt) falls
    back to the node: the pod runs where the VMI runs."""
    if not is_launcher_of(pod, vmi):
        return False
    status = (vmi or {}).get("status") or {}
    active = status.get("activePods")
    if isinstance(active, dict) and active:
        return uid_of(pod) in active
    node = status.get("nodeName")
    return bool(node) and node == ((pod or {}).get("spec") or {}).get("nodeName")


def launchers_by_vmi_uid(pods):
    """{VMI uid: [pods]} of the pods that are virt-launcher pods by ownership (others are left out)."""
    index = {}
    for pod in pods or ():
        uid = launcher_vmi_uid(pod)
        if uid:
            index.setdefault(uid, []).append(pod)
    return index


def event_reporter(event):
    """The component an Event says reported it (reportingComponent of events.k8s.io, else source.component)."""
    return (event or {}).get("reportingComponent") or ((event or {}).get("source") or {}).get("component") or ""


def event_is_about(event, obj, component=VIRT_CONTROLLER):
    """Whether an Event may be taken as a pointer about obj: its involvedObject names obj's kind, namespace,
    name and UID, and it says it was reported by component. Anyone allowed to create Events in the namespace
    can forge both; so an Event only ever narrows a choice the caller derived from trusted state."""
    meta = _meta(obj)
    involved = (event or {}).get("involvedObject") or {}
    uid = meta.get("uid")
    return (bool(uid) and involved.get("uid") == uid and involved.get("kind") == obj.get("kind", involved.get("kind"))
            and involved.get("name") == meta.get("name")
            and (involved.get("namespace") or _meta(event).get("namespace")) == meta.get("namespace")
            and event_reporter(event) == component)


def ref_uids(refs, key):
    """{(namespace, name): uid} of the refs[key] entries of a reservation that carry a UID (the others
    identify nothing)."""
    result = {}
    for item in (refs or {}).get(key) or ():
        if isinstance(item, dict) and item.get("uid") and item.get("name"):
            result[(str(item.get("namespace") or ""), str(item["name"]))] = str(item["uid"])
    return result
