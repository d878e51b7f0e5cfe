# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""migrate.py, the pure parts: which batch may start (pipelining gate), which migrations are ours (by the UIDs
the ledger recorded), the batch timeout rule, the top-up cap, the batch input shapes; the executor's top-ups and its
wait for status.hard against stand-ins. The executor itself runs against the lab (tests/integration/test_migrate_lab.py)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import dataclasses
import re
from fractions import Fraction

import pytest

from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils import service_fakes
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as headroom_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import migrate as m
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import migration_state
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import scheduler
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import ConflictError, InputError, UnreachableError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity

MI = 1024 ** 2
GI = 1024 ** 3


class B(object):
    """A batch as next_batch sees it."""

    def __init__(self, index, namespaces, state=m.PENDING, held=None, launched=True):
        self.index = index
        self.namespaces = namespaces
        self.state = state
        self.held = namespaces if held is None else held
        # a running batch has its migrations created unless it was only prepared (launched=False)
        self.launched = 1.0 if state == m.RUNNING and launched else None


def _built(cluster, batches, **options):
    """An Executor of node-1 for batches, configured by options (ExecutorConfig's fields)."""
    return m.Executor(cluster, m.ExecutorConfig.build("node-1", **options), batches)


def idx(batch):
    return None if batch is None else batch.index


# -- the gate ---------------------------------------------------------------

def test_the_next_batch_is_prepared_while_one_migrates_in_a_namespace_nothing_holds():
    batches = [B(0, ["a"], m.RUNNING), B(1, ["a"]), B(2, ["c"], m.FINAL), B(3, ["c"]), B(4, ["d"])]
    assert idx(scheduler.batch_ahead(batches)) == 4     # not a (in flight), not c (its reservation is not released)
    assert scheduler.batch_ahead(batches, overlap=False) is None


def test_one_batch_ahead_at_most_and_it_goes_next():
    batches = [B(0, ["a"], m.RUNNING), B(1, ["b"], m.RUNNING, launched=False), B(2, ["c"])]
    assert scheduler.batch_ahead(batches) is None          # b is prepared already
    assert m.next_batch(batches) is None                   # a is in flight
    batches[0].state = m.FINAL
    assert idx(m.next_batch(batches)) == 1                 # the prepared one, before any pending batch


def test_nothing_is_prepared_when_no_batch_migrates():
    assert scheduler.batch_ahead([B(0, ["a"], m.FINAL), B(1, ["b"])]) is None


def test_first_batch_starts_when_nothing_ran():
    assert idx(m.next_batch([B(0, ["a"]), B(1, ["b"])])) == 0


def test_nothing_starts_while_a_batch_is_in_flight():
    batches = [B(0, ["a"], m.RUNNING), B(1, ["b"]), B(2, ["c"])]
    assert m.next_batch(batches) is None
    assert m.next_batch(batches, overlap=False) is None


def test_next_batch_starts_once_the_previous_is_final_when_its_namespaces_are_free():
    batches = [B(0, ["a"], m.FINAL), B(1, ["b"])]
    assert idx(m.next_batch(batches)) == 1


def test_a_batch_waits_while_its_namespace_holds_an_unreleased_reservation_and_a_later_one_goes_first():
    batches = [B(0, ["a"], m.FINAL), B(1, ["a"]), B(2, ["b"]), B(3, ["c"])]
    assert idx(m.next_batch(batches)) == 2
    # once b0 is released, batch 1 (plan order, every namespace has one batch left) is first again
    batches[0].state = m.RELEASED
    assert idx(m.next_batch(batches)) == 1


def test_the_namespace_with_most_batches_left_goes_first_so_the_end_does_not_wait_for_releases():
    # scenario d's plan: two batches per namespace, in namespace order
    batches = [B(i, [ns]) for i, ns in enumerate(["a", "a", "b", "b", "c", "c"])]
    order = []
    for _step in range(6):
        chosen = m.next_batch(batches)
        order.append(chosen.index)
        # the previous batch is released while this one migrates (its source pods end within a batch)
        for b in batches:
            if b.state == m.FINAL:
                b.state = m.RELEASED
        chosen.state = m.FINAL
    assert order == [0, 2, 4, 1, 3, 5]
    namespaces = [batches[i].namespaces[0] for i in order]
    assert all(x != y for x, y in zip(namespaces, namespaces[1:])), namespaces


def test_a_namespace_held_by_a_batch_that_overtook_blocks_too():
    batches = [B(0, ["a"], m.RELEASED), B(1, ["b"]), B(2, ["c"], m.FINAL), B(3, ["c"])]
    assert idx(m.next_batch(batches)) == 1
    batches[1].state = m.FINAL
    assert m.next_batch(batches) is None   # b3 needs c, held by b2; nothing else pending


def test_a_batch_whose_reservation_expanded_nothing_holds_nothing():
    batches = [B(0, ["a"], m.FINAL, held=[]), B(1, ["a"])]
    assert idx(m.next_batch(batches)) == 1


def test_any_shared_namespace_blocks_a_multi_namespace_batch():
    batches = [B(0, ["a", "b"], m.FINAL), B(1, ["b", "c"]), B(2, ["d"])]
    assert idx(m.next_batch(batches)) == 2


def test_strict_mode_waits_for_every_release_and_keeps_the_plan_order():
    batches = [B(0, ["a"], m.FINAL), B(1, ["b"]), B(2, ["c"])]
    assert m.next_batch(batches, overlap=False) is None
    batches[0].state = m.RELEASED
    assert idx(m.next_batch(batches, overlap=False)) == 1


