# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pure helpers of reservations.py (inputs, margins, what still counts). The operations themselves are
tested against a real apiserver in tests/integration/test_reservations_lab.py."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
from fractions import Fraction

import pytest
from hypothesis import given, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import ledger as L
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import reservations as R
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import InputError

Mi = 1024 ** 2
T0 = 1735689600


def test_parse_targets_accepts_pairs_and_strings():
    targets = R.parse_targets({("a", "q1"): {"limits.cpu": "1"}, "b/q2": {"limits.memory": "1Gi"}})
    assert targets == {("a", "q1"): {"limits.cpu": 1}, ("b", "q2"): {"limits.memory": 1024 * Mi}}


@pytest.mark.parametrize("bad", [{"a": {}}, {"a/b/c": {}}, {("a",): {}}, [], {"/q": {}}])
def test_parse_targets_refuses_malformed_keys(bad):
    with pytest.raises(InputError):
        R.parse_targets(bad)


def test_parse_targets_refuses_malformed_quantities():
    with pytest.raises(InputError):
        R.parse_targets({("a", "q"): {"limits.cpu": "lots"}})


def test_margin_percentage_rounds_up_per_unit():
    headroom = {"limits.cpu": Fraction(4015, 1000), "limits.memory": 1000 * Mi, "pods": 1}
    assert R.apply_margin(headroom, "10%") == {"limits.cpu": Fraction(4417, 1000),
                                               "limits.memory": 1100 * Mi, "pods": 2}
    assert R.apply_margin(headroom, "0.1") == R.apply_margin(headroom, "10%")
    assert R.apply_margin(headroom, None) == headroom
    assert R.apply_margin(headroom, "0%") == headroom


def test_margin_resource_list_adds_to_named_resources_only():
    headroom = {"limits.memory": 1000 * Mi}
    assert R.apply_margin(headroom, {"limits.memory": "24Mi", "limits.cpu": "1"}) == {"limits.memory": 1024 * Mi}


@pytest.mark.parametrize("bad", ["-5%", "lots", "-0.1"])
def test_margin_refuses_nonsense(bad):
    with pytest.raises(InputError):
        R.apply_margin({"limits.cpu": 1}, bad)


@given(st.integers(min_value=0, max_value=10 ** 12), st.integers(min_value=0, max_value=100))
def test_margin_never_reserves_less(amount, percent):
    result = R.apply_margin({"limits.memory": amount, "limits.cpu": Fraction(amount, 1000)}, "%d%%" % percent)
    assert result["limits.memory"] >= amount * (100 + percent) / Fraction(100)
    assert result["limits.memory"].denominator == 1
    assert (result["limits.cpu"] * 1000).denominator == 1


def test_pod_counts_like_the_quota_controller():
    running = {"metadata": {"name": "p"}, "status": {"phase": "Running"}}
    assert R.pod_counts(running, T0)
    assert not R.pod_counts({"metadata": {}, "status": {"phase": "Succeeded"}}, T0)
    assert not R.pod_counts({"metadata": {}, "status": {"phase": "Failed"}}, T0)
    terminating = {"metadata": {"deletionTimestamp": "2025-01-01T00:00:30Z", "deletionGracePeriodSeconds": 30},
                   "status": {"phase": "Running"}}
    assert R.pod_counts(terminating, T0 + 60)        # still within its grace period
    assert not R.pod_counts(terminating, T0 + 61)    # past deletionTimestamp + grace: no longer charged


def test_rancher_refusal_is_read_from_cattle_status():
    condition = {"Type": "ResourceQuotaValidated", "Status": "False",
                 "Message": "Resource quota [limitsCpu=5] exceeds project limit"}
    namespace = {"metadata": {"annotations": {"cattle.io/status": json.dumps({"Conditions": [condition]})}}}
    assert "exceeds project limit" in R._rancher_refusal(namespace)
    condition["Status"] = "True"
    namespace["metadata"]["annotations"]["cattle.io/status"] = json.dumps({"Conditions": [condition]})
    assert R._rancher_refusal(namespace) is None
    assert R._rancher_refusal({"metadata": {}}) is None


def test_ref_items_accept_strings_and_dicts():
    refs = {"migrations": ["ns1/m1", "m2", {"name": "m3"}], "sourcePods": [{"name": "p", "uid": "u"}]}
    assert R._ref_items(refs, "migrations", "t") == [{"namespace": "ns1", "name": "m1"},
                                                     {"namespace": "t", "name": "m2"},
                                                     {"namespace": "t", "name": "m3"}]
    assert R._ref_items(refs, "sourcePods", "t") == [{"namespace": "t", "name": "p", "uid": "u"}]


def test_changes_text():
    assert R._changes_text({"a": "1", "b": "2"}, {"a": "3", "b": "2"}) == "a 1 -> 3"
    assert R._changes_text({}, {}) == "no change"


def test_ref_items_of_one_namespace_only():
    refs = {"sourcePods": [{"namespace": "a", "name": "p1"}, {"namespace": "b", "name": "p2"}, {"name": "p3"}]}
    assert [item["name"] for item in R._ref_items(refs, "sourcePods", "a", True)] == ["p1", "p3"]


def _pod(memory, phase="Running"):
    return {"metadata": {"name": "p"}, "status": {"phase": phase},
            "spec": {"containers": [{"name": "compute", "resources": {"requests": {"memory": memory},
                                                                      "limits": {"memory": memory}}}]}}


