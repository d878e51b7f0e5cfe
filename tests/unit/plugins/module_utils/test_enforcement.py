# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""enforcement.py: what a reservation wrote to spec.hard, whether status.hard (what quota admission checks) shows it,
and which refusals were made at a limit below it (the quota controller lagging, not pods larger than planned)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import admission
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import enforcement as e

MI = 1024 ** 2
GI = 1024 ** 3
T = ("tenant-a", "compute")


def _quota(spec, status=None):
    quota = {"metadata": {"namespace": T[0], "name": T[1]}, "spec": {"hard": dict(spec)}}
    if status is not None:
        quota["status"] = {"hard": dict(status)}
    return quota


# -- what was written -------------------------------------------------------------------------------------

def test_written_hard_takes_the_after_value_of_the_names_the_reservation_expands():
    result = {"quotas": [{"namespace": "tenant-a", "quota": "compute",
                          "before": {"limits.cpu": "3175m", "limits.memory": "6Gi", "pods": "20"},
                          "after": {"limits.cpu": "4175m", "limits.memory": "8Gi", "pods": "20"},
                          "delta": {"limits.cpu": "1", "limits.memory": "2Gi"}}]}
    assert e.written_hard(result) == {T: {"limits.cpu": Fraction(4175, 1000), "limits.memory": 8 * GI}}


def test_written_hard_keeps_an_unchanged_reservation_and_a_name_changed_without_delta():
    # a reserve that changed nothing (same id, same headroom) still names what must be enforced
    unchanged = {"quotas": [{"namespace": "tenant-a", "quota": "compute", "before": {"limits.cpu": "4"},
                             "after": {"limits.cpu": "4"}, "delta": {"limits.cpu": "500m"}}]}
    assert e.written_hard(unchanged) == {T: {"limits.cpu": 4}}
    spelled = {"quotas": [{"namespace": "tenant-a", "quota": "compute", "before": {"limits.memory": "1024Mi"},
                           "after": {"limits.memory": "1Gi", "requests.memory": "3Gi"}}]}
    # 1024Mi and 1Gi are the same amount: only the name whose value changed counts
    assert e.written_hard(spelled) == {T: {"requests.memory": 3 * GI}}


def test_written_hard_of_a_result_without_after_or_with_zero_delta_is_empty():
    assert e.written_hard({"quotas": [{"namespace": "tenant-a", "quota": "compute",
                                       "delta": {"limits.memory": "256Mi"}}]}) == {}
    assert e.written_hard({"quotas": [{"namespace": "tenant-a", "quota": "compute", "before": {"pods": "5"},
                                       "after": {"pods": "5"}, "delta": {"pods": "0"}}]}) == {}
    assert e.written_hard(None) == {} and e.written_hard({"quotas": []}) == {}


# -- whether status.hard shows it -------------------------------------------------------------------------

def test_status_hard_at_the_old_limit_is_not_enforced_yet():
    quota = _quota({"limits.cpu": "4175m", "limits.memory": "8Gi"}, {"limits.cpu": "3175m", "limits.memory": "8Gi"})
    gaps = e.unenforced(quota, {"limits.cpu": Fraction(4175, 1000), "limits.memory": 8 * GI})
    assert gaps == {"limits.cpu": (Fraction(4175, 1000), Fraction(3175, 1000))}
    assert e.gaps_text(T, gaps) == "tenant-a/compute: spec.hard limits.cpu=4175m, status.hard limits.cpu=3175m"


def test_a_quota_without_status_hard_is_not_enforced_and_says_none():
    gaps = e.unenforced(_quota({"limits.memory": "8Gi"}), {"limits.memory": 8 * GI})
    assert gaps == {"limits.memory": (8 * GI, None)}
    assert e.gaps_text(T, gaps) == "tenant-a/compute: spec.hard limits.memory=8Gi, status.hard limits.memory=(none)"


def test_status_hard_equal_or_above_the_written_value_is_enforced():
    written = {"limits.cpu": Fraction(4175, 1000)}
    assert e.unenforced(_quota({"limits.cpu": "4175m"}, {"limits.cpu": "4175m"}), written) == {}
    # another job's reservation of the same namespace came on top since
    assert e.unenforced(_quota({"limits.cpu": "5"}, {"limits.cpu": "5"}), written) == {}