def test_no_batch_left():
    assert m.next_batch([B(0, ["a"], m.RELEASED)]) is None
    assert m.next_batch([]) is None


# -- our migrations, by UID ---------------------------------------------------------

class _Ledger(object):
    def __init__(self, reservations):
        self.reservations = reservations


class _Entry(object):
    def __init__(self, refs):
        self.refs = refs


def _vmim(ns, name, uid, labels=None):
    return {"metadata": {"namespace": ns, "name": name, "uid": uid, "labels": labels or {}}}


def test_our_migrations_are_those_whose_uid_our_reservations_recorded():
    pattern = re.compile("^node-1-b[0-9]+$")
    ledgers = {("t", "compute"): _Ledger({
        "node-1-b0": _Entry({"migrations": [{"namespace": "t", "name": "vm-1-kvq-1", "uid": "u1"},
                                            {"namespace": "t", "name": "vm-2-kvq-1"}]}),     # no UID: nothing
        "node-2-b0": _Entry({"migrations": [{"namespace": "t", "name": "vm-3-kvq-1", "uid": "u3"}]})})}
    uids = m.our_migration_uids(ledgers, pattern)
    assert uids == {("t", "vm-1-kvq-1"): "u1"}
    labels = {"app.kubernetes.io/managed-by": "kvquota.maintenance", "kvquota.io/node": "node-1"}
    vmims = [_vmim("t", "vm-1-kvq-1", "u1", labels),
             _vmim("t", "vm-1-kvq-1", "u-recreated", labels),    # same name, another object
             _vmim("t", "vm-2-kvq-1", "u2", labels),             # our labels, no recorded UID
             _vmim("t", "tenant-made", "u9", labels)]            # a tenant's, with our labels
    assert [v["metadata"]["uid"] for v in m.ours(vmims, uids)] == ["u1"]


# -- timeout rule ------------------------------------------------------------

def test_batch_timeout_rounds_the_largest_vm_up_to_whole_gib():
    # 2Gi + overhead -> 3 GiB x 150 + 150 + 300
    assert m.batch_timeout([2 * GI + 300 * MI, 1 * GI], 150, 150, 300) == 3 * 150 + 150 + 300


def test_batch_timeout_of_an_exact_gib_and_of_unknown_memory():
    assert m.batch_timeout([4 * GI], 800, 150, 0) == 4 * 800 + 150
    assert m.batch_timeout([], 150, 150, 300) == 150 + 150 + 300
    assert m.batch_timeout([0], 150, 150, 300) == 150 + 150 + 300


def test_timeouts_from_the_kubevirt_cr_and_defaults():
    cr = {"spec": {"configuration": {"migrations": {"completionTimeoutPerGiB": 800, "progressTimeout": 90}}}}
    assert m.timeouts_from_kubevirt(cr) == (800, 90)
    assert m.timeouts_from_kubevirt({"spec": {}}) == (150, 150)
    assert m.timeouts_from_kubevirt(None) == (150, 150)


# -- top-up cap --------------------------------------------------------------

def test_over_cap_names_the_quota_the_resource_and_the_cap():
    problems = m.over_cap({("t", "compute"): {"limits.memory": 100 * MI}}, {"limits.memory": "50Mi"})
    assert problems == ["t/compute needs limits.memory=100Mi (top_up_cap 50Mi)"]


def test_within_the_cap_and_a_resource_the_cap_does_not_name():
    assert m.over_cap({("t", "compute"): {"limits.memory": 100 * MI}}, {"limits.memory": "1Gi"}) == []
    problems = m.over_cap({("t", "compute"): {"limits.cpu": Fraction(1, 2)}}, {"limits.memory": "1Gi"})
    assert problems == ["t/compute needs limits.cpu=500m (top_up_cap does not name it)"]


def test_over_a_percentage_cap_of_the_charge():
    charges = {("t", "compute"): {"limits.memory": 1024 * MI}}
    assert m.over_cap({("t", "compute"): {"limits.memory": 256 * MI}}, "25%", charges) == []
    assert m.over_cap({("t", "compute"): {"limits.memory": 257 * MI}}, "25%", charges) == [
        "t/compute needs limits.memory=257Mi (top_up_cap 25% of the computed charge)"]


BAD_CAPS = [({"limits.memory": "-1Gi"}, "limits.memory=-1Gi"),
            ({"limits.memory": "lots"}, "top_up_cap.limits.memory"),
            ("1Gi", "top_up_cap must be a percentage")]


@pytest.mark.parametrize("cap, named", BAD_CAPS)
def test_a_bad_cap_is_refused_before_anything_moves(cap, named):
    # the Executor is built before any API call: a cluster of None proves nothing was read or written
    with pytest.raises(InputError) as err:
        _built(None, [], top_up_cap=cap)
    assert named in str(err.value)


def test_no_cap_given_is_the_default_share_of_the_charge():
    assert _built(None, []).config.top_up_cap == "25%"
    assert _built(None, [], top_up_cap={}).config.top_up_cap == "25%"


def test_a_zero_cap_allows_no_top_up():
    assert m.over_cap({("t", "compute"): {"limits.memory": 1}}, {"limits.memory": "0"}) == [
        "t/compute needs limits.memory=1 (top_up_cap 0)"]


# -- inputs and phases -------------------------------------------------------

def test_batch_vm_keys_accepts_check_batches_lists_and_dicts():
    assert m.batch_vm_keys({"index": 0, "vms": ["a/vm-1", "b/vm-2"], "nodes": ["n"]}) == [("a", "vm-1"), ("b", "vm-2")]
    assert m.batch_vm_keys([{"namespace": "a", "name": "vm-1"}]) == [("a", "vm-1")]


