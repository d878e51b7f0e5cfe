# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tenant-written sizing input (issue 24, items 2 and 3): an error in one VM's own input blocks that VM alone,
named with its namespace and field, in kvquota_check and in the executor's sizing; the namespace label
alpha.kubevirt.io/auto-memory-limits-ratio is read as KubeVirt reads it; a VM's size is pinned to the plan (or the
run's first sizing) and a VM grown since is left out, named with what changed."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.inventory import Snapshot
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import service_fakes
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as c
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as h
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.config import (
    ClusterConfig,
    config_from_cluster,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.launcher import launcher_pod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    AUTO_MEMORY_LIMITS_RATIO_LABEL,
    HOOK_SIDECARS_ANNOTATION,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.vmi import VmInputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import NOW, kubevirt_cr, make_quota, make_vmi, snapshot

Mi = 1024 ** 2
HOOKS = HOOK_SIDECARS_ANNOTATION
RATIO = AUTO_MEMORY_LIMITS_RATIO_LABEL
# auto memory limits need no feature gate from KubeVirt 1.5.0
KV = kubevirt_cr(version="v1.6.0")
THREE_SIDECARS = '[{"image": "a"}, {"image": "b"}, {"image": "c"}]'


def _unlimited_vmi(name, namespace, node="worker-1"):
    """A VMI without a memory limit: KubeVirt gives its pod request x ratio as the limit when a quota tracks
    limits.memory (auto memory limits)."""
    vmi = make_vmi(name, namespace, node=node)
    del vmi["spec"]["domain"]["resources"]["limits"]["memory"]
    return vmi


def _guaranteed_vmi(name, namespace, node="worker-1"):
    """A VMI of Guaranteed QoS (requests = limits): each hook sidecar of its pod then charges 200m and 64M."""
    vmi = make_vmi(name, namespace, node=node)
    vmi["spec"]["domain"]["resources"]["requests"] = dict(vmi["spec"]["domain"]["resources"]["limits"])
    return vmi


def _config(version="1.6.0"):
    return ClusterConfig(kubevirt_version=version)


# ---------------------------------------------------------------- sizing: the error names the VM's own field

def test_a_malformed_hook_sidecar_annotation_is_the_vms_own_error_naming_the_field():
    vmi = make_vmi("vm1", "t")
    vmi["metadata"]["annotations"] = {HOOKS: "{"}
    with pytest.raises(VmInputError) as err:
        launcher_pod(vmi, _config())
    assert isinstance(err.value, InputError)
    assert err.value.field == "metadata.annotations[%s]" % HOOKS
    assert err.value.scope == "vm"


def test_a_malformed_quantity_in_the_vms_spec_is_the_vms_own_error_naming_the_field():
    vmi = make_vmi("vm1", "t")
    vmi["spec"]["domain"]["resources"]["requests"]["memory"] = "lots"
    with pytest.raises(VmInputError) as err:
        launcher_pod(vmi, _config())
    assert err.value.field == "spec.domain.resources.requests.memory"


@pytest.mark.parametrize("label", ["NaN", "Inf", "infinity", "1e300"])
def test_a_ratio_label_kubevirt_renders_no_valid_limit_from_is_the_namespaces_error(label):
    # strconv.ParseFloat reads all four without an error and none is below 1.0: KubeVirt would render
    # int64(request x ratio), which is no valid limit (NaN, infinite, beyond int64)
    with pytest.raises(VmInputError) as err:
        launcher_pod(_unlimited_vmi("vm1", "t"), _config(), namespace_labels={RATIO: label},
                     quota_tracks=frozenset(["limits.memory"]))
    assert err.value.scope == "namespace"
    assert RATIO in err.value.field and label in err.value.message


def _auto_limit(label):
    pod = launcher_pod(_unlimited_vmi("vm1", "t"), _config(), namespace_labels={RATIO: label},
                       quota_tracks=frozenset(["limits.memory"]))
    compute = pod.containers[0]
    assert compute.name == "compute"
    return compute.limits["memory"], compute.requests["memory"]


def test_the_ratio_label_is_read_as_go_reads_it_hexadecimal_included():
    limit, request = _auto_limit("0x1p3")      # Go: 8 (it was read as invalid, so 2.0: an eighth of the real limit)
    assert limit == int(float(request) * 8)
    limit, request = _auto_limit("8")
    assert limit == int(float(request) * 8)
    # what KubeVirt replaces by its default 2.0: a value below 1.0, a malformed one, one out of float64's range
    for label in ("0.5", "abc", "1e400", "0x1"):
        limit, request = _auto_limit(label)
        assert limit == int(float(request) * 2.0), label


# ---------------------------------------------------------------- kvquota_check: that VM alone is blocked

def _two_namespaces(bad_vmi_annotations=None, ns_labels=None, hard="100Gi"):
    bad = make_vmi("vm-bad", "t", node="worker-1")
    good = make_vmi("vm-good", "t", node="worker-1")
    other = make_vmi("vm-other", "u", node="worker-1")
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.memory": hard})], [bad, good]),
                     "u": ([make_quota("compute", "u", {"limits.memory": hard})], [other])})
    if bad_vmi_annotations:
        bad["metadata"]["annotations"] = dict(bad_vmi_annotations)
    if ns_labels:
        snap["namespaces"]["t"]["metadata"]["labels"] = dict(ns_labels)
    return snap


