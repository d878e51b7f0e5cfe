# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The part of a node drain a label selector cannot do: evict the pods that only pose as VM pods; what a drain of
the node still has to deal with (pods_left, to_drain: node_maintenance skips a drain module with nothing to do);
the cordon and the uncordon.

node_maintenance drains with kubernetes.core.k8s_drain and `pod_selectors: kubevirt.io!=virt-launcher`: VM
pods are left to the live migrations (evicting a launcher makes KubeVirt's eviction webhook answer 429 and
start an evacuation nobody here controls). Any tenant with `edit` in its namespace can put that label on a
pod of its own and bind it to the node (spec.nodeName), so the selector alone leaves a tenant workload on a
"drained" node. The pods the selector skipped are judged here by ownership (ownership.py) and by what only
KubeVirt writes (VMI and VMIM status); a pod is a VM pod when it is, by a controller ownerReference to a VMI's
UID:
- the VMI's active launcher (listed in status.activePods);
- the target pod of a live migration of that VMI still under way (VMI status.migrationState, or the status of
  a VMIM of that VMI that is not final): it becomes the active launcher;
- the source pod a completed migration left behind (status.migrationState.sourcePod on its source node,
  created before the migration started): KubeVirt ends it by itself;
- a finished pod (Succeeded, Failed) of that VMI, such as the source pod of an earlier migration: it runs
  nothing.
Every other labelled pod is an impostor, evicted through the Eviction API as k8s_drain would have evicted it
without the label, under the same options (force, ignore_daemonsets, delete_emptydir_data; mirror pods are
left, as the API server cannot delete them). A tenant can also point a controller ownerReference at its own
VMI (it can read the UID): that pod is owned, but neither active nor a migration's pod, so it goes too.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import time

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import ownership
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import api_path
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    InputError,
    NotFoundError,
    UnreachableError,
    WaitTimeoutError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta as _meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.timeutil import parse_time
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import FINAL_MIGRATION_PHASES, KUBEVIRT
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.quotas import FINISHED_POD_PHASES

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
TOO_MANY_REQUESTS = 429


def launcher_labelled(pod):
    """Whether pod carries the label kubevirt.io=virt-launcher: what k8s_drain's selector kubevirt.io!=virt-launcher
    leaves on the node (anyone who may create a pod may set it)."""
    return (_meta(pod).get("labels") or {}).get("kubevirt.io") == "virt-launcher"


def _ref(obj):
    meta = _meta(obj)
    return "%s/%s" % (meta.get("namespace"), meta.get("name"))