@pytest.mark.parametrize("bad", [["vm-1"], [{"name": "vm-1"}], ["a/b/c"], [42]])
def test_batch_vm_keys_refuses_malformed_entries(bad):
    with pytest.raises(InputError) as err:
        m.batch_vm_keys(bad)
    assert "Fix:" in str(err.value)


def test_never_admitted_is_pending_without_a_target_pod():
    assert m.never_admitted({"status": {"phase": "Pending"}})
    assert m.never_admitted({})
    assert not m.never_admitted({"status": {"phase": "Pending", "migrationState": {"targetPod": "p"}}})
    assert not m.never_admitted({"status": {"phase": "Running"}})
    assert not m.never_admitted({"status": {"phase": "Succeeded"}})


def test_namespace_extra_sums_per_namespace():
    extra = migration_state.namespace_extra([("a", {"limits.memory": GI}), ("a", {"limits.memory": GI, "limits.cpu": 1}),
                                             ("b", {"limits.cpu": 2})])
    assert extra == {"a": {"limits.memory": 2 * GI, "limits.cpu": 1}, "b": {"limits.cpu": 2}}


# -- the top-up of the executor (trusted amounts, rounds, stale refusals) ------------------------------------

class _Refused(object):
    """refused_target_pods and reservations.reserve stand-ins: what trusted state shows, and what was reserved."""

    def __init__(self, monkeypatch, exact=None, evidence=True):
        self.found = {"refused": [{"namespace": "t", "name": "m1", "uid": "u1", "vmi": "vm-1"}],
                      "exact": exact or {}, "charge": {("t", "compute"): {"limits.memory": 1024 * MI}},
                      "pointed": [("t", "compute")], "key": "refused:k1", "evidence": evidence}
        self.reserved = []
        self.captured = []   # what release's check (check mode) finds holding the headroom
        self.checks = []
        monkeypatch.setattr(headroom_mod, "refused_target_pods", lambda cluster, keys, options=None, pins=None, planned=None: self.found)
        service_fakes.patch(monkeypatch, "reserve", self.reserve)
        service_fakes.patch(monkeypatch, "release", self.release)

    def release(self, cluster, rid, **kwargs):
        self.checks.append((rid, kwargs.get("check_mode")))
        return {"captured": [{"namespace": "t", "quota": "compute", "pods": list(self.captured)}]} \
            if self.captured else {}

    def reserve(self, cluster, rid, headroom, *args, **kwargs):
        self.reserved.append((rid, headroom, kwargs.get("top_up")))
        return {"quotas": [{"namespace": "t", "quota": "compute", "delta": headroom[("t", "compute")]}]}


def _executor(**options):
    ex = _built(None, [["t/vm-1"]], clock=lambda: 0.0, **options)
    return ex, ex.batches[0]


def test_a_top_up_adds_the_caps_share_once_per_refusal(monkeypatch):
    fake = _Refused(monkeypatch)
    ex, batch = _executor()
    refused = [{"metadata": {"namespace": "t", "name": "m1"}}]
    ex.runner.top_up(batch, refused)
    assert fake.reserved == [("node-1-b0", {("t", "compute"): {"limits.memory": "256Mi"}}, "refused:k1")]
    ex.runner.top_up(batch, refused)               # the same refusal (no new verified Event): nothing more
    assert len(fake.reserved) == 1 and "nothing shows a refusal since the last top-up" in ex.log[-1]
    fake.found["key"] = "refused:k2"         # KubeVirt retried and was refused again
    ex.runner.top_up(batch, refused)
    assert len(fake.reserved) == 2 and batch.added == {("t", "compute"): {"limits.memory": 512 * MI}}
    fake.found["key"] = "refused:k3"
    with pytest.raises(m.KvquotaError) as err:
        ex.runner.top_up(batch, refused)
    text = str(err.value)
    assert "after 2 top-up(s)" in text and "still missing" in text and "top_up_cap 25%" in text
    assert len(fake.reserved) == 2
    assert fake.checks == [("node-1-b0", True)]   # asked (in check mode only) whether a pod took the headroom


def test_a_pod_that_took_the_headroom_is_named_instead_of_the_cap(monkeypatch):
    fake = _Refused(monkeypatch, exact={("t", "compute"): {"limits.memory": 4096 * MI}})
    fake.captured = ["grab-1 (owner none, created 2026-11-24T03:00:05Z, after the reservation of 2026-11-24T03:00:00Z)"]
    ex, batch = _executor()
    with pytest.raises(m.KvquotaError) as err:
        ex.runner.top_up(batch, [{"metadata": {"namespace": "t", "name": "m1"}}])
    assert "took its headroom: grab-1 (owner none" in str(err.value)
    assert "top_up_cap" not in str(err.value) and "headroom fence" in err.value.fix
    assert fake.reserved == []


def _waiting_batch(ex, batch, captured=(), reasons=()):
    batch.state, batch.final_at, batch.reservation = m.FINAL, 0.0, "node-1-b0"
    batch.captured, batch.release_waits = list(captured), list(reasons)
    ex.config = ex.stopper.config = ex.scheduler.config = dataclasses.replace(ex.config, release_timeout=-1.0)
    return [batch]


def test_a_release_timeout_names_the_pods_holding_the_headroom():
    ex, batch = _executor()
    waiting = _waiting_batch(ex, batch, captured=["grab-2 (owner none, created x, after the reservation of y)"],
                             reasons=["t/compute: usage does not fit"])
    with pytest.raises(m.WaitTimeoutError) as err:
        ex.stopper.raise_release_timeout(waiting)
    assert "hold its headroom: grab-2 (owner none" in str(err.value) and "source pods still count" not in str(err.value)