def test_spec_hard_lowered_since_the_write_is_what_status_hard_must_reach():
    # another job released its own reservation of the namespace: 4175m - 1 = 3175m is all that can be enforced
    written = {"limits.cpu": Fraction(4175, 1000)}
    assert e.unenforced(_quota({"limits.cpu": "3175m"}, {"limits.cpu": "3175m"}), written) == {}
    assert e.unenforced(_quota({"limits.cpu": "3175m"}, {"limits.cpu": "3"}), written) == \
        {"limits.cpu": (Fraction(3175, 1000), Fraction(3))}
    # a name an administrator removed from spec.hard requires nothing
    assert e.unenforced(_quota({"pods": "10"}, {"pods": "10"}), written) == {}


def test_required_hard_is_the_written_value_bounded_by_spec_hard_now():
    written = {"limits.cpu": Fraction(4175, 1000), "limits.memory": 8 * GI, "pods": Fraction(12)}
    quota = _quota({"limits.cpu": "5", "limits.memory": "6Gi"})
    assert e.required_hard(quota, written) == {"limits.cpu": Fraction(4175, 1000), "limits.memory": 6 * GI}


# -- refusals at a limit below what was written -----------------------------------------------------------

LAG_MESSAGE = ('failed to create vmi migration target pod: pods "virt-launcher-vm-1-x" is forbidden: exceeded quota: '
               'compute, requested: limits.cpu=1015m, used: limits.cpu=3000m, limited: limits.cpu=3175m')


def _limited(message):
    """{(ns, quota): limited} as headroom.refused_target_pods gathers it from a refusal's text."""
    return dict((("tenant-a", r["quota"]), r["limited"]) for r in admission.parse_exceeded_quota(message))


def test_a_refusal_below_the_written_spec_hard_is_the_controller_lagging():
    written = {T: {"limits.cpu": Fraction(4175, 1000), "limits.memory": 8 * GI}}
    lagging = e.lagging_refusals(_limited(LAG_MESSAGE), written)
    assert lagging == {T: {"limits.cpu": (Fraction(3175, 1000), Fraction(4175, 1000))}}
    assert e.lagging_text(lagging) == "tenant-a/compute limits.cpu=3175m (written 4175m)"


def test_a_refusal_at_the_written_limit_is_a_real_shortfall():
    at_limit = LAG_MESSAGE.replace("limited: limits.cpu=3175m", "limited: limits.cpu=4175m")
    assert e.lagging_refusals(_limited(at_limit), {T: {"limits.cpu": Fraction(4175, 1000)}}) == {}


def test_only_names_and_quotas_both_know_are_compared():
    # the refusal names memory, the batch wrote cpu only; another quota of the namespace refused
    memory = {T: {"limits.memory": 6 * GI}}
    assert e.lagging_refusals(memory, {T: {"limits.cpu": 4}}) == {}
    other = {("tenant-a", "pods-only"): {"pods": Fraction(3)}}
    assert e.lagging_refusals(other, {T: {"pods": 4}}) == {}
    assert e.lagging_refusals({}, {T: {"pods": 4}}) == {} and e.lagging_refusals(memory, None) == {}


# -- the wait -------------------------------------------------------------------------------------------------

class LaggingQuotas(object):
    """get_quota over quotas whose status.hard shows spec.hard only from the catch_up-th read of that quota on
    (None: never). Counts the reads per quota."""

    def __init__(self, quotas, catch_up):
        self.quotas = quotas
        self.catch_up = catch_up
        self.reads = {}

    def get_quota(self, namespace, name):
        target = (namespace, name)
        self.reads[target] = self.reads.get(target, 0) + 1
        spec, status = self.quotas[target]
        caught_up = self.catch_up.get(target) is not None and self.reads[target] >= self.catch_up[target]
        quota = _quota(spec, spec if caught_up else status)
        quota["metadata"] = {"namespace": namespace, "name": name}
        return quota


class FakeTime(object):
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


U = ("tenant-b", "compute")


def test_wait_enforced_rereads_only_the_quotas_still_behind_until_they_catch_up():
    api = LaggingQuotas({T: ({"limits.cpu": "4"}, {"limits.cpu": "3"}), U: ({"pods": "12"}, {"pods": "12"})},
                        {T: 4, U: 1})
    time_ = FakeTime()
    written = {T: {"limits.cpu": Fraction(4)}, U: {"pods": Fraction(12)}}
    gaps, waited = e.wait_enforced(api.get_quota, written, 30, time_.clock, time_.sleep, poll=0.5)
    assert gaps == {}
    assert api.reads == {T: 4, U: 1}       # U was enforced at the first read and not read again
    assert waited == 1.5 and time_.sleeps == [0.5, 0.5, 0.5]