def test_usage_is_settled_when_status_used_is_exactly_what_the_pods_charge():
    pods = [_pod("1Gi"), _pod("512Mi")]
    names = ["limits.memory", "requests.memory"]
    assert R._usage_is_settled({"limits.memory": 1536 * Mi, "requests.memory": 1536 * Mi}, names, pods)
    # the quota controller has not yet subtracted a pod that ended: not settled, keep waiting
    assert not R._usage_is_settled({"limits.memory": 2560 * Mi, "requests.memory": 1536 * Mi}, names, pods)
    # nothing counted but usage left: not settled either
    assert not R._usage_is_settled({"limits.memory": 1 * Mi}, ["limits.memory"], [])


def test_usage_is_never_settled_for_resources_pods_alone_do_not_explain():
    pods = [_pod("1Gi")]
    assert not R._usage_is_settled({"requests.storage": 10 * 1024 * Mi}, ["requests.storage"], pods)
    assert not R._usage_is_settled({"count/pods": 1}, ["count/pods"], pods)


def test_a_killed_writers_lease_frees_within_the_default_lock_timeout():
    # the lease is held for one write, which may wait rancher_sync_timeout for Rancher; a re-run waits
    # lock_timeout (default 120 s) for a lease left by a killed run
    assert R.DEFAULT_RANCHER_SYNC_TIMEOUT < R.lock_duration() < 120
    assert R.lock_duration(300) > 300


class _Entry(object):
    def __init__(self, created, vm_uids):
        self.created = created
        self.refs = {"vms": [{"namespace": "t", "name": "vm-%d" % i, "uid": uid} for i, uid in enumerate(vm_uids)]}


def _counted(name, created, owner_uid=None, owner_kind="VirtualMachineInstance"):
    meta = {"name": name, "creationTimestamp": created}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "kubevirt.io/v1", "kind": owner_kind, "name": "vm-x",
                                    "uid": owner_uid, "controller": True}]
    return {"metadata": meta, "status": {"phase": "Running"}}


def test_captured_headroom_names_pods_started_during_the_reservation_that_are_no_reserved_vms_launcher():
    entry = _Entry("2026-11-24T03:00:00Z", ["vmi-uid-1"])
    pods = [_counted("old", "2026-11-24T02:59:59Z"),                                   # there before: base usage
            _counted("virt-launcher-vm-1-tgt", "2026-11-24T03:00:02Z", "vmi-uid-1"),   # the migration's target
            _counted("grab", "2026-11-24T03:00:05Z"),                                  # a tenant's bare pod
            _counted("other-vm", "2026-11-24T03:00:06Z", "vmi-uid-9")]                 # a VM not reserved
    found = R._captured_headroom(entry, pods)
    assert [text.split(" ")[0] for text in found] == ["grab", "other-vm"]
    assert found[0] == ("grab (owner none, created 2026-11-24T03:00:05Z, after the reservation of "
                        "2026-11-24T03:00:00Z)")
    assert "owner VirtualMachineInstance vm-x" in found[1]


def test_captured_headroom_ignores_a_label_only_launcher_and_a_reservation_without_time():
    pod = _counted("fake", "2026-11-24T03:00:05Z")
    pod["metadata"]["labels"] = {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "vmi-uid-1"}
    assert [t.split(" ")[0] for t in R._captured_headroom(_Entry("2026-11-24T03:00:00Z", ["vmi-uid-1"]), [pod])] \
        == ["fake"]
    assert R._captured_headroom(_Entry(None, ["vmi-uid-1"]), [pod]) == []


class _QuotaState(object):
    def __init__(self, hard, used):
        self.quota = {"spec": {"hard": dict(hard)}, "status": {"hard": dict(hard), "used": dict(used)}}


def test_overuse_asks_for_a_value_the_administrators_write_visibly_changes():
    """The short campaign's case: after a top-up the reservation holds exactly what the pods use, so "raise the
    base to <used>" would be a write of the value spec.hard already has, which kvquota cannot see and keep as the
    new base. The fix then names the next MiB (memory) or millicore (cpu) above it."""
    used = {"limits.memory": "5113225521", "limits.cpu": "2"}
    after = L.Ledger("t", "q", base={"limits.memory": "5067874616", "limits.cpu": "1500m"})
    state = _QuotaState({"limits.memory": "5113225521", "limits.cpu": "2"}, used)
    names = ["limits.cpu", "limits.memory"]
    parsed_used = {"limits.memory": 5113225521, "limits.cpu": 2}
    target = {"limits.memory": 5067874616, "limits.cpu": Fraction(3, 2)}
    found = R._overuse(state, after, parsed_used, target, names)
    assert found["limits.memory"][3] == str(4877 * Mi)          # 4877Mi = 5113905152 > 5113225521 = spec.hard
    assert found["limits.cpu"][3] == "2001m"
    # spec.hard above what fits (another reservation still on top): what fits is asked for as it is
    state = _QuotaState({"limits.memory": str(6 * 1024 * Mi), "limits.cpu": "3"}, used)
    found = R._overuse(state, after, parsed_used, target, names)
    assert found["limits.memory"][3] == "5113225521" and found["limits.cpu"][3] == "2"