def test_a_release_timeout_gives_releases_reasons():
    ex, batch = _executor()
    waiting = _waiting_batch(ex, batch, reasons=["t/compute: source pod t/virt-launcher-vm-1-abc still counts"])
    with pytest.raises(m.WaitTimeoutError) as err:
        ex.stopper.raise_release_timeout(waiting)
    assert "t/compute: source pod t/virt-launcher-vm-1-abc still counts" in str(err.value)


def test_without_a_verified_event_each_settle_time_is_a_new_round(monkeypatch):
    fake = _Refused(monkeypatch, evidence=False)
    ex, batch = _executor(top_up_max_rounds=3)
    refused = [{"metadata": {"namespace": "t", "name": "m1"}}]
    for _round in range(3):
        ex.runner.top_up(batch, refused)
    assert [r[2] for r in fake.reserved] == ["refused:k1#round1", "refused:k1#round2", "refused:k1#round3"]
    # three quarters of the charge added; a fourth round would have been bounded by the charge, but rounds end first
    assert batch.added == {("t", "compute"): {"limits.memory": 768 * MI}}


def test_an_exact_need_over_the_cap_stops_before_anything_is_added(monkeypatch):
    fake = _Refused(monkeypatch, exact={("t", "compute"): {"limits.memory": 300 * MI}})
    ex, batch = _executor()
    with pytest.raises(InputError) as err:
        ex.runner.top_up(batch, [{"metadata": {"namespace": "t", "name": "m1"}}])
    assert "exceeds top_up_cap: t/compute needs limits.memory=300Mi (top_up_cap 25% of the computed charge)" \
        in str(err.value)
    assert fake.reserved == []


class _DownCluster(object):
    """A control plane that answers nothing; records the outage budget each request was given."""

    def __init__(self):
        self.outage_budget = 60
        self.budgets = []

    def _down(self, *args, **kwargs):
        self.budgets.append(self.outage_budget)
        raise UnreachableError("cannot reach the API server to get it: [Errno 111] Connection refused")

    list_custom = get_custom = request = _down


def test_a_stop_after_an_outage_tries_each_cleanup_read_once_and_reports_unread_state_as_unknown():
    cluster = _DownCluster()
    ex = _built(cluster, [["t/vm-1"], ["t/vm-2"]], clock=lambda: 0.0)
    running, pending = ex.batches
    running.state, running.reservation, running.targets = m.RUNNING, "node-1-b0", [("t", "compute")]
    running.migrations = [{"namespace": "t", "name": "kvq-vm-1", "vm": "vm-1", "uid": "u1", "reused": False}]
    outage = UnreachableError("the API server did not answer usably for 61 s (api_outage_budget 60 s, 9 attempts)",
                              "re-run once the control plane answers again",
                              details={"outage_seconds": 61.0, "attempts": 9})
    with pytest.raises(UnreachableError) as err:
        ex.stopper.stop(outage)
    text = str(err.value)
    assert cluster.budgets and set(cluster.budgets) == {0}     # one attempt each, not another budget each
    assert cluster.outage_budget == 60                         # given back afterwards
    assert "0 of 2 batch(es) migrated; migrations of batch 1/2 could not be read (state unknown" in text
    assert "still held: node-1-b0" in text
    assert err.value.details["result"]["reservations_held"] == ["node-1-b0"]
    assert "re-run the playbook" in err.value.fix
    # the state line the roles' rescues print is the result's, and the message ends with it
    state = err.value.details["result"]["state"]
    assert state == ("0 of 2 batch(es) migrated; migrations of batch 1/2 could not be read (state unknown: they may "
                     "have moved more VMs); migrations cancelled: none; reservations released: none; still held: "
                     "node-1-b0 (a re-run releases them once they can be, the reaper after the TTL)")
    assert err.value.message.endswith("The run stopped with " + state)


def test_a_stop_after_an_ordinary_error_keeps_the_budget():
    cluster = _DownCluster()
    ex = _built(cluster, [["t/vm-1"]], clock=lambda: 0.0)
    batch = ex.batches[0]
    batch.state, batch.reservation, batch.targets = m.RUNNING, "node-1-b0", [("t", "compute")]
    batch.migrations = [{"namespace": "t", "name": "kvq-vm-1", "vm": "vm-1", "uid": "u1", "reused": False}]
    with pytest.raises(m.KvquotaError):
        ex.stopper.stop(m.KvquotaError("migration t/kvq-vm-1 failed"))
    assert set(cluster.budgets) == {60}


# -- status.hard: a reservation is enforced only once the quota controller copied it (issue 11 follow-up) ----

class _Quotas(object):
    """A control plane whose quota controller copies spec.hard to status.hard only after `lag` reads of a quota
    (None: never); records every read and the order of reserve/read/create."""

    def __init__(self, spec, status, lag=0, outage_budget=60):
        self.spec = dict((t, dict(h)) for t, h in spec.items())
        self.status = dict((t, dict(h)) for t, h in status.items())
        self.lag = lag
        self.reads = []
        self.order = []
        self.outage_budget = outage_budget
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    def get_quota(self, namespace, name):
        target = (namespace, name)
        self.reads.append(target)
        self.order.append("read %s/%s" % target)
        if self.lag is not None and self.reads.count(target) > self.lag:
            self.status[target] = dict(self.spec[target])
        return {"metadata": {"namespace": namespace, "name": name}, "spec": {"hard": dict(self.spec[target])},
                "status": {"hard": dict(self.status[target])}}

    # what _start reads and writes besides the quotas
    def exists(self, path, what):
        return {}

    def list_custom(self, group, version, plural, namespace=None):
        if plural == "virtualmachineinstances":
            return [{"metadata": {"namespace": "t", "name": "vm-1"}, "status": {"nodeName": "node-1"}}]
        return []

    def create(self, path, body, what):
        self.order.append("create %s" % body["metadata"]["name"])
        return dict(body, metadata=dict(body["metadata"], uid="uid-" + body["metadata"]["name"]))