def test_wait_enforced_gives_the_gaps_at_its_deadline():
    api = LaggingQuotas({T: ({"limits.cpu": "4"}, {"limits.cpu": "3"})}, {T: None})
    time_ = FakeTime()
    gaps, waited = e.wait_enforced(api.get_quota, {T: {"limits.cpu": Fraction(4)}}, 2, time_.clock, time_.sleep,
                                   poll=0.5)
    assert gaps == {T: {"limits.cpu": (Fraction(4), Fraction(3))}}
    assert waited == 2.0 and api.reads[T] == 5


def test_the_enforce_timeout_is_the_outage_budget_plus_a_controller_relist():
    assert e.enforce_timeout(60) == 60 + e.CONTROLLER_RELIST_SECONDS == 120
    assert e.enforce_timeout(0) == 60


# -- after a release: status.hard back down ----------------------------------------------------------------------

def test_restored_hard_takes_the_names_a_changed_release_lowered():
    items = [{"namespace": "tenant-a", "quota": "compute", "changed": True,
              "before": {"limits.cpu": "3", "limits.memory": "3Gi", "pods": "5", "requests.storage": "1Ti"},
              "after": {"limits.cpu": "2", "limits.memory": "2Gi", "pods": "5"}},
             {"namespace": "tenant-b", "quota": "compute", "changed": False,
              "before": {"limits.cpu": "3"}, "after": {"limits.cpu": "2"}},
             {"namespace": "tenant-c", "quota": "compute", "changed": True, "before": {"pods": "4"},
              "after": {"pods": "4"}}]
    # pods unchanged, requests.storage removed (no limit, nothing to wait for), tenant-b not written: only two names
    assert e.restored_hard(items) == {T: {"limits.cpu": Fraction(2), "limits.memory": 2 * 1024 ** 3}}
    assert e.restored_hard(None) == {} and e.restored_hard([]) == {}


def test_unlowered_names_what_admission_still_grants_above_the_restored_spec():
    restored = {"limits.cpu": Fraction(2), "limits.memory": Fraction(2 * 1024 ** 3)}
    lagging = _quota({"limits.cpu": "2", "limits.memory": "2Gi"}, {"limits.cpu": "3", "limits.memory": "2Gi"})
    assert e.unlowered(lagging, restored) == {"limits.cpu": (Fraction(2), Fraction(3))}
    assert e.unlowered(_quota({"limits.cpu": "2", "limits.memory": "2Gi"},
                              {"limits.cpu": "2", "limits.memory": "2Gi"}), restored) == {}
    # another job reserved since: spec.hard is higher again, status.hard up to it is not this release's headroom
    assert e.unlowered(_quota({"limits.cpu": "4", "limits.memory": "2Gi"},
                              {"limits.cpu": "3", "limits.memory": "2Gi"}), restored) == {}
    # status.hard without the name: admission limits nothing of it yet
    assert e.unlowered(_quota({"limits.cpu": "2"}, {}), {"limits.cpu": Fraction(2)}) == \
        {"limits.cpu": (Fraction(2), None)}
    # spec.hard no longer limits the name: nothing to wait for
    assert e.unlowered(_quota({"pods": "4"}, {"limits.cpu": "3", "pods": "4"}), {"limits.cpu": Fraction(2)}) == {}


def test_wait_enforced_with_unlowered_waits_until_status_hard_is_back_down():
    api = LaggingQuotas({T: ({"limits.cpu": "2"}, {"limits.cpu": "3"})}, {T: 3})
    time_ = FakeTime()
    gaps, waited = e.wait_enforced(api.get_quota, {T: {"limits.cpu": Fraction(2)}}, 30, time_.clock, time_.sleep,
                                   poll=0.5, behind=e.unlowered)
    assert gaps == {} and api.reads == {T: 3} and waited == 1.0
    never = LaggingQuotas({T: ({"limits.cpu": "2"}, {"limits.cpu": "3"})}, {T: None})
    later = FakeTime()
    gaps, waited = e.wait_enforced(never.get_quota, {T: {"limits.cpu": Fraction(2)}}, 2, later.clock, later.sleep,
                                   poll=0.5, behind=e.unlowered)
    assert gaps == {T: {"limits.cpu": (Fraction(2), Fraction(3))}}
    assert e.gaps_text(T, gaps[T]) == "tenant-a/compute: spec.hard limits.cpu=2, status.hard limits.cpu=3"