def test_a_malformed_annotation_on_one_vm_blocks_that_vm_alone_in_the_check():
    snap = _two_namespaces({HOOKS: "{"})
    report = c.evaluate(snap, {"now": NOW})
    (blocked,) = report["blocked_vms"]
    assert (blocked["namespace"], blocked["vm"], blocked["kind"]) == ("t", "vm-bad", "vm_input_invalid")
    assert blocked["field"] == "metadata.annotations[%s]" % HOOKS
    assert "t/vm-bad" in blocked["message"] and HOOKS in blocked["message"]
    assert report["summary"]["blocked_vms"] == 1
    # the others of its node and namespace are planned; nothing blocks the node
    assert sorted(k for batch in report["batches"] for k in batch["vms"]) == ["t/vm-good", "u/vm-other"]
    assert report["blockers"] == []
    assert [w["vm"] for w in report["warnings"] if w.get("blocks") == "vm"] == ["vm-bad"]


def test_the_versioned_plan_leaves_the_blocked_vm_out():
    snap = _two_namespaces({HOOKS: "{"})
    planned = c.plan(snap, {"now": NOW})
    data = versioned.build(Snapshot.of(snap), {}, planned.movers, planned.keys, planned.facts, c._now({"now": NOW}))
    assert sorted(data["vms"]) == ["t/vm-good", "u/vm-other"]


def test_a_ratio_label_kubevirt_cannot_render_blocks_only_that_namespaces_vms_with_auto_limits():
    vmis = [_unlimited_vmi("vm1", "t"), _unlimited_vmi("vm2", "t")]
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.memory": "100Gi"})], vmis),
                     "u": ([make_quota("compute", "u", {"limits.memory": "100Gi"})], [_unlimited_vmi("vm3", "u")])},
                    kv=KV)
    snap["namespaces"]["t"]["metadata"]["labels"] = {RATIO: "NaN"}
    report = c.evaluate(snap, {"now": NOW})
    assert sorted((b["namespace"], b["vm"], b["scope"]) for b in report["blocked_vms"]) == [
        ("t", "vm1", "namespace"), ("t", "vm2", "namespace")]
    assert "namespace's namespace label %s" % RATIO in report["blocked_vms"][0]["message"]
    assert [k for batch in report["batches"] for k in batch["vms"]] == ["u/vm3"]


def _grown_by_ratio_label(label="8"):
    """Namespace t's VMs started at the default ratio 2.0 (their running pods), then a project member set the
    label: the target pods would charge four times the running pods' limits.memory, past the quota's hard."""
    vmis = [_unlimited_vmi("vm1", "t"), _unlimited_vmi("vm2", "t")]
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.memory": "40Gi"})], vmis),
                     "u": ([make_quota("compute", "u", {"limits.memory": "40Gi"})], [_unlimited_vmi("vm3", "u")])},
                    kv=KV)
    snap["namespaces"]["t"]["metadata"]["labels"] = {RATIO: label}
    return snap