def _reserve_writing(cluster):
    """reservations.reserve stand-in: the first reserve of an id and every top-up add 1 CPU to the fake's
    spec.hard (limits.cpu), a repeat (new refs only) changes nothing; before/after as the real one returns them."""
    made = set()

    def reserve(_cluster, rid, headroom, *args, **kwargs):
        results = []
        for target, amount in headroom.items():
            before = dict(cluster.spec[target])
            if rid not in made or kwargs.get("top_up"):
                made.add(rid)
                cluster.spec[target]["limits.cpu"] = "%dm" % (int(before["limits.cpu"][:-1]) + 1000)
            cluster.order.append("reserve %s" % ("top-up" if kwargs.get("top_up") else rid))
            results.append({"namespace": target[0], "quota": target[1], "before": before,
                            "after": dict(cluster.spec[target]), "delta": dict(amount)})
        return {"quotas": results}
    return reserve


def _recording(cluster):
    """reservations.record_migrations stand-in: notes the migrations a batch recorded in its ledgers."""
    def record(_cluster, rid, targets, migrations, **_kwargs):
        cluster.order.append("record %s %s" % (rid, ",".join(m["name"] for m in migrations)))
        return {"recorded": list(targets), "warnings": ["waited for another job: test"]}
    return record


def _startable(monkeypatch, cluster):
    monkeypatch.setattr(headroom_mod, "batch_headroom", lambda c, vms, options=None, planned=None, pins=None: (
        {("t", "compute"): {"limits.cpu": "1"}}, {"vms": [], "sourcePods": []}, {"namespaces": {}}))
    service_fakes.patch(monkeypatch, "reserve", _reserve_writing(cluster))
    service_fakes.patch(monkeypatch, "record_migrations", _recording(cluster))
    ex = _built(cluster, [["t/vm-1"]], clock=cluster.clock, sleep=cluster.sleep, token="tok")
    ex.record.per_gib_now, ex.record.progress_now = 150, 150
    return ex, ex.batches[0]


def test_migrations_start_only_once_status_hard_shows_the_reservation(monkeypatch):
    cluster = _Quotas({("t", "compute"): {"limits.cpu": "3175m"}}, {("t", "compute"): {"limits.cpu": "3175m"}}, lag=3)
    ex, batch = _startable(monkeypatch, cluster)
    ex.record.started = 0.0
    ex.runner.start(batch)
    assert cluster.order == ["reserve node-1-b0", "read t/compute", "read t/compute", "read t/compute",
                             "read t/compute", "create vm-1-kvq-tok", "record node-1-b0 vm-1-kvq-tok"]
    assert batch.written == {("t", "compute"): {"limits.cpu": Fraction(4175, 1000)}}
    assert batch.report(0.0)["status_hard_wait_seconds"] == 1.5       # three naps of 0.5 s
    assert "quota admission enforces reservation node-1-b0 after 1.5s" in ex.log[-1]
    assert "waited for another job: test" in ex.record.warnings      # record_migrations' warnings reach the run


def test_a_quota_controller_that_never_syncs_stops_before_any_migration_with_the_numbers(monkeypatch):
    cluster = _Quotas({("t", "compute"): {"limits.cpu": "3175m"}}, {("t", "compute"): {"limits.cpu": "3175m"}},
                      lag=None, outage_budget=30)
    ex, batch = _startable(monkeypatch, cluster)
    ex.record.started = 0.0
    with pytest.raises(m.WaitTimeoutError) as err:
        ex.runner.start(batch)
    text = str(err.value)
    # api_outage_budget 30 s + 60 s for the controller's cache to re-list once the API server is back
    assert "batch 1/1: quota admission does not enforce reservation node-1-b0 90s after it was written" in text
    assert "t/compute: spec.hard limits.cpu=4175m, status.hard limits.cpu=3175m" in text
    assert "kube-controller-manager" in err.value.fix and "re-run" in err.value.fix
    assert not [step for step in cluster.order if step.startswith("create")]
    assert cluster.now == 90.0


def test_only_the_quotas_still_behind_are_read_again():
    spec = {("t", "compute"): {"limits.cpu": "4175m"}, ("t", "other"): {"limits.cpu": "2"}}
    cluster = _Quotas(spec, {("t", "compute"): {"limits.cpu": "3175m"}, ("t", "other"): {"limits.cpu": "2"}}, lag=4)
    ex = _built(cluster, [["t/vm-1"]], clock=cluster.clock, sleep=cluster.sleep)
    ex.runner.wait_enforced(ex.batches[0], {("t", "compute"): {"limits.cpu": Fraction(4175, 1000)},
                                            ("t", "other"): {"limits.cpu": Fraction(2)}}, "reservation node-1-b0")
    assert cluster.reads.count(("t", "other")) == 1 and cluster.reads.count(("t", "compute")) == 5