def _epoch(stamp):
    """Seconds since the epoch of an RFC 3339 timestamp (timeutil.parse_time), or None when absent or malformed."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return parse_time(stamp)
    except InputError:
        return None


def _live_migration_target(pod, vmi, migrations):
    """The name of the migration whose target pod pod is, when that migration is still under way, else None.
    Only status is trusted (KubeVirt writes it); the caller has checked that pod is owned by vmi."""
    name = _meta(pod).get("name")
    state = ((vmi or {}).get("status") or {}).get("migrationState") or {}
    if state.get("targetPod") == name and not state.get("completed") and not state.get("failed"):
        return state.get("migrationUid") or "of the VMI's status.migrationState"
    vmi_meta = _meta(vmi)
    for migration in migrations or ():
        meta = _meta(migration)
        status = migration.get("status") or {}
        if (meta.get("namespace") == vmi_meta.get("namespace")
                and (migration.get("spec") or {}).get("vmiName") == vmi_meta.get("name")
                and status.get("phase") not in FINAL_MIGRATION_PHASES
                and (status.get("migrationState") or {}).get("targetPod") == name):
            return meta.get("name")
    return None


def _vacated_source(pod, vmi):
    """Whether pod is the source pod of the VMI's completed migration: named so in status.migrationState, on its
    source node, and created before the migration started (a pod re-created later under the freed name is not)."""
    state = ((vmi or {}).get("status") or {}).get("migrationState") or {}
    meta = _meta(pod)
    if not state.get("completed") or state.get("failed") or state.get("sourcePod") != meta.get("name"):
        return False
    if state.get("sourceNode") and state["sourceNode"] != ((pod or {}).get("spec") or {}).get("nodeName"):
        return False
    started, created = _epoch(state.get("startTimestamp")), _epoch(meta.get("creationTimestamp"))
    return started is None or created is None or created <= started


def vm_pod_reason(pod, vmis_by_uid, migrations=()):
    """Why pod is a VM pod (see the module's docstring), or None when it only poses as one."""
    vmi = vmis_by_uid.get(ownership.launcher_vmi_uid(pod))
    if vmi is None or _meta(vmi).get("namespace") != _meta(pod).get("namespace"):
        return None
    if ownership.is_active_launcher_of(pod, vmi):
        return "active launcher of VMI %s (status.activePods)" % _ref(vmi)
    migration = _live_migration_target(pod, vmi, migrations)
    if migration:
        return "target pod of migration %s of VMI %s, under way" % (migration, _ref(vmi))
    if _vacated_source(pod, vmi):
        return "source pod of the completed migration of VMI %s (KubeVirt ends it)" % _ref(vmi)
    if ((pod or {}).get("status") or {}).get("phase") in FINISHED_POD_PHASES:
        # an earlier launcher of the VMI (or a pod pointing at it) that has finished runs nothing
        return "finished pod of VMI %s (runs nothing)" % _ref(vmi)
    return None


def impostor_reason(pod, vmis_by_uid):
    """Why a pod that is no VM pod was taken for one by its labels."""
    vmi_uid = ownership.launcher_vmi_uid(pod)
    if not vmi_uid:
        return "labelled as a virt-launcher pod but no controller ownerReference names a VirtualMachineInstance"
    vmi = vmis_by_uid.get(vmi_uid)
    if vmi is None or _meta(vmi).get("namespace") != _meta(pod).get("namespace"):
        return "its controller ownerReference names VirtualMachineInstance uid %s, which does not exist in " \
               "namespace %s" % (vmi_uid, _meta(pod).get("namespace"))
    return "owned by VMI %s but neither in its status.activePods nor the pod of one of its migrations" % _ref(vmi)


def find_impostors(pods, vmis, migrations=(), node=None):
    """Split the pods k8s_drain's label selector skipped (pods on node labelled kubevirt.io=virt-launcher) into
    ({namespace, name, uid, reason} of the impostors, the same of the VM pods kept). Pods already terminating
    (deletionTimestamp) are neither: they are on their way out. Pure."""
    vmis_by_uid = dict((ownership.uid_of(vmi), vmi) for vmi in vmis or () if ownership.uid_of(vmi))
    impostors, vm_pods = [], []
    for pod in pods or ():
        meta = _meta(pod)
        if meta.get("deletionTimestamp"):
            continue
        if node and ((pod.get("spec") or {}).get("nodeName")) != node:
            continue
        entry = {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")}
        reason = vm_pod_reason(pod, vmis_by_uid, migrations)
        if reason:
            vm_pods.append(dict(entry, reason=reason))
        else:
            impostors.append(dict(entry, reason=impostor_reason(pod, vmis_by_uid)))
    return impostors, vm_pods


def drain_category(pod):
    """How kubernetes.core.k8s_drain treats pod (its filter_pods, in its order): 'mirror' (never deleted),
    'finished', 'daemonset', 'local_storage' (emptyDir), 'unmanaged' (no ownerReferences) or 'managed'."""
    meta = _meta(pod)
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "mirror"
    if ((pod or {}).get("status") or {}).get("phase") in FINISHED_POD_PHASES:
        return "finished"
    owners = meta.get("ownerReferences") or []
    if any(isinstance(ref, dict) and ref.get("kind") == "DaemonSet" for ref in owners):
        return "daemonset"
    if any(isinstance(vol, dict) and "emptyDir" in vol for vol in ((pod or {}).get("spec") or {}).get("volumes") or ()):
        return "local_storage"
    if not owners:
        return "unmanaged"
    return "managed"


def to_drain(pods, node, ignore_daemonsets=False):
    """The pods on node without the label kubevirt.io=virt-launcher that a drain with k8s_drain's options acts on
    (evicts, refuses without force or delete_emptydir_data, or waits for while they terminate), each {namespace,
    name, uid, category}: every one but mirror pods, finished pods and, under ignore_daemonsets, pods only a
    DaemonSet owns (category daemonset; one with another owner or an emptyDir volume is daemonset_mixed). Where
    there is none, node_maintenance skips k8s_drain. Pure."""
    found = []
    for pod in pods or ():
        meta = _meta(pod)
        if ((pod.get("spec") or {}).get("nodeName")) != node:
            continue
        category = drain_category(pod)
        if category in ("mirror", "finished"):
            continue
        if meta.get("deletionTimestamp"):
            # k8s_drain waits for it to be gone (up to its wait_timeout) before the maintenance goes on
            category = "terminating"
        elif category == "daemonset" and not _only_a_daemonset_pod(pod):
            # k8s_drain's versions differ on a DaemonSet pod with another owner or an emptyDir volume (5.x evicts
            # or refuses it, 6.x leaves it): counted for k8s_drain, with or without ignore_daemonsets
            category = "daemonset_mixed"
        elif category == "daemonset" and ignore_daemonsets:
            continue
        found.append({"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid"),
                      "category": category})
    return found


def _only_a_daemonset_pod(pod):
    """A pod whose one owner is a DaemonSet and that has no emptyDir volume: every k8s_drain version leaves it
    under ignore_daemonsets."""
    owners = _meta(pod).get("ownerReferences") or []
    volumes = ((pod or {}).get("spec") or {}).get("volumes") or ()
    return (len(owners) == 1 and isinstance(owners[0], dict) and owners[0].get("kind") == "DaemonSet"
            and not any(isinstance(vol, dict) and "emptyDir" in vol for vol in volumes))


def pods_left(pods, node):
    """What a drain of node still has to deal with among pods (the node's pods, as listed): {labelled: the pods
    labelled kubevirt.io=virt-launcher neither terminating nor finished (kvquota_drain judges them), others:
    to_drain's pods, DaemonSet pods included (k8s_drain's work, or its refusal)}, each {namespace, name, uid}
    (others with their category). Pure."""
    labelled = []
    for pod in pods or ():
        meta = _meta(pod)
        if (launcher_labelled(pod) and not meta.get("deletionTimestamp")
                and (pod.get("spec") or {}).get("nodeName") == node
                and ((pod.get("status") or {}).get("phase")) not in FINISHED_POD_PHASES):
            labelled.append({"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")})
    others = [pod for pod in pods or () if not launcher_labelled(pod)]
    return {"labelled": labelled, "others": to_drain(others, node)}