def test_a_tenants_ratio_label_set_before_the_plan_blocks_its_vms_named_with_the_label_not_the_node():
    report = c.evaluate(_grown_by_ratio_label(), {"now": NOW})
    assert sorted((b["namespace"], b["vm"], b["kind"]) for b in report["blocked_vms"]) == [
        ("t", "vm1", "vm_grows"), ("t", "vm2", "vm_grows")]
    message = report["blocked_vms"][0]["message"]
    assert "namespace label %s=8" % RATIO in message and "limits.memory" in message
    # no blocker for the node, no fix raising t's quota to what the label took; u's VM migrates
    assert report["blockers"] == []
    assert not [f for f in report["fixes"] if f["namespace"] == "t" and f["permanent"]]
    assert [k for batch in report["batches"] for k in batch["vms"]] == ["u/vm3"]


def _at_its_usage(snap, namespace="t"):
    """The quota of namespace with hard = what its VMs' running pods use now (no room for any to grow)."""
    quota = snap["quotas"][namespace][0]
    quota["spec"]["hard"] = dict(quota["status"]["used"])
    quota["status"]["hard"] = dict(quota["status"]["used"])


def test_a_hook_sidecar_annotation_added_to_a_running_vm_blocks_it_named_with_the_annotation():
    vmis = [_guaranteed_vmi("vm1", "t"), _guaranteed_vmi("vm2", "t")]
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.cpu": "100"})], vmis)})
    _at_its_usage(snap)
    vmis[0]["metadata"]["annotations"] = {HOOKS: THREE_SIDECARS}
    report = c.evaluate(snap, {"now": NOW})
    (blocked,) = report["blocked_vms"]
    assert (blocked["vm"], blocked["kind"]) == ("vm1", "vm_grows")
    assert "annotation %s=" % HOOKS in blocked["message"]
    assert report["blockers"] == []
    assert [k for batch in report["batches"] for k in batch["vms"]] == ["t/vm2"]


# ---------------------------------------------------------------- the executor: sizes pinned

class _Cluster(object):
    """What batch_headroom reads itself (the rest comes from the snapshot read_inventory gives)."""

    def __init__(self, snap):
        self.snap = snap

    def list_custom(self, group, version, plural, namespace=None, **kwargs):
        assert plural == "kubevirts"
        return [self.snap["kubevirt"]]

    def list_quotas(self, namespace):
        return copy.deepcopy(self.snap["quotas"].get(namespace) or [])

    def exists(self, path, what):
        for name, ns_obj in self.snap["namespaces"].items():
            if path.endswith("/namespaces/%s" % name):
                return ns_obj
        for items in self.snap["vmis"].values():
            for vmi in items:
                if path.endswith("/namespaces/%s/virtualmachineinstances/%s" % (vmi["metadata"]["namespace"],
                                                                                vmi["metadata"]["name"])):
                    return vmi
        return None


def _pinned_batch(monkeypatch, grow):
    """A plan of t/vm1 and t/vm2, then grow(snapshot) after it; batch_headroom of both with that plan."""
    vmis = [_guaranteed_vmi("vm1", "t"), _guaranteed_vmi("vm2", "t")]
    for index, vmi in enumerate(vmis):
        vmi["metadata"]["resourceVersion"] = str(10 + index)
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.cpu": "100", "limits.memory": "100Gi"})], vmis)})
    _at_its_usage(snap)
    planned_scope = c.plan(snap, {"now": NOW})
    planned = versioned.load(versioned.build(Snapshot.of(snap), {}, planned_scope.movers, planned_scope.keys, planned_scope.facts,
                                             c._now({"now": NOW})))
    after = copy.deepcopy(snap)
    grow(after)
    monkeypatch.setattr(h, "read_inventory", lambda cluster, scope, options=None: Snapshot.of(copy.deepcopy(after)))
    return planned, after


def _with_sidecars(snap):
    vmi = snap["vmis"]["t"][0]
    vmi["metadata"]["annotations"] = {HOOKS: THREE_SIDECARS}
    vmi["metadata"]["resourceVersion"] = "99"


