# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_migrate and a quota controller that lags (issue 11 follow-up): quota admission checks a quota's
status.hard, which kube-controller-manager copies from spec.hard. With the controller-manager frozen, a
reservation written to spec.hard is not enforced: the executor must wait until status.hard shows it before it
creates the batch's migrations (and then move the VM with no top-up), or, when it never does within
api_outage_budget + 60 s, stop before any migration naming the quota, spec.hard against status.hard, and the fix.
kvquota_reserve on its own returns only once status.hard shows what it wrote, kvquota_release only once it is back down.

Run as the least-privilege user, on a lab of its own (it freezes that lab's kube-controller-manager).
Run: KVQ_LAB_REQUIRED=1 python3 -m pytest -q -p no:cacheprovider tests/integration/test_quota_lag_lab.py
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re
import threading
import time

import pytest

import modlab as M
from kvqlab.faults import Faults

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity

pytestmark = pytest.mark.lab_faults   # make lab-tests-faults (conftest.py: every lab test has one such marker)

HELD_FROZEN = 6   # seconds the controller-manager stays frozen after the reservation is written


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A private lab (two nodes: a VM needs a target): the fault must never hit a lab other tests use."""
    yield from M.private_lab(tmp_path_factory, "kvqlab-quota-lag", nodes=2)


@pytest.fixture(scope="module")
def faults(lab):
    return Faults(lab, log=print)


def vm_node(r, ns):
    return r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)["status"]["nodeName"]


def expanded(r, ns, base):
    """spec.hard of ns/compute when it is above base in some name (a reservation is written), else None."""
    hard = M.quota(r, ns, "compute")["spec"]["hard"]
    return hard if any(parse_quantity(hard[n]) > parse_quantity(base[n]) for n in base if n in hard) else None


def module_in_background(name, args, user):
    """Run kvquota.maintenance.<name> in a thread; (thread, box): box["result"] once it returned."""
    box = {}
    thread = threading.Thread(target=lambda: box.update(result=M.run_module(name, args, user)), daemon=True)
    thread.start()
    return thread, box


def test_migrations_wait_until_the_quota_controller_copies_the_reservation_to_status_hard(lab, emu, r, user, faults):
    ns = "lag-wait"
    M.make_tenant(lab, ns)
    base = dict(M.quota(r, ns, "compute")["spec"]["hard"])
    node = vm_node(r, ns)
    args = {"node": node, "batches": [{"vms": ["%s/vm-1" % ns]}], "reservation_prefix": "lag-%s" % ns,
            "poll_interval": 0.5, "ttl": "1h", "api_outage_budget": 60}
    try:
        faults.freeze("kube-controller-manager")
        try:
            thread, box = module_in_background("kvquota_migrate", args, user)
            written = M.wait(lambda: expanded(r, ns, base), 120, "the reservation written to spec.hard")
            time.sleep(HELD_FROZEN)
            quota = M.quota(r, ns, "compute")
            # the fault is real: status.hard still shows the base, and nothing was asked to migrate yet
            assert quota["status"]["hard"] == base, quota["status"]
            assert r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"] == []
        finally:
            faults.thaw("kube-controller-manager")
        thread.join(300)
        res = M.assert_ok(box.get("result"), "kvquota_migrate with the quota controller frozen for a while")
        batch = res["batches"][0]
        print(res["progress"])
        assert batch["status_hard_wait_seconds"] >= HELD_FROZEN - 1, batch
        assert batch["top_ups"] == 0, batch
        assert any("quota admission enforces reservation lag-%s-b0 after" % ns in line for line in res["progress"])
        assert written != base and vm_node(r, ns) != node
        assert M.quota(r, ns, "compute")["spec"]["hard"] == base
        assert not [k for k in M.ledgers(r) if k.startswith(ns + "/")]
    finally:
        faults.thaw("kube-controller-manager")
        M.delete_namespace(r, ns)


def test_a_quota_controller_that_never_catches_up_stops_the_run_before_any_migration(lab, emu, r, user, faults):
    ns = "lag-stop"
    M.make_tenant(lab, ns)
    base = dict(M.quota(r, ns, "compute")["spec"]["hard"])
    node = vm_node(r, ns)
    args = {"node": node, "batches": [{"vms": ["%s/vm-1" % ns]}], "reservation_prefix": "lag-%s" % ns,
            "poll_interval": 0.5, "ttl": "1h", "api_outage_budget": 10, "stop_release_timeout": 30}
    try:
        with faults.frozen("kube-controller-manager"):
            res = M.run_module("kvquota_migrate", args, user)
            msg = M.assert_one_line_error(res, "quota admission does not enforce reservation lag-%s-b0 " % ns,
                                          "%s/compute: spec.hard " % ns, ", status.hard ", "kube-controller-manager",
                                          "re-run the playbook")
            print(msg)
            # it waited api_outage_budget 10 s + 60 s for the controller's cache to re-list
            waited = int(re.search(r"b0 (\d+)s after it was written", msg).group(1))
            assert 70 <= waited <= 75, msg
            # stopped before any migration, and gave its reservation back (spec.hard needs no controller)
            assert res["migrations_created"] == [] and res["reservations_held"] == []
            assert res["reservations_released"] == ["lag-%s-b0" % ns]
            assert r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"] == []
            assert M.quota(r, ns, "compute")["spec"]["hard"] == base
        M.wait(lambda: M.quota(r, ns, "compute")["status"]["hard"] == base, 60, "status.hard back at base")
        again = M.assert_ok(M.run_module("kvquota_migrate", dict(args, api_outage_budget=60), user),
                            "the re-run once the controller-manager is back")
        assert again["outcome"] == "succeeded" and vm_node(r, ns) != node
        assert M.quota(r, ns, "compute")["spec"]["hard"] == base
    finally:
        M.delete_namespace(r, ns)


def test_kvquota_reserve_returns_only_once_the_quota_controller_enforces_it(lab, emu, r, user, faults):
    """kubevirt_update's drive mode and a user's playbook start migrations right after kvquota_reserve returns."""
    ns = "lag-reserve"
    M.make_tenant(lab, ns)
    base = dict(M.quota(r, ns, "compute")["spec"]["hard"])
    rid = "lag-reserve-1"
    args = {"reservation_id": rid, "vms": [{"namespace": ns, "name": "vm-1"}], "ttl": "1h", "api_outage_budget": 60}
    try:
        faults.freeze("kube-controller-manager")
        try:
            thread, box = module_in_background("kvquota_reserve", args, user)
            M.wait(lambda: expanded(r, ns, base), 120, "the reservation written to spec.hard")
            time.sleep(HELD_FROZEN)
            # the fault is real, and the module has not returned while admission would refuse at the old limit
            assert M.quota(r, ns, "compute")["status"]["hard"] == base
            assert thread.is_alive() and "result" not in box
        finally:
            faults.thaw("kube-controller-manager")
        thread.join(300)
        res = M.assert_ok(box.get("result"), "kvquota_reserve with the quota controller frozen for a while")
        assert res["status_hard_wait_seconds"] >= HELD_FROZEN - 1, res
        quota = M.quota(r, ns, "compute")
        assert quota["status"]["hard"] == quota["spec"]["hard"] != base
        M.assert_ok(M.run_module("kvquota_release", {"reservation_id": rid}, user))
        assert M.quota(r, ns, "compute")["spec"]["hard"] == base
        assert not [k for k in M.ledgers(r) if k.startswith(ns + "/")]
    finally:
        faults.thaw("kube-controller-manager")
        M.delete_namespace(r, ns)


def test_kvquota_release_returns_only_once_the_quota_controller_lowered_status_hard(lab, emu, r, user, faults):
    """Until status.hard is back down, admission still grants the headroom spec.hard no longer has: a release
    that returned (and lifted the fence) at once would leave the tenant a window to take it."""
    ns = "lag-release"
    M.make_tenant(lab, ns)
    base = dict(M.quota(r, ns, "compute")["spec"]["hard"])
    rid = "lag-release-1"
    try:
        M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": rid, "vms": [{"namespace": ns, "name": "vm-1"}],
                                                     "ttl": "1h", "api_outage_budget": 60}, user))
        reserved = M.quota(r, ns, "compute")
        assert reserved["status"]["hard"] == reserved["spec"]["hard"] != base
        faults.freeze("kube-controller-manager")
        try:
            thread, box = module_in_background("kvquota_release", {"reservation_id": rid, "api_outage_budget": 60},
                                               user)
            M.wait(lambda: M.quota(r, ns, "compute")["spec"]["hard"] == base, 120, "spec.hard restored")
            time.sleep(HELD_FROZEN)
            # the fault is real: admission still checks the reserved status.hard, and the module has not returned
            assert M.quota(r, ns, "compute")["status"]["hard"] == reserved["status"]["hard"]
            assert thread.is_alive() and "result" not in box
        finally:
            faults.thaw("kube-controller-manager")
        thread.join(300)
        res = M.assert_ok(box.get("result"), "kvquota_release with the quota controller frozen for a while")
        assert res["status_hard_wait_seconds"] >= HELD_FROZEN - 1, res
        assert [q["outcome"] for q in res["quotas"]] == ["released"], res["quotas"]
        assert M.quota(r, ns, "compute")["status"]["hard"] == base
        assert not [k for k in M.ledgers(r) if k.startswith(ns + "/")]
    finally:
        faults.thaw("kube-controller-manager")
        M.delete_namespace(r, ns)


def test_a_check_during_migrations_in_flight_sees_their_usage_within_the_reservation(lab, emu, r, user, faults):
    """A run stopped with its migrations in flight and re-run before they finish (the control-plane campaign's
    "apiserver restart, down 45 s, budget 15 s" re-run, with kube-scheduler's informers still re-listing): the
    re-run's plan must not read the target pods' usage, admitted against the held reservation, as "usage above
    hard" (which stopped node_maintenance's re-run, blocked, until the migrations finished)."""
    ns = "lag-inflight"
    M.make_tenant(lab, ns)
    base = dict(M.quota(r, ns, "compute")["spec"]["hard"])
    node = vm_node(r, ns)
    args = {"node": node, "batches": [{"vms": ["%s/vm-1" % ns]}], "reservation_prefix": "lag-%s" % ns,
            "poll_interval": 0.5, "ttl": "1h", "api_outage_budget": 60}
    try:
        with faults.frozen("kube-scheduler"):
            thread, box = module_in_background("kvquota_migrate", args, user)
            # the target pod is admitted (charged against the reservation) but not scheduled
            M.wait(lambda: len(M.launcher_pods(r, ns)) == 2, 120, "the target pod created")
            M.wait(lambda: any(parse_quantity(v) > parse_quantity(base[n])
                               for n, v in (M.quota(r, ns, "compute")["status"].get("used") or {}).items()
                               if n in base), 60, "usage above the base")
            check = M.assert_ok(M.run_module("kvquota_check", {"nodes": [node]}, user),
                                "kvquota_check with a migration in flight")
            kinds = [b["kind"] for b in check["blockers"]]
            print(kinds, [b["message"] for b in check["blockers"]])
            assert "usage_above_hard" not in kinds, check["blockers"]
        thread.join(300)
        res = M.assert_ok(box.get("result"), "kvquota_migrate once kube-scheduler is back")
        assert res["outcome"] == "succeeded" and vm_node(r, ns) != node
        assert M.quota(r, ns, "compute")["spec"]["hard"] == base
        assert not [k for k in M.ledgers(r) if k.startswith(ns + "/")]
    finally:
        M.delete_namespace(r, ns)
