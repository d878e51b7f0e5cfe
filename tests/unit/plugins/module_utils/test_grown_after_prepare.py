# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 24, second review: a VM grown after its batch's reservation was made (a tenant's hook sidecar on its running
VMI while the batch waited, prepared ahead) never has its growth paid for by a sibling's top-up: its migration is
cancelled, it is left out and named, and the run goes on; a top-up never brings a reservation past the batch's
pinned charges. Valid but hostile JSON (nested deeper than Python's decoder goes, or of another shape) in tenant
input blocks only its VM or namespace; an unexpected exception still stops the run cleanly."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
from fractions import Fraction

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.inventory import Snapshot
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import service_fakes
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import rancher as rancher_owner
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as c
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as h
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import migrate as m
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.config import ClusterConfig
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.launcher import launcher_pod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.vmi import VmInputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError, KvquotaError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import NOW, make_quota, make_vmi, snapshot
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_fence_migrations import _Cluster as _FenceCluster, _prepared, _runner
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_migrate import MI, _Refused, _built, _executor
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_tenant_input import HOOKS, _at_its_usage, _guaranteed_vmi

DEEP = "[" * 5000 + "]" * 5000      # valid JSON (Go's decoder takes depth up to 10000); Python's recursion does not


# ---------------------------------------------------------------------------
# a sibling's top-up never pays for a VM grown after the reservation

class _Api(object):
    """The refused migration to read, and what the runner deletes."""

    def __init__(self, vmims):
        self.vmims = vmims
        self.deleted = []

    def get(self, path, what):
        return self.vmims[path.rsplit("/", 1)[1]]

    def delete(self, path, what):
        self.deleted.append(path.rsplit("/", 1)[1])


def _vm1_grown_after_the_reservation(monkeypatch, sidecars):
    """t/vm1 and t/vm2 planned and reserved for exactly (quota t/compute at its usage); then vm1 gets hook sidecars
    and its larger target pod is admitted on vm2's share: vm2's target pod is refused."""
    vmis = [_guaranteed_vmi("vm1", "t"), _guaranteed_vmi("vm2", "t")]
    for index, vmi in enumerate(vmis):
        vmi["metadata"]["resourceVersion"] = str(10 + index)
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.cpu": "100", "limits.memory": "100Gi"})], vmis)})
    _at_its_usage(snap)
    scope = c.plan(snap, {"now": NOW})
    planned = versioned.load(versioned.build(Snapshot.of(snap), {}, scope.movers, scope.keys, scope.facts, c._now({"now": NOW})))
    p1 = versioned.resource_list(planned.vms["t/vm1"]["charge"], "x")
    p2 = versioned.resource_list(planned.vms["t/vm2"]["charge"], "x")
    after = copy.deepcopy(snap)
    quota = after["quotas"]["t"][0]
    source = dict((n, parse_quantity(v)) for n, v in quota["status"]["used"].items())
    reserved = dict((n, p1[n] + p2[n]) for n in source)
    hard = dict((n, source[n] + reserved[n]) for n in source)
    vm1 = after["vmis"]["t"][0]
    vm1["metadata"]["annotations"] = {HOOKS: "[" + ", ".join('{"image": "x%d"}' % i for i in range(sidecars)) + "]"}
    vm1["metadata"]["resourceVersion"] = "99"
    # vm1's grown target pod: 200m of CPU per sidecar more than planned (Guaranteed QoS)
    used = dict(source)
    used["limits.cpu"] = source["limits.cpu"] + p1["limits.cpu"] + Fraction(2 * sidecars, 10)

    def shown(values):
        return dict((n, q.show(v, n)) for n, v in values.items())
    quota["spec"]["hard"] = quota["status"]["hard"] = shown(hard)
    quota["status"]["used"] = shown(used)
    monkeypatch.setattr(h, "read_inventory", lambda cluster, scope, options=None: Snapshot.of(copy.deepcopy(after)))
    vmim2 = {"metadata": {"name": "vm2-kvq-tok", "namespace": "t", "uid": "uid-m2"}, "spec": {"vmiName": "vm2"},
             "status": {"phase": "Pending", "conditions": [{
                 "type": "migrationRejectedByResourceQuota", "status": "True",
                 "lastTransitionTime": "2025-01-31T12:00:00Z",
                 "message": "exceeded quota: compute, requested: limits.cpu=%s, used: limits.cpu=%s, limited: "
                            "limits.cpu=%s" % (q.show(p2["limits.cpu"], "limits.cpu"),
                                               q.show(used["limits.cpu"], "limits.cpu"),
                                               q.show(hard["limits.cpu"], "limits.cpu"))}]}}
    cluster = _Api({"vm2-kvq-tok": vmim2})
    ex = _built(cluster, [["t/vm1", "t/vm2"]], clock=lambda: 0.0, token="tok")
    ex.record.plan = planned
    batch = ex.batches[0]
    batch.state, batch.launched, batch.targets = m.RUNNING, 0.0, [("t", "compute")]
    batch.migrations = [{"namespace": "t", "vm": "vm1", "reused": False, "name": "vm1-kvq-tok", "uid": "uid-m1"},
                        {"namespace": "t", "vm": "vm2", "reused": False, "name": "vm2-kvq-tok", "uid": "uid-m2"}]
    batch.quota_charges = {("t", "compute"): dict((n, p1[n] + p2[n]) for n in p1)}
    batch.deltas = {("t", "compute"): reserved}
    ex.runner.fenced[batch.reservation] = {"t"}
    calls = {"reserve": [], "end": []}
    service_fakes.patch(monkeypatch, "reserve", lambda *a, **kw: calls["reserve"].append(a) or {})
    monkeypatch.setattr(reservations, "end_migrations", lambda _c, migrations, *a, **kw: calls["end"].append(
        [(mig["name"], mig["uid"]) for mig in migrations]) or [])
    return ex, batch, cluster, calls


@pytest.mark.parametrize("sidecars", [1, 3], ids=["within-top-up-cap", "past-top-up-cap"])
def test_a_vm_grown_after_the_reservation_is_cancelled_and_its_sibling_tops_up_nothing(monkeypatch, sidecars):
    ex, batch, cluster, calls = _vm1_grown_after_the_reservation(monkeypatch, sidecars)
    ex.runner.top_up(batch, [cluster.vmims["vm2-kvq-tok"]])
    # before: vm2's top-up added exactly vm1's growth (1 sidecar), or the run stopped asking to raise top_up_cap (3)
    assert calls["reserve"] == []
    assert cluster.deleted == ["vm1-kvq-tok"] and ex.record.cancelled == ["t/vm1-kvq-tok"]
    assert calls["end"] == [[("vm1-kvq-tok", "uid-m1")]]          # the fence admits no other target pod for it
    reason = ex.runner.left_out[("t", "vm1")]
    assert reason.startswith("t/vm1: its target pod now charges") and HOOKS in reason
    assert "its migration was cancelled" in reason
    assert batch.vms == [("t", "vm2")] and [mig["vm"] for mig in batch.migrations] == ["vm2"]
    assert batch.state == m.RUNNING
    assert "no top-up: t/vm1 grew since the reservation was made" in ex.log[-1]


def test_the_only_vm_of_a_batch_grown_after_the_reservation_is_cancelled_and_the_run_goes_on(monkeypatch):
    fake = _Refused(monkeypatch)
    fake.found["left_out"] = [{"namespace": "t", "name": "vm-1", "reason": "t/vm-1: its target pod now charges "
                                                                           "limits.cpu=2600m instead of the planned "
                                                                           "limits.cpu=2 (changed: ...)"}]
    cluster = _Api({})
    ex = _built(cluster, [["t/vm-1"], ["u/vm-9"]], clock=lambda: 0.0)
    batch = ex.batches[0]
    batch.state, batch.launched = m.RUNNING, 0.0
    batch.migrations = [{"namespace": "t", "vm": "vm-1", "reused": False, "name": "m1", "uid": "u1"}]
    # before: KvquotaError, the whole run stopped (the other tenant's batch included)
    ex.runner.top_up(batch, [{"metadata": {"namespace": "t", "name": "m1"}}])
    assert cluster.deleted == ["m1"] and fake.reserved == []
    assert batch.state == m.FINAL and not batch.moved and batch.migrations == [] and batch.vms == []
    assert "t/vm-1: its target pod now charges" in ex.runner.left_out[("t", "vm-1")]
    assert m.next_batch(ex.batches) is ex.batches[1]               # the run goes on with the next batch


def test_a_top_up_never_brings_the_reservation_past_the_batchs_pinned_charges(monkeypatch):
    fake = _Refused(monkeypatch, exact={("t", "compute"): {"limits.memory": 100 * MI}})
    ex, batch = _executor()
    batch.quota_charges = {("t", "compute"): {"limits.memory": Fraction(1024 * MI)}}
    batch.deltas = {("t", "compute"): {"limits.memory": Fraction(1000 * MI)}}
    ex.runner.top_up(batch, [{"metadata": {"namespace": "t", "name": "m1"}}])
    # before: 100Mi (within top_up_cap's 25% of 1Gi)
    assert fake.reserved == [("node-1-b0", {("t", "compute"): {"limits.memory": "24Mi"}}, "refused:k1")]
    fake.found["key"] = "refused:k2"
    batch.deltas = {("t", "compute"): {"limits.memory": Fraction(1024 * MI)}}
    ex.runner.top_up(batch, [{"metadata": {"namespace": "t", "name": "m1"}}])
    assert len(fake.reserved) == 1
    assert "already holds what the batch's VMs charge at their planned sizes" in ex.log[-1]


def test_a_batch_prepared_ahead_makes_no_migration_for_a_vm_grown_since(monkeypatch):
    cluster = _FenceCluster()
    runner = _runner(monkeypatch, cluster)
    batch = _prepared(runner)
    batch.vms = list(batch.keys)
    asked = []

    def grown_since_pin(c, vms, options=None, pins=None, planned=None):
        asked.append(sorted(vm["name"] for vm in vms))
        return [{"namespace": "t", "name": "vm-a", "reason": "t/vm-a: its target pod now charges more"}]
    monkeypatch.setattr(h, "grown_since_pin", grown_since_pin)
    runner.launch(batch)
    assert asked == [["vm-a", "vm-b"]]
    # before: vm-a's migration was created (and its grown target pod admitted on the batch's headroom)
    assert [call for call in cluster.calls if call[0] in ("create", "admit")] == []
    assert "no migration is made for it" in runner.left_out[("t", "vm-a")]
    assert [mig["vm"] for mig in batch.migrations] == ["vm-b"]
    asked[:] = []
    runner.launch(_prepared(runner), just_prepared=True)          # right after its own prepare: not read again
    assert asked == []


# ---------------------------------------------------------------------------
# valid but hostile JSON in tenant input

def test_a_hook_sidecar_annotation_nested_too_deeply_blocks_only_its_vm():
    bad, good = make_vmi("vm1", "t", node="worker-1"), make_vmi("vm2", "u", node="worker-1")
    snap = snapshot({"t": ([make_quota("compute", "t", {"limits.cpu": "100", "limits.memory": "100Gi"})], [bad]),
                     "u": ([make_quota("compute", "u", {"limits.cpu": "100", "limits.memory": "100Gi"})], [good])})
    bad["metadata"]["annotations"] = {HOOKS: DEEP}
    report = c.evaluate(snap, {"now": NOW})                         # before: RecursionError for the whole node
    assert [(b["namespace"], b["vm"]) for b in report["blocked_vms"]] == [("t", "vm1")]
    assert HOOKS in report["blocked_vms"][0]["message"]
    assert sorted(k for batch in report["batches"] for k in batch["vms"]) == ["u/vm2"]


@pytest.mark.parametrize("text", [DEEP, '"sidecar"', "[1]", '{"image": "x"}', '[{"image": "x"}, "y"]'])
def test_a_hook_sidecar_annotation_of_another_shape_is_the_vms_own_error(text):
    vmi = make_vmi("vm1", "t")
    vmi["metadata"]["annotations"] = {HOOKS: text}
    with pytest.raises(VmInputError) as err:               # before: RecursionError, or sized as 0 sidecars
        launcher_pod(vmi, ClusterConfig(kubevirt_version="1.6.0"))
    assert err.value.field == "metadata.annotations[%s]" % HOOKS


def _namespace(annotations):
    return {"metadata": {"name": "t", "annotations": annotations}}


@pytest.mark.parametrize("text", [DEEP, "[1]", '"s"', '{"limit": [1]}', '{"limit": {"limitsCpu": {"x": 1}}}'])
def test_a_rancher_quota_annotation_of_another_shape_is_an_input_error_naming_it(text):
    with pytest.raises(InputError) as err:                         # before: RecursionError, AttributeError or {}
        rancher_owner.rancher_annotation(_namespace({rancher_owner.RANCHER_QUOTA_ANNOTATION: text}))
    assert rancher_owner.RANCHER_QUOTA_ANNOTATION in err.value.message and "namespace t" in err.value.message
    if "limitsCpu" not in text:   # a recorded original: only its "limit" keys are looked at
        assert rancher_owner._parse_json(text) is None


@pytest.mark.parametrize("text", [DEEP, "[1]", '"s"', '{"conditions": ["x"]}', '{"Conditions": {"Type": 1}}'])
def test_a_rancher_status_annotation_of_another_shape_says_nothing(text):
    # before: RecursionError or AttributeError out of the reservation's wait for Rancher
    assert rancher_owner._rancher_refusal(_namespace({rancher_owner.RANCHER_STATUS_ANNOTATION: text})) is None
    # nested too deeply for the json module (Python 3.11: RecursionError; 3.13 parses it): the text itself, or the
    # parsed list, never an exception
    parsed = rancher_owner._parsed_annotation(DEEP)
    assert parsed == DEEP or isinstance(parsed, list)


def test_a_rancher_refusal_is_still_read():
    condition = {"Type": "ResourceQuotaValidated", "Status": "False", "Message": "exceeds the project's limit"}
    import json
    status = json.dumps({"Conditions": ["x", condition]})
    assert rancher_owner._rancher_refusal(_namespace({rancher_owner.RANCHER_STATUS_ANNOTATION: status})) == \
        "exceeds the project's limit"


# ---------------------------------------------------------------------------
# an unexpected exception still stops the run cleanly

def test_an_unexpected_exception_still_cancels_releases_and_reports_the_state():
    ex = _built(None, [["t/vm-1"]], clock=lambda: 0.0)
    cleaned = []
    ex.stopper.clean_up = lambda: cleaned.append(True) or []

    def loop():
        raise AttributeError("'list' object has no attribute 'get'")
    with pytest.raises(KvquotaError) as err:                       # before: the AttributeError, nothing cleaned up
        ex.stopper.guarded(lambda: None, loop)
    assert cleaned == [True]
    assert "unexpected error AttributeError: 'list' object has no attribute 'get'" in err.value.message
    assert "The run stopped with" in err.value.message and err.value.details["result"]["outcome"] == "failed"
    assert isinstance(err.value.__cause__, AttributeError)


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_is_not_cleaned_up_after(kind):
    ex = _built(None, [["t/vm-1"]], clock=lambda: 0.0)
    cleaned = []
    ex.stopper.clean_up = lambda: cleaned.append(True) or []

    def loop():
        raise kind()
    with pytest.raises(kind):
        ex.stopper.guarded(lambda: None, loop)
    assert cleaned == []


class _Module(object):
    """What kvquota_module.run uses of an AnsibleModule: fail_json ends the module."""
    _diff = False

    def fail_json(self, **kwargs):
        self.failed = kwargs
        raise SystemExit(1)


def test_a_module_fails_with_one_line_naming_an_unexpected_exception_and_its_traceback():
    from ansible_collections.kvquota.maintenance.plugins.module_utils import kvquota_module as KM
    module = _Module()

    def operation(_module):
        return {}["missing"]
    with pytest.raises(SystemExit):                                # before: the KeyError itself (MODULE FAILURE)
        KM.run(module, operation)
    assert module.failed["msg"].startswith("unexpected error KeyError: 'missing'. Fix: ")
    assert module.failed["error"] == "KeyError" and "Traceback" in module.failed["exception"]