def test_a_vm_grown_after_the_plan_is_left_out_named_with_its_charges_and_the_change(monkeypatch):
    planned, after = _pinned_batch(monkeypatch, _with_sidecars)
    needs, refs, sized = h.batch_headroom(_Cluster(after), [{"namespace": "t", "name": "vm1"},
                                                            {"namespace": "t", "name": "vm2"}], {}, planned)
    (left,) = sized["left_out"]
    assert (left["namespace"], left["name"]) == ("t", "vm1")
    reason = left["reason"]
    assert reason.startswith("t/vm1: its target pod now charges ")
    assert "instead of the planned " in reason
    assert "annotation %s=" % HOOKS in reason and "resourceVersion 10, then 99" in reason
    planned_cpu = versioned.resource_list(planned.vms["t/vm1"]["charge"], "x")["limits.cpu"]
    assert left["grown"]["limits.cpu"]["pinned"] == q.show(planned_cpu, "limits.cpu")
    # the other VM is reserved for alone: what the quota lacks for its target pod, nothing for vm1
    assert [ref["name"] for ref in refs["vms"]] == ["vm2"]
    assert sorted(sized["charges"]) == [("t", "vm2")]
    vm2 = versioned.resource_list(planned.vms["t/vm2"]["charge"], "x")
    assert needs == {("t", "compute"): {"limits.cpu": vm2["limits.cpu"], "limits.memory": vm2["limits.memory"]}}


def test_a_namespace_label_changed_after_the_plan_is_named(monkeypatch):
    # VMIs without a memory limit: a quota tracking limits.memory gives them request x ratio (KubeVirt 1.6)
    vmis = [_unlimited_vmi("vm1", "t"), _unlimited_vmi("vm2", "t")]
    for index, vmi in enumerate(vmis):
        vmi["metadata"]["resourceVersion"] = str(10 + index)
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.memory": "100Gi"})], vmis)}, kv=KV)
    planned_scope = c.plan(snap, {"now": NOW})
    planned = versioned.load(versioned.build(Snapshot.of(snap), {}, planned_scope.movers, planned_scope.keys, planned_scope.facts,
                                             c._now({"now": NOW})))
    after = copy.deepcopy(snap)
    after["namespaces"]["t"]["metadata"]["labels"] = {RATIO: "8"}
    monkeypatch.setattr(h, "read_inventory", lambda cluster, scope, options=None: Snapshot.of(copy.deepcopy(after)))
    needs, refs, sized = h.batch_headroom(_Cluster(after), [{"namespace": "t", "name": "vm1"},
                                                            {"namespace": "t", "name": "vm2"}], {}, planned)
    assert sorted(item["name"] for item in sized["left_out"]) == ["vm1", "vm2"]
    assert "namespace label %s (unset, now 8)" % RATIO in sized["left_out"][0]["reason"]
    assert needs == {} and refs["vms"] == []


def test_without_a_plan_the_first_sizing_is_the_pin(monkeypatch):
    vmis = [_guaranteed_vmi("vm1", "t")]
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.cpu": "100"})], vmis)})
    monkeypatch.setattr(h, "read_inventory", lambda cluster, scope, options=None: Snapshot.of(copy.deepcopy(snap)))
    _needs, _refs, first = h.batch_headroom(_Cluster(snap), [{"namespace": "t", "name": "vm1"}], {})
    pins = first["pins"]
    assert sorted(pins) == [("t", "vm1")] and first["left_out"] == []
    _with_sidecars(snap)
    needs, refs, again = h.batch_headroom(_Cluster(snap), [{"namespace": "t", "name": "vm1"}], {}, pins=pins)
    (left,) = again["left_out"]
    assert "instead of the first computed " in left["reason"]
    assert needs == {} and refs["vms"] == []