def select_evictions(impostor_pods, force=False, ignore_daemonsets=False, delete_emptydir_data=False):
    """(pods to evict, [{namespace, name, uid, reason}] left alone) of the impostor pods, as k8s_drain would have
    chosen without their label. Raises InputError naming the pods and the option when k8s_drain would have
    refused (unmanaged without force, emptyDir without delete_emptydir_data, DaemonSet pods without
    ignore_daemonsets), before anything is evicted."""
    evict, left, refused = [], [], {}
    for pod in impostor_pods:
        category = drain_category(pod)
        meta = _meta(pod)
        entry = {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")}
        if category == "mirror":
            left.append(dict(entry, reason="mirror pod: the API server cannot delete it (as k8s_drain)"))
        elif category == "daemonset" and ignore_daemonsets:
            left.append(dict(entry, reason="DaemonSet pod, ignore_daemonsets is set (as k8s_drain)"))
        elif (category == "daemonset" or category == "unmanaged" and not force
              or category == "local_storage" and not delete_emptydir_data):
            refused.setdefault(category, []).append(_ref(pod))
        else:
            evict.append(pod)
    if refused:
        options = {"unmanaged": ("not managed by any controller", "force: true"),
                   "local_storage": ("with emptyDir volumes", "delete_emptydir_data: true"),
                   "daemonset": ("managed by a DaemonSet", "ignore_daemonsets: true")}
        problems = ["%s %s" % (options[key][0], ", ".join(sorted(refused[key]))) for key in sorted(refused)]
        fixes = [options[key][1] for key in sorted(refused)]
        raise InputError("cannot evict the pods on the node that pose as virt-launcher pods: %s (k8s_drain "
                         "would refuse them too without the label)" % "; ".join(problems),
                         "set %s (as for k8s_drain's delete_options), or delete these pods yourself"
                         % " and ".join(fixes))
    return evict, left


def eviction_path(namespace, name):
    return api_path("v1", "pods", namespace, name) + "/eviction"


def _eviction_body(pod):
    meta = _meta(pod)
    # Conditional on the uid: the very pod judged, never one re-created under its name (409, re-read and judged
    # again). Not on resourceVersion: its owner could then stall the drain by touching the pod again and again,
    # and nothing it can change (labels, ownerReferences) makes it a VM pod, only KubeVirt's status can.
    return {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
            "deleteOptions": {"preconditions": {"uid": meta.get("uid")}}}


def _status(err):
    return (getattr(err, "details", None) or {}).get("status")


def _gone_from(pod, current, node):
    """Whether the pod judged (pod) is off node in current (its re-read, None when gone): deleted, re-created
    (another uid), terminating (the lab has no kubelet to finish it) or bound elsewhere."""
    if current is None or ownership.uid_of(current) != ownership.uid_of(pod):
        return True
    return bool(_meta(current).get("deletionTimestamp")) or (current.get("spec") or {}).get("nodeName") != node


class Drain(object):
    """Reads, judges and evicts the impostors of one node (cluster: cluster.Cluster or a fake with get_pod,
    list_pods, list_custom and request)."""

    def __init__(self, cluster, node, force=False, ignore_daemonsets=False, delete_emptydir_data=False,
                 wait_timeout=600, wait_sleep=5, clock=time.monotonic, sleep=time.sleep):
        self.cluster = cluster
        self.node = node
        self.options = {"force": bool(force), "ignore_daemonsets": bool(ignore_daemonsets),
                        "delete_emptydir_data": bool(delete_emptydir_data)}
        self.wait_timeout = wait_timeout
        self.wait_sleep = max(0.1, float(wait_sleep))
        self.clock = clock
        self.sleep = sleep

    def read(self):
        """(labelled pods on the node, VMIs and VMIMs of their namespaces, the node's other pods): one list of the
        node's pods."""
        pods = self.cluster.list_pods(field_selector="spec.nodeName=%s" % self.node)
        labelled = [pod for pod in pods if launcher_labelled(pod)]
        others = [pod for pod in pods if not launcher_labelled(pod)]
        vmis, migrations = [], []
        for namespace in sorted(set(_meta(pod).get("namespace") for pod in labelled)):
            vmis += self.cluster.list_custom(*KUBEVIRT, "virtualmachineinstances", namespace=namespace)
            migrations += self.cluster.list_custom(*KUBEVIRT, "virtualmachineinstancemigrations",
                                                   namespace=namespace)
        return labelled, vmis, migrations, others

    def plan(self):
        """(impostor pods to evict, impostors left alone, impostors as {namespace, name, uid, reason}, VM pods,
        the node's other pods a drain acts on)."""
        pods, vmis, migrations, others = self.read()
        impostors, vm_pods = find_impostors(pods, vmis, migrations, node=self.node)
        by_uid = dict((entry["uid"], entry) for entry in impostors)
        impostor_pods = [pod for pod in pods if ownership.uid_of(pod) in by_uid]
        evict, left = select_evictions(impostor_pods, **self.options)
        return evict, left, impostors, vm_pods, to_drain(others, self.node, self.options["ignore_daemonsets"])

    def _recheck(self, pod):
        """The pod re-read and judged again after its eviction's precondition failed: None when it is gone or
        no longer an impostor on the node, else the current pod."""
        meta = _meta(pod)
        try:
            current = self.cluster.get_pod(meta.get("namespace"), meta.get("name"))
        except NotFoundError:
            return None
        if _gone_from(pod, current, self.node):
            return None
        vmis = self.cluster.list_custom(*KUBEVIRT, "virtualmachineinstances",
                                        namespace=meta.get("namespace"))
        migrations = self.cluster.list_custom(*KUBEVIRT, "virtualmachineinstancemigrations",
                                              namespace=meta.get("namespace"))
        impostors, _vm_pods = find_impostors([current], vmis, migrations, node=self.node)
        return current if impostors else None

    def evict(self, pods):
        """Evict each pod (Eviction API, policy/v1), retrying a 429 (a PodDisruptionBudget, or a webhook such as
        KubeVirt's) until wait_timeout; then wait until each is gone or terminating. Returns the pods evicted."""
        deadline = self.clock() + max(0, self.wait_timeout)
        pending = list(pods)
        evicted, refusals = [], {}
        while pending:
            retry = []
            for pod in pending:
                meta = _meta(pod)
                what = "evict pod %s in namespace %s" % (meta.get("name"), meta.get("namespace"))
                try:
                    self.cluster.request("POST", eviction_path(meta.get("namespace"), meta.get("name")),
                                         body=_eviction_body(pod), what=what)
                    evicted.append(pod)
                except NotFoundError:
                    pass   # gone already
                except ConflictError:
                    current = self._recheck(pod)
                    if current is not None:
                        retry.append(current)
                except UnreachableError as err:
                    if _status(err) != TOO_MANY_REQUESTS:
                        raise
                    refusals[_ref(pod)] = getattr(err, "message", str(err))
                    retry.append(pod)
            pending = retry
            if pending and self.clock() >= deadline:
                raise WaitTimeoutError(
                    "the eviction of %s, which only pose(s) as virt-launcher pods, was refused for %ss (429): %s"
                    % (", ".join(_ref(pod) for pod in pending), self.wait_timeout,
                       "; ".join("%s: %s" % (ref, refusals.get(ref, "conflict")) for ref in sorted(
                           _ref(pod) for pod in pending))),
                    "find the PodDisruptionBudget or webhook that refuses it (kubectl get pdb -n <namespace>), "
                    "then delete the pod as an administrator (kubectl delete pod -n <namespace> <name>) and re-run",
                    details={"result": {"evicted": [self.entry(pod) for pod in evicted]}})
            if pending:
                self.sleep(self.wait_sleep)
        self.wait_gone(evicted, deadline)
        return evicted

    def wait_gone(self, pods, deadline):
        """Wait until each evicted pod is gone, terminating or off the node."""
        left = list(pods)
        while True:
            still = []
            for pod in left:
                meta = _meta(pod)
                try:
                    current = self.cluster.get_pod(meta.get("namespace"), meta.get("name"))
                except NotFoundError:
                    current = None
                if not _gone_from(pod, current, self.node):
                    still.append(pod)
            left = still
            if not left:
                return
            if self.clock() >= deadline:
                raise WaitTimeoutError(
                    "evicted pods still on node %s after %ss: %s" % (self.node, self.wait_timeout,
                                                                     ", ".join(_ref(pod) for pod in left)),
                    "look at why they do not terminate (kubectl describe pod -n <namespace> <name>: finalizers?), "
                    "raise the drain timeout, and re-run")
            self.sleep(self.wait_sleep)

    @staticmethod
    def entry(pod):
        meta = _meta(pod)
        return {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")}

    def run(self, check_mode=False):
        """Judge the node's labelled pods and evict the impostors. Returns {impostors, evicted, left, vm_pods,
        changed}; check_mode evicts nothing (evicted then lists what would be)."""
        if not self.node or not isinstance(self.node, str):
            raise InputError("node must name the node being drained, got %r" % (self.node,), "give node: <node name>")
        if self.wait_timeout is None or self.wait_timeout < 0:
            raise InputError("wait_timeout must be 0 or more seconds, got %r" % (self.wait_timeout,),
                             "give the drain's timeout in seconds, e.g. wait_timeout: 600")
        evict, left, impostors, vm_pods, others = self.plan()
        if check_mode or not evict:
            return {"impostors": impostors, "evicted": [self.entry(pod) for pod in evict], "left": left,
                    "vm_pods": vm_pods, "others": others, "changed": bool(evict)}
        evicted = self.evict(evict)
        return {"impostors": impostors, "evicted": [self.entry(pod) for pod in evicted], "left": left,
                "vm_pods": vm_pods, "others": others, "changed": bool(evicted)}


def drain_impostors(cluster, node, force=False, ignore_daemonsets=False, delete_emptydir_data=False,
                    wait_timeout=600, wait_sleep=5, check_mode=False):
    """Evict the pods on node that pose as VM pods (see the module docstring). Returns {impostors, evicted,
    left, vm_pods, changed}."""
    return Drain(cluster, node, force=force, ignore_daemonsets=ignore_daemonsets,
                 delete_emptydir_data=delete_emptydir_data, wait_timeout=wait_timeout,
                 wait_sleep=wait_sleep).run(check_mode=check_mode)


def _set_unschedulable(cluster, node_obj, wanted, check_mode, verb):
    """Set the node's spec.unschedulable to wanted (True: cordon, False: uncordon): False when it already was,
    True when this call wrote it (or would, in check mode). A merge patch conditional on the node's
    resourceVersion; on a conflict the node is read again (a patch whose answer was lost and that did apply is
    told by its details)."""
    name = _meta(node_obj).get("name")
    path = api_path("v1", "nodes", name=name)
    for _attempt in range(5):
        if bool((node_obj.get("spec") or {}).get("unschedulable")) == wanted:
            return False
        if check_mode:
            return True
        try:
            # false is written as null (removed), as kubectl uncordon leaves the field
            cluster.request("PATCH", path, body={"metadata": {"resourceVersion": _meta(node_obj).get("resourceVersion")},
                                                 "spec": {"unschedulable": True if wanted else None}},
                            content_type="application/merge-patch+json", what="%s node %s" % (verb, name))
            return True
        except ConflictError as err:
            node_obj = cluster.get(path, "read node %s" % name)
            if err.details.get("maybe_applied") and bool((node_obj.get("spec") or {}).get("unschedulable")) == wanted:
                return True
    raise ConflictError("node %s changed on every one of 5 attempts to %s it" % (name, verb),
                        "run again; if it persists, %s the node with `kubectl %s %s`" % (verb, verb, name))


def cordon(cluster, node_obj, check_mode=False):
    """Mark a node unschedulable, as `kubectl cordon` does: 'cordoned' (this call set spec.unschedulable) or
    'was_cordoned' (it already was)."""
    return "cordoned" if _set_unschedulable(cluster, node_obj, True, check_mode, "cordon") else "was_cordoned"


def uncordon(cluster, name, check_mode=False):
    """Make node name schedulable again, as `kubectl uncordon` does: 'uncordoned' (this call cleared
    spec.unschedulable) or 'was_schedulable' (it already was)."""
    node_obj = cluster.get(api_path("v1", "nodes", name=name), "read node %s" % name)
    return "uncordoned" if _set_unschedulable(cluster, node_obj, False, check_mode, "uncordon") else "was_schedulable"
