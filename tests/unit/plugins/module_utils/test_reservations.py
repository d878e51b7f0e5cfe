# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pure helpers of reservations.py (inputs, margins, what still counts). The operations themselves are
tested against a real apiserver in tests/integration/test_reservations_lab.py."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from fractions import Fraction

import pytest
from hypothesis import given, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import release_readiness as RR
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations as R
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError

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
    assert RR.pod_counts(running, T0)
    assert not RR.pod_counts({"metadata": {}, "status": {"phase": "Succeeded"}}, T0)
    assert not RR.pod_counts({"metadata": {}, "status": {"phase": "Failed"}}, T0)
    terminating = {"metadata": {"deletionTimestamp": "2025-01-01T00:00:30Z", "deletionGracePeriodSeconds": 30},
                   "status": {"phase": "Running"}}
    assert RR.pod_counts(terminating, T0 + 60)        # still within its grace period
    assert not RR.pod_counts(terminating, T0 + 61)    # past deletionTimestamp + grace: no longer charged


def test_ref_items_accept_strings_and_dicts():
    refs = {"migrations": ["ns1/m1", "m2", {"name": "m3"}], "sourcePods": [{"name": "p", "uid": "u"}]}
    assert RR.ref_items(refs, "migrations", "t") == [{"namespace": "ns1", "name": "m1"},
                                                     {"namespace": "t", "name": "m2"},
                                                     {"namespace": "t", "name": "m3"}]
    assert RR.ref_items(refs, "sourcePods", "t") == [{"namespace": "t", "name": "p", "uid": "u"}]


def test_changes_text():
    assert R._changes_text({"a": "1", "b": "2"}, {"a": "3", "b": "2"}) == "a 1 -> 3"
    assert R._changes_text({}, {}) == "no change"


def test_ref_items_of_one_namespace_only():
    refs = {"sourcePods": [{"namespace": "a", "name": "p1"}, {"namespace": "b", "name": "p2"}, {"name": "p3"}]}
    assert [item["name"] for item in RR.ref_items(refs, "sourcePods", "a", True)] == ["p1", "p3"]


def test_a_killed_writers_lease_frees_within_the_default_lock_timeout():
    # the lease is held for one write, which may wait rancher_sync_timeout for Rancher; a re-run waits
    # lock_timeout (default 120 s) for a lease left by a killed run
    assert R.DEFAULT_RANCHER_SYNC_TIMEOUT < R.lock_duration() < 120
    assert R.lock_duration(300) > 300