def test_a_vm_smaller_than_its_pin_is_reserved_for_at_its_fresh_size(monkeypatch):
    def shrink(snap):
        vmi = snap["vmis"]["t"][0]
        vmi["spec"]["domain"]["resources"]["limits"]["cpu"] = "1"
        vmi["metadata"]["resourceVersion"] = "99"
    planned, after = _pinned_batch(monkeypatch, shrink)
    needs, _refs, sized = h.batch_headroom(_Cluster(after), [{"namespace": "t", "name": "vm1"}], {}, planned)
    assert sized["left_out"] == []
    planned_cpu = versioned.resource_list(planned.vms["t/vm1"]["charge"], "x")["limits.cpu"]
    assert sized["charges"][("t", "vm1")]["limits.cpu"] == planned_cpu - 1


def test_a_refused_target_pod_grown_since_the_plan_is_not_topped_up(monkeypatch):
    planned, after = _pinned_batch(monkeypatch, _with_sidecars)
    vmim = {"metadata": {"name": "m1", "namespace": "t", "uid": "uid-m1"}, "spec": {"vmiName": "vm1"},
            "status": {"phase": "Pending", "conditions": [{
                "type": "migrationRejectedByResourceQuota", "status": "True",
                "lastTransitionTime": "2025-01-31T12:00:00Z",
                "message": 'exceeded quota: compute, requested: limits.cpu=2100m, used: limits.cpu=4, '
                           'limited: limits.cpu=6'}]}}

    class Cluster(_Cluster):
        def get(self, path, what):
            return vmim

    found = h.refused_target_pods(Cluster(after), [{"namespace": "t", "name": "m1"}], {}, planned=planned)
    (left,) = found["left_out"]
    assert left["name"] == "vm1" and "annotation %s=" % HOOKS in left["reason"]
    assert found["exact"] == {} and found["charge"] == {}


# ---------------------------------------------------------------- the batch runner

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_migrate import _Quotas, _Refused, _built, _executor, _recording, _reserve_writing  # noqa: E402  (its fakes)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import migrate as m  # noqa: E402

GROWN = "t/vm-2: its target pod now charges limits.cpu=2600m instead of the planned limits.cpu=2 (changed: " \
        "annotation hooks.kubevirt.io/hookSidecars=[...]; the VMI (resourceVersion 10, then 99))"


class _Node(_Quotas):
    """Two VMIs on node-1 (vm-1, vm-2) for prepare and vms_left."""

    def list_custom(self, group, version, plural, namespace=None, label_selector=None):
        if plural == "virtualmachineinstances":
            return [{"metadata": {"namespace": "t", "name": name, "uid": "uid-" + name},
                     "status": {"nodeName": "node-1", "phase": "Running",
                                "conditions": [{"type": "LiveMigratable", "status": "True"}]}}
                    for name in ("vm-1", "vm-2")]
        return []

    def list_pods(self, **kwargs):
        return []


def _two_vm_batch(monkeypatch):
    cluster = _Node({("t", "compute"): {"limits.cpu": "3000m"}}, {("t", "compute"): {"limits.cpu": "3000m"}})
    asked = []

    def batch_headroom(c, vms, options=None, planned=None, pins=None):
        asked.append(sorted(vm["name"] for vm in vms))
        sized = {"charges": {("t", "vm-1"): {"limits.cpu": 2}}, "quota_charges": {}, "from_plan": False,
                 "left_out": [{"namespace": "t", "name": "vm-2", "reason": GROWN}], "pins": {}}
        return {("t", "compute"): {"limits.cpu": "2"}}, {"vms": [{"namespace": "t", "name": "vm-1"}],
                                                         "sourcePods": []}, sized
    monkeypatch.setattr(h, "batch_headroom", batch_headroom)
    service_fakes.patch(monkeypatch, "reserve", _reserve_writing(cluster))
    service_fakes.patch(monkeypatch, "record_migrations", _recording(cluster))
    ex = _built(cluster, [["t/vm-1", "t/vm-2"]], clock=cluster.clock, sleep=cluster.sleep, token="tok")
    ex.record.per_gib_now, ex.record.progress_now = 150, 150
    ex.record.started = 0.0
    return ex, ex.batches[0], cluster, asked


