# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ownership: launchers by their controller ownerReference to the VMI's UID (and KubeVirt's activePods), Events
only when their involvedObject UID and reporter match, reservation refs by UID; labels never count."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import ownership as o

VMI = {"kind": "VirtualMachineInstance", "metadata": {"name": "vm-1", "namespace": "t", "uid": "vmi-uid"},
       "status": {"nodeName": "n1", "activePods": {"pod-uid": "n1"}}}
LABELS = {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "vmi-uid", "vm.kubevirt.io/name": "vm-1"}


def pod(uid="pod-uid", owner_uid="vmi-uid", controller=True, kind="VirtualMachineInstance",
        api="kubevirt.io/v1", labels=None, node="n1"):
    refs = [] if owner_uid is None else [{"apiVersion": api, "kind": kind, "name": "vm-1", "uid": owner_uid,
                                          "controller": controller}]
    return {"metadata": {"name": "virt-launcher-vm-1-x", "namespace": "t", "uid": uid, "labels": labels or {},
                         "ownerReferences": refs}, "spec": {"nodeName": node}}


def test_a_launcher_is_known_by_its_controller_owner_reference():
    assert o.launcher_vmi_uid(pod()) == "vmi-uid"
    assert o.is_launcher_of(pod(), VMI) and o.is_active_launcher_of(pod(), VMI)


def test_labels_alone_make_no_launcher():
    tenant = pod(uid="tenant-pod", owner_uid=None, labels=LABELS)
    assert o.launcher_vmi_uid(tenant) is None
    assert not o.is_launcher_of(tenant, VMI) and not o.is_active_launcher_of(tenant, VMI)
    assert o.launchers_by_vmi_uid([tenant, pod()]) == {"vmi-uid": [pod()]}


def test_an_owner_reference_of_another_kind_group_or_not_controlling_is_no_launcher():
    assert o.launcher_vmi_uid(pod(kind="VirtualMachine")) is None
    assert o.launcher_vmi_uid(pod(api="example.com/v1")) is None
    assert o.launcher_vmi_uid(pod(controller=False)) is None
    assert not o.is_launcher_of(pod(owner_uid="other-vmi"), VMI)


def test_a_pod_naming_the_vmi_as_owner_is_not_active_unless_kubevirt_lists_it():
    # a tenant may set an ownerReference to the VMI's UID; KubeVirt's status (a subresource) does not list it
    forged = pod(uid="tenant-pod", labels=LABELS)
    assert o.is_launcher_of(forged, VMI) and not o.is_active_launcher_of(forged, VMI)
    # without activePods (older KubeVirt) the node decides
    older = dict(VMI, status={"nodeName": "n1"})
    assert o.is_active_launcher_of(forged, older) and not o.is_active_launcher_of(pod(node="n2"), older)


def test_an_event_counts_only_with_the_objects_uid_and_virt_controller_as_reporter():
    vmim = {"kind": "VirtualMachineInstanceMigration", "metadata": {"name": "m1", "namespace": "t", "uid": "m-uid"}}
    good = {"metadata": {"name": "e", "namespace": "t"}, "source": {"component": "virt-controller"},
            "involvedObject": {"kind": "VirtualMachineInstanceMigration", "name": "m1", "namespace": "t",
                               "uid": "m-uid"}}
    assert o.event_is_about(good, vmim)
    assert o.event_is_about(dict(good, source={}, reportingComponent="virt-controller"), vmim)
    assert not o.event_is_about(dict(good, source={"component": "kubectl"}), vmim)
    assert not o.event_is_about(dict(good, involvedObject=dict(good["involvedObject"], uid="other")), vmim)
    assert not o.event_is_about(dict(good, involvedObject=dict(good["involvedObject"], uid=None)), vmim)
    assert not o.event_is_about(dict(good, involvedObject=dict(good["involvedObject"], name="m2")), vmim)
    assert not o.event_is_about(good, dict(vmim, metadata=dict(vmim["metadata"], uid=None)))


def test_ref_uids_keeps_only_entries_with_a_uid():
    refs = {"migrations": [{"namespace": "t", "name": "a", "uid": "u1"}, {"namespace": "t", "name": "b"}, "t/c"]}
    assert o.ref_uids(refs, "migrations") == {("t", "a"): "u1"}
    assert o.ref_uids(None, "migrations") == {}