def _lagging_refusal(monkeypatch, cluster, evidence=True, limit="3175m"):
    """_Refused with a refusal of t/compute at `limit` while the batch wrote 4175m."""
    fake = _Refused(monkeypatch, evidence=evidence)
    fake.found["limited"] = {("t", "compute"): {"limits.cpu": parse_quantity(limit)}}
    fake.found["charge"] = {("t", "compute"): {"limits.cpu": Fraction(1)}}
    ex = _built(cluster, [["t/vm-1"]], clock=cluster.clock, sleep=cluster.sleep)
    batch = ex.batches[0]
    batch.reservation, batch.written = "node-1-b0", {("t", "compute"): {"limits.cpu": Fraction(4175, 1000)}}
    return fake, ex, batch


def test_a_refusal_below_the_written_spec_hard_waits_for_status_hard_instead_of_a_top_up(monkeypatch):
    cluster = _Quotas({("t", "compute"): {"limits.cpu": "4175m"}}, {("t", "compute"): {"limits.cpu": "3175m"}}, lag=2)
    fake, ex, batch = _lagging_refusal(monkeypatch, cluster)
    refused = [{"metadata": {"namespace": "t", "name": "m1"}}]
    ex.runner.top_up(batch, refused)
    assert fake.reserved == [] and batch.rounds == 0
    assert "at t/compute limits.cpu=3175m (written 4175m)" in ex.log[-2] and "no top-up" in ex.log[-2]
    assert cluster.reads == [("t", "compute")] * 3                   # waited until status.hard showed 4175m
    ex.runner.top_up(batch, refused)                                       # KubeVirt has not retried yet: the same Event
    assert fake.reserved == [] and "nothing shows a refusal since the last top-up" in ex.log[-1]
    # refused again, now at the limit written: the pods are larger than planned, top up as before
    fake.found["key"] = "refused:k2"
    fake.found["limited"] = {("t", "compute"): {"limits.cpu": Fraction(4175, 1000)}}
    ex.runner.top_up(batch, refused)
    assert fake.reserved == [("node-1-b0", {("t", "compute"): {"limits.cpu": "250m"}}, "refused:k2")]


def test_without_a_verified_event_a_refusal_is_read_as_lag_once(monkeypatch):
    cluster = _Quotas({("t", "compute"): {"limits.cpu": "4175m"}}, {("t", "compute"): {"limits.cpu": "4175m"}})
    fake, ex, batch = _lagging_refusal(monkeypatch, cluster, evidence=False)
    refused = [{"metadata": {"namespace": "t", "name": "m1"}}]
    ex.runner.top_up(batch, refused)
    assert fake.reserved == [] and batch.lag_keys == ["refused:k1#round1"]
    # the condition's text does not change with a later refusal: status.hard is current now, so this one counts
    ex.runner.top_up(batch, refused)
    assert fake.reserved == [("node-1-b0", {("t", "compute"): {"limits.cpu": "250m"}}, "refused:k1#round1")]


def test_a_top_up_waits_until_status_hard_shows_it(monkeypatch):
    cluster = _Quotas({("t", "compute"): {"limits.cpu": "4175m"}}, {("t", "compute"): {"limits.cpu": "4175m"}}, lag=2)
    fake, ex, batch = _lagging_refusal(monkeypatch, cluster, limit="4175m")
    service_fakes.patch(monkeypatch, "reserve", _reserve_writing(cluster))
    ex.runner.top_up(batch, [{"metadata": {"namespace": "t", "name": "m1"}}])
    assert cluster.order == ["reserve top-up", "read t/compute", "read t/compute", "read t/compute"]
    assert batch.written == {("t", "compute"): {"limits.cpu": Fraction(5175, 1000)}}
    assert batch.enforce_seconds == 1.0


def test_a_spec_hard_another_job_lowered_is_what_a_later_refusal_is_compared_with(monkeypatch):
    # another job released its reservation of the namespace: spec.hard (and status.hard) 3175m, below the 4175m
    # written; a refusal at 3175m is then a real one, not the controller lagging
    cluster = _Quotas({("t", "compute"): {"limits.cpu": "3175m"}}, {("t", "compute"): {"limits.cpu": "3175m"}})
    fake, ex, batch = _lagging_refusal(monkeypatch, cluster)
    refused = [{"metadata": {"namespace": "t", "name": "m1"}}]
    ex.runner.top_up(batch, refused)                       # read as lag once: the wait finds spec.hard lowered
    assert fake.reserved == [] and batch.written == {("t", "compute"): {"limits.cpu": Fraction(3175, 1000)}}
    fake.found["key"] = "refused:k2"                 # KubeVirt retried: refused at the same limit
    ex.runner.top_up(batch, refused)
    assert fake.reserved == [("node-1-b0", {("t", "compute"): {"limits.cpu": "250m"}}, "refused:k2")]


# -- cordon: true (node_maintenance's one call instead of a dry run and a cordon task) -----------------------

class _Nodes(object):
    """Nodes and nothing else; records the writes (each a cordon)."""

    def __init__(self, names, cordoned=()):
        self.nodes = dict((n, {"metadata": {"name": n, "resourceVersion": "3"}, "spec": {"unschedulable": n in cordoned}})
                          for n in names)
        self.writes = []
        self.outage_budget = 60

    def exists(self, path, what):
        return self.nodes.get(path.rsplit("/", 1)[-1]) if path.startswith("/api/v1/nodes/") else None

    def request(self, method, path, body=None, query=None, content_type=None, what=None):
        if method == "GET":
            return {"items": []}
        self.writes.append((method, path, body))
        node = self.nodes[path.rsplit("/", 1)[-1]]
        node["spec"]["unschedulable"] = True
        return node

    def list_custom(self, *args, **kwargs):
        return []

    def list_pods(self, *args, **kwargs):
        return []

    def list_quotas(self, namespace=None):
        return []