def test_prepare_leaves_a_grown_vm_out_of_its_batch_and_the_run_says_why(monkeypatch):
    ex, batch, cluster, asked = _two_vm_batch(monkeypatch)
    ex.runner.start(batch)
    assert asked == [["vm-1", "vm-2"]]
    assert batch.vms == [("t", "vm-1")]
    assert [mig["vm"] for mig in batch.migrations] == ["vm-1"]
    made = [o for o in cluster.order if o.startswith(("create", "record"))]
    assert made == ["create vm-1-kvq-tok", "record node-1-b0 vm-1-kvq-tok"]
    assert ex.runner.left_out == {("t", "vm-2"): GROWN}
    assert "batch 1/1: left out, it stays where it is: " + GROWN in ex.log
    # what the node_maintenance role reads: the VM still on the node, with why
    left = dict(((vm["namespace"], vm["name"]), vm) for vm in ex.left_on_nodes()[0])
    assert left[("t", "vm-2")]["left_out"] == GROWN
    assert "left_out" not in left[("t", "vm-1")]


def test_a_batch_whose_every_vm_grew_reserves_nothing(monkeypatch):
    ex, batch, cluster, _asked = _two_vm_batch(monkeypatch)
    batch.keys = batch.vms = [("t", "vm-2")]

    def batch_headroom(c, vms, options=None, planned=None, pins=None):
        return {}, {"vms": [], "sourcePods": []}, {"charges": {}, "quota_charges": {}, "from_plan": False,
                                                   "left_out": [{"namespace": "t", "name": "vm-2", "reason": GROWN}],
                                                   "pins": {}}
    monkeypatch.setattr(h, "batch_headroom", batch_headroom)
    ex.runner.start(batch)
    assert batch.vms == [] and batch.state == m.RELEASED and batch.targets == []
    assert not [o for o in cluster.order if o.startswith(("reserve", "create"))]


def test_a_top_up_is_never_made_for_a_target_pod_grown_since_the_plan(monkeypatch):
    # the batch's only VM grew after its reservation: no top-up, and (issue 24, second review) no stop of the whole
    # run either: the VM is left out, named, and the run goes on (see test_grown_after_prepare for the cancel)
    fake = _Refused(monkeypatch)
    fake.found["left_out"] = [{"namespace": "t", "name": "vm-1", "reason": GROWN.replace("vm-2", "vm-1")}]
    ex, batch = _executor()
    batch.state = m.RUNNING
    ex.runner.top_up(batch, [{"metadata": {"namespace": "t", "name": "m1"}}])
    assert fake.reserved == []
    reason = ex.runner.left_out[("t", "vm-1")]
    assert "t/vm-1: its target pod now charges" in reason and "hookSidecars" in reason
    assert batch.vms == [] and batch.state == m.FINAL and not batch.moved
    assert "no top-up: t/vm-1 grew since the reservation was made" in ex.log[-1]


def test_a_malformed_rancher_quota_annotation_blocks_only_that_namespaces_vms():
    rancher = {"resourcequota.management.cattle.io/default-resource-quota": "true"}
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.memory": "100Gi"}, labels=rancher)], [make_vmi("vm1", "t")]),
                     "u": ([make_quota("compute", "u", {"limits.memory": "100Gi"}, labels=rancher)], [make_vmi("vm2", "u")])})
    for ns in ("t", "u"):
        snap["namespaces"][ns]["metadata"]["annotations"] = {"field.cattle.io/projectId": "c-1:p-1",
                                                             "field.cattle.io/resourceQuota": "{}"}
    snap["namespaces"]["t"]["metadata"]["annotations"]["field.cattle.io/resourceQuota"] = "{"
    snap["rancher_projects"] = [{"metadata": {"namespace": "c-1", "name": "p-1"},
                                 "spec": {"resourceQuota": {"limit": {"limitsMemory": "1000Gi"}}}}]
    report = c.evaluate(snap, {"now": NOW})
    (blocked,) = report["blocked_vms"]
    assert (blocked["namespace"], blocked["vm"], blocked["scope"]) == ("t", "vm1", "namespace")
    assert blocked["field"] == "namespace annotation field.cattle.io/resourceQuota"
    assert [k for batch in report["batches"] for k in batch["vms"]] == ["u/vm2"]
    assert report["blockers"] == []


# ---------------------------------------------------------------- follow mode

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_follow import _Cluster as _FollowCluster, _faked, _follower  # noqa: E402


def test_a_followed_vm_grown_past_its_pin_is_never_reserved_for_and_named_once(monkeypatch):
    cluster = _FollowCluster(vms=2)
    _faked(monkeypatch, cluster)
    faked = h.batch_headroom
    reason = "t1/vm-1: its target pod now charges limits.memory=3Gi instead of the first computed limits.memory=2Gi " \
             "(changed: namespace label alpha.kubevirt.io/auto-memory-limits-ratio (unset, now 8))"

    def batch_headroom(c, vms, options=None, planned=None, pins=None):
        kept = [vm for vm in vms if (vm["namespace"], vm["name"]) != ("t1", "vm-1")]
        needs, refs, sized = faked(c, kept, options, planned)
        gone = [{"namespace": "t1", "name": "vm-1", "reason": reason}] if len(kept) < len(vms) else []
        return needs, refs, dict(sized, left_out=gone, pins={})
    monkeypatch.setattr(h, "batch_headroom", batch_headroom)
    cluster.evacuate(2)
    result = _follower(cluster, follow_until="deadline", deadline_seconds=15).run()
    grown_uid = "u-vm-1"
    assert all(grown_uid not in uids for uids in cluster.reserved.values()), cluster.reserved
    assert cluster.vmis[("t0", "vm-0")]["status"]["nodeName"] == "n2"
    assert cluster.vmis[("t1", "vm-1")]["status"]["nodeName"] == "n1"
    named = [line for line in result["progress"] if reason in line]
    assert len(named) == 1, result["progress"]     # taken once, never again each poll


def test_a_label_the_namespace_had_when_its_vms_started_is_not_blamed_for_a_configuration_growth():
    """The VMs started with the ratio label 3 in place (their running pods have it) and an overhead ratio of 1;
    the administrator then raised the KubeVirt CR's ratio: every target pod grows a little, past the quota. That is
    no tenant's change: the quota's usage_above_hard blocker, no VM blocked alone for the label."""
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import format_resource_list
    old = config_from_cluster(kubevirt_cr(version="v1.6.0", ratio="1"))
    vmis = [_unlimited_vmi("vm1", "t"), _unlimited_vmi("vm2", "t")]
    labels = {RATIO: "3"}
    pods = []
    for vmi in vmis:
        pod = launcher_pod(vmi, old, namespace_labels=labels, quota_tracks=frozenset(["limits.memory"]))
        pods.append(_manifest(vmi, pod, format_resource_list))
    used = q.total(q.pod_usage(p) for p in pods)["limits.memory"]
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.memory": q.show(used, "limits.memory")},
                                       used={"limits.memory": q.show(used, "limits.memory")})], vmis)},
                    kv=kubevirt_cr(version="v1.6.0", ratio="2.0"))
    snap["pods"]["t"] = pods
    snap["namespaces"]["t"]["metadata"]["labels"] = dict(labels)
    report = c.evaluate(snap, {"now": NOW})
    assert report["blocked_vms"] == []
    assert [b["kind"] for b in report["blockers"]] == ["usage_above_hard"]


def c_name(vmi):
    return "virt-launcher-%s-abcde" % vmi["metadata"]["name"]


def _manifest(vmi, pod, format_resource_list):
    """The running pod of vmi as the API shows it, from a sized launcher pod (as test_check.launcher_manifest)."""
    def container(ct):
        return {"name": ct.name, "resources": {"requests": format_resource_list(ct.requests),
                                               "limits": format_resource_list(ct.limits)}}
    name = c_name(vmi)
    return {"metadata": {"name": name, "namespace": vmi["metadata"]["namespace"], "uid": "uid-pod-" + name,
                         "labels": {"kubevirt.io": "virt-launcher"},
                         "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                              "name": vmi["metadata"]["name"], "uid": vmi["metadata"]["uid"],
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": vmi["status"]["nodeName"], "containers": [container(ct) for ct in pod.containers],
                     "initContainers": [container(ct) for ct in pod.init_containers]},
            "status": {"phase": "Running"}}