class _Node(_Nodes):
    """A node (node-1) and nothing else."""

    def __init__(self, unschedulable=False):
        _Nodes.__init__(self, ["node-1"], cordoned=["node-1"] if unschedulable else ())


@pytest.mark.parametrize("unschedulable,state,writes", [(False, "cordoned", 1), (True, "was_cordoned", 0)])
def test_the_executor_cordons_the_node_before_its_first_batch_and_says_so(unschedulable, state, writes):
    cluster = _Node(unschedulable)
    result = _built(cluster, [], cordon=True, clock=lambda: 0.0).run()
    assert result["cordon"] == state and len(cluster.writes) == writes
    assert result["changed"] is (writes == 1)


def test_without_cordon_the_node_is_untouched():
    cluster = _Node()
    result = _built(cluster, [], clock=lambda: 0.0).run()
    assert result["cordon"] == "untouched" and cluster.writes == [] and result["changed"] is False


class _NodeWithVMs(_Node):
    """_Node with Running VMIs: labelled as their owners left them, launcher pods bound to their nodes."""

    def __init__(self, vmis):
        _Node.__init__(self)
        self.vmis = vmis
        self.gets = []

    def list_custom(self, group, version, plural, namespace=None, label_selector=None):
        if plural != "virtualmachineinstances":
            return []
        key, value = label_selector.split("=")
        return [v for v in self.vmis if v["metadata"].get("labels", {}).get(key) == value]

    def list_pods(self, namespace=None, label_selector=None, field_selector=None):
        node = field_selector.split("=")[1]
        return [{"metadata": {"name": "virt-launcher-" + v["metadata"]["name"], "namespace": v["metadata"]["namespace"],
                              "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                                   "name": v["metadata"]["name"], "uid": v["metadata"]["uid"],
                                                   "controller": True}]},
                 "spec": {"nodeName": v["status"]["nodeName"]}, "status": {"phase": "Running"}}
                for v in self.vmis if v["status"]["nodeName"] == node]

    def get_custom(self, group, version, plural, name, namespace=None):
        self.gets.append((namespace, name))
        return [v for v in self.vmis if v["metadata"]["name"] == name and v["metadata"]["namespace"] == namespace][0]


def test_vms_left_finds_a_vm_whose_owner_removed_its_node_label():
    def vmi(name, node, labels):
        return {"metadata": {"name": name, "namespace": "t1", "uid": "uid-" + name, "labels": labels},
                "status": {"phase": "Running", "nodeName": node,
                           "conditions": [{"type": "LiveMigratable", "status": "True"}]}}
    cluster = _NodeWithVMs([vmi("labelled", "node-1", {"kubevirt.io/nodeName": "node-1"}),
                            vmi("unlabelled", "node-1", {}),
                            vmi("elsewhere", "node-2", {"kubevirt.io/nodeName": "node-2"})])
    result = _built(cluster, [], clock=lambda: 0.0).run()
    assert [vm["name"] for vm in result["vms_left"]] == ["labelled", "unlabelled"]
    assert cluster.gets == [("t1", "unlabelled")]   # read one by one only where the label is missing


def test_pods_left_comes_from_the_same_list_of_the_nodes_pods_as_vms_left():
    vmi = {"metadata": {"name": "vm", "namespace": "t1", "uid": "uid-vm", "labels": {"kubevirt.io/nodeName": "node-1"}},
           "status": {"phase": "Running", "nodeName": "node-1", "conditions": []}}
    cluster = _NodeWithVMs([vmi])
    listed = []
    list_pods = cluster.list_pods
    cluster.list_pods = lambda **kw: listed.append(kw) or list_pods(**kw)
    result = _built(cluster, [], clock=lambda: 0.0).run()
    assert listed == [{"field_selector": "spec.nodeName=node-1"}]           # one list, both answers
    assert list(result["pods_left"]) == ["node-1"]
    # the fake's launcher pod carries no virt-launcher label: a pod for k8s_drain (managed by its VMI owner)
    assert result["pods_left"]["node-1"] == {"labelled": [], "others": [
        {"namespace": "t1", "name": "virt-launcher-vm", "uid": None, "category": "managed"}]}


def test_a_malformed_safety_margin_is_refused_before_anything_is_read():
    with pytest.raises(InputError) as err:
        m.ExecutorConfig.build("node-1", safety_margin="ten percent")
    assert "malformed margin 'ten percent'" in err.value.message


def test_the_nap_is_a_tenth_of_the_poll_around_the_expected_end_of_the_batch_in_flight():
    done, flying = B(0, ["a"], m.RELEASED), B(1, ["b"], m.RUNNING)
    done.launched, done.final_at = 0.0, 6.0      # the shortest batch so far took 6 s
    flying.launched, flying.final_at = 10.0, None  # so this one should end at 16 s
    plan = scheduler.Scheduler(m.ExecutorConfig.build("node-1", poll_interval=1.0), [done, flying])
    assert plan.nap(12.0) == 1.0                 # long before: the poll interval
    assert plan.nap(15.5) == pytest.approx(0.1)  # from one poll before to three after: a tenth of it
    assert plan.nap(20.0) == 1.0


def test_a_release_timeout_never_says_to_delete_a_vms_pods():
    ex, batch = _executor()
    waiting = _waiting_batch(ex, batch, reasons=["t/compute: source pod t/virt-launcher-vm-1-abc still counts"])
    with pytest.raises(m.WaitTimeoutError) as err:
        ex.stopper.raise_release_timeout(waiting)
    assert "delete them" not in err.value.fix and "ends by itself" in err.value.fix
    assert "virtualmachineinstancemigration <name>" in err.value.fix


def test_a_tenants_over_use_is_reported_and_the_batch_released(monkeypatch):
    """Issue 24: release gives the quota back at its base although the tenant uses more; the run goes on (rc 0)
    with the release's warning and its over-use in the result, never a failure."""
    report = {"namespace": "t", "quota": "compute", "resources": {"limits.memory": {
        "used": "9Gi", "base": "8Gi", "restored": "8Gi", "charged": "9Gi"}}, "objects": []}
    warning = "reservation 'node-1-b0' released: t/compute is back at its base although its namespace uses more"
    service_fakes.patch(monkeypatch, "release", lambda cluster, rid, **kw: {
        "reservation_id": rid, "quotas": [], "overuse": [report], "warnings": [warning]})
    ex, batch = _executor()
    batch.state, batch.final_at, batch.targets = m.FINAL, 0.0, [("t", "compute")]
    assert ex.runner.try_release(batch)
    assert batch.state == m.RELEASED
    result = ex.stopper.result("succeeded")
    assert result["overuse"] == [dict(report, reservation="node-1-b0")]
    assert warning in result["warnings"]


# -- a wave: drive mode over several nodes drained together (rolling_upgrade_max_unavailable) -----------------

def test_a_wave_cordons_every_node_before_its_first_batch():
    cluster = _Nodes(["a", "b", "c"], cordoned=["b"])
    config = m.ExecutorConfig.build(None, nodes=["c", "a", "b"], cordon=True, clock=lambda: 0.0)
    result = m.Executor(cluster, config, []).run()
    assert sorted(path for _m, path, _b in cluster.writes) == ["/api/v1/nodes/a", "/api/v1/nodes/c"]
    assert result["cordons"] == {"a": "cordoned", "b": "was_cordoned", "c": "cordoned"}
    assert result["cordon"] == "cordoned" and result["nodes"] == ["a", "b", "c"] and result["scope"] == "nodes a, b, c"


def test_a_wave_with_an_unknown_node_changes_nothing():
    cluster = _Nodes(["a", "b"])
    config = m.ExecutorConfig.build(None, nodes=["a", "b", "zz"], cordon=True, clock=lambda: 0.0)
    with pytest.raises(m.KvquotaError, match="node 'zz' not found"):
        m.Executor(cluster, config, []).run()
    assert cluster.writes == []


class _NodesOneBusy(_Nodes):
    """_Nodes whose node `busy` answers every cordon with a conflict (another writer, every time); writes apply as
    their body says (cordon or uncordon), and the node is read again after a conflict."""

    def __init__(self, names, busy):
        _Nodes.__init__(self, names)
        self.busy = busy

    def get(self, path, what):
        return self.nodes[path.rsplit("/", 1)[-1]]

    def request(self, method, path, body=None, query=None, content_type=None, what=None):
        if method == "GET":
            return {"items": []}
        name = path.rsplit("/", 1)[-1]
        self.writes.append((method, path, body))
        if name == self.busy:
            raise ConflictError("conflict", "re-read", details={})
        self.nodes[name]["spec"]["unschedulable"] = bool(body["spec"]["unschedulable"])
        return self.nodes[name]


def test_a_wave_whose_node_cannot_be_cordoned_leaves_the_nodes_it_cordoned_schedulable_again():
    """Review M2 of issue 29: the third node of a wave changes on every attempt to cordon it. Nothing has moved; the
    two nodes the run cordoned are made schedulable again and the error says so (they stayed cordoned)."""
    cluster = _NodesOneBusy(["a", "b", "c"], busy="c")
    config = m.ExecutorConfig.build(None, nodes=["a", "b", "c"], cordon=True, clock=lambda: 0.0)
    with pytest.raises(ConflictError) as err:
        m.Executor(cluster, config, []).run()
    assert "node c changed on every one of 5 attempts to cordon it" in err.value.message
    assert "nothing moved, and the nodes this run had cordoned are schedulable again: a, b" in err.value.message
    assert [n for n in "abc" if cluster.nodes[n]["spec"]["unschedulable"]] == []
    assert [(path.rsplit("/", 1)[-1], body["spec"]["unschedulable"]) for _m, path, body in cluster.writes
            if not path.endswith("/c")] == [("a", True), ("b", True), ("a", None), ("b", None)]


def test_a_waves_configuration():
    config = m.ExecutorConfig.build(None, nodes=["b", "a"])
    assert config.drained == ("a", "b") and config.node is None
    assert config.reservation_prefix == "wave-a.b" and config.reason == "live migration off nodes a, b for maintenance"
    assert config.leftover_prefixes == ("a", "b", "wave-a.b")
    assert m.ExecutorConfig.build("a").leftover_prefixes == ("a",)
    # a long wave: a digest, so that "<prefix>-b<n>" stays a label value (63 characters, kvquota.io/reservation)
    long_nodes = ["worker-%02d.example.internal.corp" % i for i in range(5)]
    prefix = m.ExecutorConfig.build(None, nodes=long_nodes).reservation_prefix
    assert prefix.startswith("wave-worker-00.example.inte") and len(prefix + "-b999") <= 63, prefix
    assert re.match(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", prefix + "-b0")
    # one node given as nodes is that node
    one = m.ExecutorConfig.build(None, nodes=["a"])
    assert one.node == "a" and one.drained == ("a",) and one.reservation_prefix == "a"
    with pytest.raises(m.KvquotaError, match="both node a and nodes b"):
        m.ExecutorConfig.build("a", nodes=["b"])
    with pytest.raises(m.KvquotaError, match="node is empty"):
        m.ExecutorConfig.build(None)
