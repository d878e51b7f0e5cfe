# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reservation ledger: examples plus properties (hypothesis)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import datetime
import json

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger as L
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import timeutil as T
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity

Gi = 1024 ** 3
T0 = 1735689600  # 2025-01-01T00:00:00Z
HARD = {"limits.cpu": "30", "limits.memory": "5000Mi", "pods": "10"}
FIELD_REPORT = {"limits.cpu": "4015m", "limits.memory": "8940039936"}


def reserved(delta=None, rid="node-1", hard=None, now=T0, **kwargs):
    ledger, outcome = L.reserve(L.new_ledger("tenant-a", "compute"), rid, delta or FIELD_REPORT, hard or HARD, now,
                                owner="awx-job-42", reason="drain node-1", ttl_seconds=3600, **kwargs)
    return L.mark_written(ledger), outcome


def value(text, name="x"):
    return parse_quantity(text, name)


# ---------------------------------------------------------------------------
# time

def test_time_round_trip():
    assert T.format_time(T0) == "2025-01-01T00:00:00Z"
    assert T.parse_time("2025-01-01T00:00:00Z") == T0
    assert T.parse_time("2025-01-01T01:00:00.123456+01:00") == T0
    assert T.parse_time(None) is None
    with pytest.raises(InputError):
        T.parse_time("yesterday")


UTC = datetime.timezone.utc


@pytest.mark.parametrize("text,expected", [
    ("2025-01-31T12:00:00Z", datetime.datetime(2025, 1, 31, 12, tzinfo=UTC)),
    ("2025-01-31T14:00:00.5+02:00", datetime.datetime(2025, 1, 31, 12, 0, 0, 500000, tzinfo=UTC)),
    ("2025-01-31T12:00:00.123456789Z", datetime.datetime(2025, 1, 31, 12, 0, 0, 123456, tzinfo=UTC)),  # nanos
    ("2025-01-31t12:00:00z", datetime.datetime(2025, 1, 31, 12, tzinfo=UTC)),   # RFC 3339 allows lower case
    ("2025-01-31 10:30:00-01:30", datetime.datetime(2025, 1, 31, 12, tzinfo=UTC)),
    ("2025-01-31T12:00:00", datetime.datetime(2025, 1, 31, 12, tzinfo=UTC)),   # no zone: UTC
    (datetime.datetime(2025, 1, 31, 12), datetime.datetime(2025, 1, 31, 12, tzinfo=UTC)),
])
def test_parse_datetime(text, expected):
    parsed = T.parse_datetime(text)
    assert parsed == expected and parsed.utcoffset() is not None


@pytest.mark.parametrize("text", ["yesterday", "", "2025-13-01T00:00:00Z", "12:00"])
def test_malformed_times_are_one_clear_error(text):
    with pytest.raises(InputError) as err:
        T.parse_time(text)
    assert str(err.value).startswith("malformed time '%s'" % text)
    assert "2025-01-31T12:00:00Z" in str(err.value)


def test_parse_time_is_whole_seconds_of_parse_datetime():
    assert T.parse_time("2025-01-01T00:00:00.999Z") == T0
    assert T.parse_time(datetime.datetime(2025, 1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))) == T0
    assert T.parse_time(T0 + 0.5) == T0


# ---------------------------------------------------------------------------
# desired = base + deltas

def test_first_reservation_records_base_and_desired():
    ledger, outcome = reserved()
    assert outcome["outcome"] == L.CREATED
    assert ledger.base == {"limits.cpu": "30", "limits.memory": "5000Mi"}
    assert L.desired_strings(ledger) == {"limits.cpu": "34015m", "limits.memory": "14182919936"}
    assert ledger.written == L.desired_strings(ledger)
    entry = ledger.reservations["node-1"]
    assert entry.owner == "awx-job-42" and entry.reason == "drain node-1"
    assert entry.created == "2025-01-01T00:00:00Z" and entry.expires == "2025-01-01T01:00:00Z"


def test_desired_keeps_the_base_format():
    ledger, _ignored = reserved({"limits.memory": "1Gi"})
    assert L.desired_strings(ledger) == {"limits.memory": "6024Mi"}


def test_untracked_names_are_left_out_and_reported():
    ledger, outcome = reserved({"limits.cpu": "1", "requests.nvidia.com/gpu": "1"})
    assert outcome["untracked"] == ["requests.nvidia.com/gpu"]
    assert L.desired_strings(ledger) == {"limits.cpu": "31"}
    same, outcome = L.reserve(L.new_ledger("t", "q"), "x", {"requests.storage": "1Gi"}, HARD, T0)
    assert outcome["outcome"] == L.UNTRACKED and L.is_idle(same)


def test_two_reservations_add_up_and_release_in_any_order():
    ledger, _ignored = reserved({"limits.cpu": "2"}, "a")
    ledger, _ignored = L.reserve(ledger, "b", {"limits.cpu": "3", "limits.memory": "1Gi"}, HARD, T0)
    assert L.desired_strings(ledger) == {"limits.cpu": "35", "limits.memory": "6024Mi"}
    one, _ignored = L.release(ledger, "a", T0)
    assert L.desired_strings(one) == {"limits.cpu": "33", "limits.memory": "6024Mi"}
    both, _ignored = L.release(one, "b", T0)
    assert L.is_idle(both)
    assert L.desired_strings(both) == {"limits.cpu": "30", "limits.memory": "5000Mi"}


def test_negative_delta_is_refused():
    with pytest.raises(InputError, match="negative"):
        reserved({"limits.cpu": "-1"})


def test_bad_id_and_ttl_are_refused():
    with pytest.raises(InputError):
        L.reserve(L.new_ledger("t", "q"), "", {"limits.cpu": "1"}, HARD, T0)
    with pytest.raises(InputError):
        L.reserve(L.new_ledger("t", "q"), "a", {"limits.cpu": "1"}, HARD, T0, ttl_seconds=0)


# ---------------------------------------------------------------------------
# idempotency, mismatch, top-up, replace

def test_same_id_same_delta_is_unchanged():
    ledger, _ignored = reserved()
    again, outcome = L.reserve(ledger, "node-1", {"limits.memory": "8940039936", "limits.cpu": "4.015"}, HARD,
                               T0 + 60, ttl_seconds=3600)
    assert outcome["outcome"] == L.UNCHANGED
    assert again == ledger


def test_same_id_other_delta_is_a_clear_error():
    ledger, _ignored = reserved()
    with pytest.raises(InputError) as err:
        L.reserve(ledger, "node-1", {"limits.cpu": "5"}, HARD, T0)
    text = str(err.value)
    assert "node-1" in text and "limits.cpu=4015m" in text and "limits.cpu=5" in text and "top_up" in text


def test_top_up_adds_exactly_once_per_key():
    ledger, _ignored = reserved()
    topped, outcome = L.reserve(ledger, "node-1", {"limits.memory": "100Mi"}, HARD, T0, top_up=True)
    assert outcome["outcome"] == L.TOPPED_UP
    assert topped.reservations["node-1"].delta["limits.memory"] == "9044897536"
    again, outcome = L.reserve(topped, "node-1", {"limits.memory": "100Mi"}, HARD, T0, top_up=True)
    assert outcome["outcome"] == L.UNCHANGED and again == topped
    twice, outcome = L.reserve(topped, "node-1", {"limits.memory": "100Mi"}, HARD, T0, top_up="attempt-2")
    assert outcome["outcome"] == L.TOPPED_UP
    assert twice.reservations["node-1"].delta["limits.memory"] == "9149755136"


def test_top_up_of_a_new_id_creates_it():
    ledger, outcome = L.reserve(L.new_ledger("t", "q"), "x", {"limits.cpu": "1"}, HARD, T0, top_up=True)
    assert outcome["outcome"] == L.CREATED
    assert L.reserve(ledger, "x", {"limits.cpu": "1"}, HARD, T0, top_up=True)[1]["outcome"] == L.UNCHANGED


def test_replace_and_renew():
    ledger, _ignored = reserved()
    replaced, outcome = L.reserve(ledger, "node-1", {"limits.cpu": "1"}, HARD, T0 + 10, ttl_seconds=60,
                                  replace=True)
    assert outcome["outcome"] == L.REPLACED
    assert L.desired_strings(replaced) == {"limits.cpu": "31", "limits.memory": "5000Mi"}
    renewed, outcome = L.reserve(replaced, "node-1", {"limits.cpu": "1"}, HARD, T0 + 20, ttl_seconds=60,
                                 replace=True)
    assert outcome["outcome"] == L.RENEWED
    assert renewed.reservations["node-1"].expires == T.format_time(T0 + 80)
    with pytest.raises(InputError):
        L.reserve(ledger, "node-1", {"limits.cpu": "1"}, HARD, T0, top_up=True, replace=True)


def test_refs_are_merged_without_changing_the_delta():
    ledger, _ignored = reserved(refs={"batch": "1", "migrations": [{"namespace": "tenant-a", "name": "m1"}]})
    more, outcome = L.reserve(ledger, "node-1", FIELD_REPORT, HARD, T0,
                              refs={"migrations": [{"namespace": "tenant-a", "name": "m1"},
                                                   {"namespace": "tenant-a", "name": "m2"}],
                                    "sourcePods": [{"name": "virt-launcher-a", "uid": "u1"}]})
    assert outcome["outcome"] == L.REFS_UPDATED
    assert [m["name"] for m in more.reservations["node-1"].refs["migrations"]] == ["m1", "m2"]
    assert L.desired_strings(more) == L.desired_strings(ledger)
    same, outcome = L.reserve(more, "node-1", FIELD_REPORT, HARD, T0, refs={"sourcePods": [
        {"name": "virt-launcher-a", "uid": "u1"}]})
    assert outcome["outcome"] == L.UNCHANGED


# ---------------------------------------------------------------------------
# release and expiry

def test_release_is_idempotent_and_says_so():
    ledger, _ignored = reserved()
    released, outcome = L.release(ledger, "node-1", T0 + 5)
    assert outcome["outcome"] == L.RELEASED and L.is_idle(released)
    again, outcome = L.release(released, "node-1", T0 + 6)
    assert outcome["outcome"] == L.ALREADY_RELEASED and again == released
    assert "already released" in outcome["message"]
    _ignored, outcome = L.release(released, "never", T0)
    assert outcome["outcome"] == L.UNKNOWN and "nothing to release" in outcome["message"]


def test_expired_lists_but_does_not_release():
    ledger, _ignored = reserved()
    ledger, _ignored = L.reserve(ledger, "forever", {"pods": "1"}, HARD, T0)
    assert L.expired(ledger, T0 + 3599) == []
    assert L.expired(ledger, T0 + 3600) == ["node-1"]
    assert "node-1" in ledger.reservations


# ---------------------------------------------------------------------------
# external changes

def test_revert_to_base_is_reapplied():
    ledger, _ignored = reserved()
    observed, changes = L.observe(ledger, {"limits.cpu": "30", "limits.memory": ledger.written["limits.memory"]},
                                  T0 + 1)
    assert [c["kind"] for c in changes] == [L.REVERTED]
    assert changes[0]["resource"] == "limits.cpu" and "re-applying" in changes[0]["message"]
    assert observed.base == ledger.base
    assert L.needs_write(observed, {"limits.cpu": "30"})
    assert L.desired_strings(observed)["limits.cpu"] == "34015m"
    assert observed.history[-1]["kind"] == L.REVERTED


def test_a_fresh_ledgers_first_write_records_the_base_as_what_the_quota_held():
    ledger, _ignored = L.reserve(L.new_ledger("tenant-a", "compute"), "node-1", FIELD_REPORT, HARD, T0,
                                 owner="awx-job-42", reason="drain node-1", ttl_seconds=3600)
    intent = L.intend(ledger)
    assert intent.written == {"limits.cpu": "34015m", "limits.memory": "14182919936"}
    # not empty: the quota still holds its base until the write lands (a sampler or a re-run compares with it)
    assert intent.previous == {"limits.cpu": "30", "limits.memory": "5000Mi"}
    assert L.load(L.dump(intent), "tenant-a", "compute").previous == intent.previous


def test_a_fresh_ledgers_write_interrupted_before_the_quota_is_rolled_back_silently():
    ledger, _ignored = L.reserve(L.new_ledger("tenant-a", "compute"), "node-1", FIELD_REPORT, HARD, T0,
                                 owner="awx-job-42", reason="drain node-1", ttl_seconds=3600)
    intent = L.intend(ledger)
    observed, changes = L.observe(intent, {"limits.cpu": "30", "limits.memory": "5000Mi"}, T0 + 1)
    assert changes == [] and observed.history == intent.history   # nobody reverted anything
    assert observed.base == {"limits.cpu": "30", "limits.memory": "5000Mi"}
    assert observed.previous is None
    assert L.needs_write(observed, {"limits.cpu": "30", "limits.memory": "5000Mi"})
    # the write that landed is taken as such
    landed, changes = L.observe(intent, {"limits.cpu": "34015m", "limits.memory": "14182919936"}, T0 + 1)
    assert changes == [] and landed.written == intent.written


def test_admin_change_becomes_the_new_base_with_deltas_on_top():
    ledger, _ignored = reserved()
    observed, changes = L.observe(ledger, {"limits.cpu": "40", "limits.memory": "14182919936"}, T0 + 1)
    assert [c["kind"] for c in changes] == [L.ADMIN_CHANGE]
    assert observed.base["limits.cpu"] == "40"
    assert L.desired_strings(observed)["limits.cpu"] == "44015m"
    released, _ignored = L.release(observed, "node-1", T0 + 2)
    assert L.desired_strings(released) == {"limits.cpu": "40", "limits.memory": "5000Mi"}


def test_same_amount_in_another_spelling_is_no_change():
    ledger, _ignored = reserved({"limits.memory": "1Gi"})
    assert ledger.written == {"limits.memory": "6024Mi"}
    _ignored, changes = L.observe(ledger, {"limits.memory": "6316621824"}, T0)
    assert changes == []


def test_removed_limit_is_no_longer_managed():
    ledger, _ignored = reserved()
    observed, changes = L.observe(ledger, {"limits.memory": ledger.written["limits.memory"]}, T0)
    assert [c["kind"] for c in changes] == [L.REMOVED]
    assert L.managed_names(observed) == ["limits.memory"]
    assert L.render_hard(observed, {"limits.memory": "x", "pods": "10"}) == {
        "limits.memory": "14182919936", "pods": "10"}


def test_history_is_capped():
    ledger, _ignored = reserved()
    for i in range(L.HISTORY_LIMIT + 5):
        ledger, _ignored = L.observe(ledger, {"limits.cpu": "30", "limits.memory": ledger.written["limits.memory"]}, T0 + i)
    assert len(ledger.history) == L.HISTORY_LIMIT


# ---------------------------------------------------------------------------
# storage

def test_dump_load_round_trip_and_format():
    ledger, _ignored = reserved(refs={"batch": "3"})
    text = L.dump(ledger)
    data = json.loads(text)
    assert data["v"] == 2 and data["quota"] == "compute" and data["namespace"] == "tenant-a"
    assert data["base"] == {"limits.cpu": "30", "limits.memory": "5000Mi"}
    assert data["reservations"]["node-1"]["delta"] == FIELD_REPORT
    assert data["reservations"]["node-1"]["refs"] == {"batch": "3"}
    assert L.load(text, "tenant-a", "compute") == ledger
    assert L.dump(L.load(text)) == text
    assert L.load(None) is None and L.load("") is None


@pytest.mark.parametrize("text", ["{", "[]", '{"v": 99}', '{"reservations": {"a": {}}}'])
def test_load_refuses_garbage(text):
    with pytest.raises(InputError):
        L.load(text, "t", "q")


def test_the_adopted_and_displaced_maps_are_written_whole_and_checked():
    ledger, _ignored = reserved(refs={"displaced": {"u1": "tenant-a/m1", "u2": "tenant-a/m2"}})
    # a map is no list: the newer one replaces it (a migration taken back is no longer displaced)
    refs = {"displaced": {"u2": "tenant-a/m2"}, "adopted": {"u1": "tenant-a/m1"}}
    more, outcome = L.reserve(ledger, "node-1", FIELD_REPORT, HARD, T0, refs=refs)
    assert outcome["outcome"] == L.REFS_UPDATED
    assert more.reservations["node-1"].refs["displaced"] == {"u2": "tenant-a/m2"}
    assert L.load(L.dump(more), "tenant-a", "compute") == more
    data = json.loads(L.dump(more))
    data["reservations"]["node-1"]["refs"]["displaced"] = ["u2"]
    with pytest.raises(InputError, match="refs.displaced of reservation 'node-1' is not a mapping of migration UIDs"):
        L.load(json.dumps(data), "tenant-a", "compute")


def test_remember_keeps_the_first_value():
    ledger = L.remember(L.new_ledger("t", "q"), "k", {"present": False})
    assert L.remember(ledger, "k", {"present": True}).state["k"] == {"present": False}


def test_functions_do_not_mutate_their_input():
    ledger, _ignored = reserved()
    before = L.dump(ledger)
    L.reserve(ledger, "b", {"pods": "1"}, HARD, T0)
    L.reserve(ledger, "node-1", {"limits.cpu": "1"}, HARD, T0, top_up=True)
    L.release(ledger, "node-1", T0)
    L.observe(ledger, {"limits.cpu": "1"}, T0)
    L.mark_written(ledger, {})
    assert L.dump(ledger) == before


# ---------------------------------------------------------------------------
# properties

NAMES = ["limits.cpu", "limits.memory", "requests.memory", "pods"]
BASES = {"limits.cpu": ["30", "3000m", "2500m", "1"], "limits.memory": ["5000Mi", "60Gi", "5242880000", "7G"],
         "requests.memory": ["1536Mi", "2G", "100"], "pods": ["10", "1", "0"]}
AMOUNTS = {"limits.cpu": ["1", "4015m", "250m", "7"], "limits.memory": ["8940039936", "1Gi", "100Mi", "3"],
           "requests.memory": ["512Mi", "1", "1G"], "pods": ["1", "2"]}

hards = st.fixed_dictionaries({}, optional=dict((n, st.sampled_from(BASES[n])) for n in NAMES)).filter(bool)
deltas = st.fixed_dictionaries({}, optional=dict((n, st.sampled_from(AMOUNTS[n])) for n in NAMES))
ids = st.sampled_from(["a", "b", "c", "node-1"])
ops = st.lists(st.one_of(
    st.tuples(st.just("reserve"), ids, deltas),
    st.tuples(st.just("topup"), ids, deltas),
    st.tuples(st.just("release"), ids, st.none()),
    st.tuples(st.just("revert"), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("noop-write"), st.none(), st.none()),
), max_size=25)


def _apply(ops_list, hard):
    """Drive a ledger like the cluster would: the quota's durable values change only by our writes and by
    reverts to base; ends with a reconcile (observe + write). Returns (ledger, durable values)."""
    ledger = L.new_ledger("t", "q")
    current = dict(hard)
    for step, (kind, arg, delta) in enumerate(ops_list):
        now = T0 + step
        ledger, _ignored = L.observe(ledger, current, now)
        if kind in ("reserve", "topup"):
            try:
                ledger, _ignored = L.reserve(ledger, arg, delta, current, now, ttl_seconds=60, top_up=(kind == "topup"))
            except InputError:
                pass  # same id, other delta, no flag: refused, nothing changed
        elif kind == "release":
            ledger, _ignored = L.release(ledger, arg, now)
        elif kind == "revert" and arg in ledger.base and ledger.base[arg] is not None:
            current[arg] = ledger.base[arg]  # Rancher puts the base back behind our back
            continue
        current = L.render_hard(ledger, current)
        ledger = L.mark_written(ledger)
    ledger, _ignored = L.observe(ledger, current, T0 + 999)
    current = L.render_hard(ledger, current)
    return L.mark_written(ledger), current


@settings(max_examples=300, deadline=None)
@given(hards, ops)
def test_releasing_everything_restores_the_exact_base_strings(hard, ops_list):
    ledger, current = _apply(ops_list, hard)
    for rid in sorted(ledger.reservations):
        ledger, _ignored = L.observe(ledger, current, T0 + 1000)
        ledger, _ignored = L.release(ledger, rid, T0 + 1000)
        current = L.render_hard(ledger, current)
        ledger = L.mark_written(ledger)
    assert L.is_idle(ledger)
    assert current == hard  # byte for byte, whatever spelling the base had


@settings(max_examples=300, deadline=None)
@given(hards, ops)
def test_desired_is_always_base_plus_active_deltas(hard, ops_list):
    ledger, current = _apply(ops_list, hard)
    values = L.desired(ledger)
    for name in L.managed_names(ledger):
        total = sum((entry.delta_values().get(name, 0) for entry in ledger.reservations.values()), 0)
        assert values[name] == value(ledger.base[name], name) + total
        assert value(current[name], name) == values[name]
    for name in hard:
        if name not in L.managed_names(ledger):
            assert current[name] == hard[name]


@settings(max_examples=200, deadline=None)
@given(hards, deltas, deltas, st.sampled_from(NAMES), st.sampled_from(["40", "99Gi", "12"]))
def test_admin_change_survives_and_becomes_the_restore_value(hard, d1, d2, name, admin_value):
    ledger, _ignored = L.reserve(L.new_ledger("t", "q"), "a", d1, hard, T0)
    ledger, _ignored = L.reserve(ledger, "b", d2, hard, T0)
    current = L.render_hard(ledger, hard)
    ledger = L.mark_written(ledger)
    if name not in L.managed_names(ledger) or value(admin_value, name) in (
            value(ledger.written[name], name), value(ledger.base[name], name)):
        return
    current[name] = admin_value
    ledger, changes = L.observe(ledger, current, T0 + 1)
    assert [c["kind"] for c in changes] == [L.ADMIN_CHANGE]
    for rid in ("a", "b"):
        ledger, _ignored = L.release(ledger, rid, T0 + 2)
    final = L.render_hard(ledger, current)
    assert final[name] == admin_value
    for other in hard:
        if other != name:
            assert final[other] == hard[other]


@settings(max_examples=200, deadline=None)
@given(hards, deltas, st.lists(ids, max_size=6))
def test_reserve_is_idempotent(hard, delta, rids):
    ledger = L.new_ledger("t", "q")
    for rid in rids:
        once, _ignored = L.reserve(ledger, rid, delta, hard, T0, ttl_seconds=60)
        twice, outcome = L.reserve(once, rid, delta, hard, T0 + 5, ttl_seconds=60)
        assert twice == once
        assert outcome["outcome"] in (L.UNCHANGED, L.UNTRACKED)
        ledger = once


@settings(max_examples=200, deadline=None)
@given(hards, ops)
def test_dump_load_round_trip_property(hard, ops_list):
    ledger, _ignored = _apply(ops_list, hard)
    assert L.load(L.dump(ledger)) == ledger


# ---------------------------------------------------------------------------
# hold_at_usage: what a Harvester quota's usage still holds after a release (issue 24)

Mi_ = 1024 ** 2


def _held_ledger():
    ledger = L.new_ledger("t", "q")
    ledger, _outcome = L.reserve(ledger, "node-1-b0", {"limits.memory": "2Gi", "limits.cpu": "1"},
                                 {"limits.memory": "8Gi", "limits.cpu": "4"}, T0, ttl_seconds=3600,
                                 refs={"vms": [{"namespace": "t", "name": "vm-1", "uid": "u1"}]})
    ledger, _outcome = L.reserve(ledger, "other", {"limits.memory": "1Gi"}, {"limits.memory": "8Gi"}, T0)
    return ledger


def test_hold_at_usage_releases_the_id_and_keeps_only_what_usage_holds_as_an_expired_remainder():
    ledger, outcome = L.hold_at_usage(_held_ledger(), "node-1-b0", {"limits.memory": 512 * Mi_, "limits.cpu": 0},
                                      T0 + 60)
    assert outcome["outcome"] == L.HELD_AT_USAGE and outcome["held_as"] == "node-1-b0.held"
    assert sorted(ledger.reservations) == ["node-1-b0.held", "other"]
    held = ledger.reservations["node-1-b0.held"]
    assert held.delta == {"limits.memory": "512Mi"} and held.remainder
    assert held.expires == "2025-01-01T00:01:00Z" and held.refs["vms"][0]["uid"] == "u1"
    assert ledger.released[-1]["id"] == "node-1-b0"
    # the ledger still describes the quota: base + the other reservation + what usage holds
    assert L.desired_strings(ledger) == {"limits.memory": "9728Mi", "limits.cpu": "4"}
    assert L.expired(ledger, T0 + 60) == ["node-1-b0.held"]
    # it survives a save: the flag is stored, and a ledger without it reads as before
    again = L.load(L.dump(ledger), "t", "q")
    assert again.reservations["node-1-b0.held"].remainder and not again.reservations["other"].remainder
    assert json.loads(L.dump(ledger))["reservations"]["node-1-b0.held"]["remainder"] is True
    assert "remainder" not in json.loads(L.dump(ledger))["reservations"]["other"]
    # the same id asked for again is a new reservation, never the remainder
    fresh, outcome = L.reserve(ledger, "node-1-b0", {"limits.memory": "1Gi"}, {"limits.memory": "9728Mi"}, T0 + 70)
    assert outcome["outcome"] == L.CREATED and fresh.reservations["node-1-b0.held"].delta == {"limits.memory": "512Mi"}


def test_hold_at_usage_never_keeps_more_than_the_reservation_held_and_nothing_is_a_plain_release():
    ledger, outcome = L.hold_at_usage(_held_ledger(), "node-1-b0", {"limits.memory": 8 * 1024 * Mi_}, T0)
    assert ledger.reservations["node-1-b0.held"].delta == {"limits.memory": "2Gi"}
    released, outcome = L.hold_at_usage(_held_ledger(), "node-1-b0", {"limits.memory": 0}, T0)
    assert outcome["outcome"] == L.RELEASED and sorted(released.reservations) == ["other"]
    # the reaper finishing a remainder keeps its id (smaller), then releases it
    ledger, _outcome = L.hold_at_usage(_held_ledger(), "node-1-b0", {"limits.memory": 512 * Mi_}, T0)
    smaller, outcome = L.hold_at_usage(ledger, "node-1-b0.held", {"limits.memory": 256 * Mi_}, T0 + 900)
    assert outcome["held_as"] == "node-1-b0.held" and smaller.reservations["node-1-b0.held"].delta == {
        "limits.memory": "256Mi"}
    done, outcome = L.hold_at_usage(smaller, "node-1-b0.held", {}, T0 + 1800)
    assert outcome["outcome"] == L.RELEASED and sorted(done.reservations) == ["other"]


def test_a_remainder_flag_that_is_no_boolean_is_corrupt():
    data = json.loads(L.dump(_held_ledger()))
    data["reservations"]["other"]["remainder"] = "yes"
    with pytest.raises(InputError, match="remainder flag"):
        L.load(json.dumps(data), "t", "q")


def test_record_refs_adds_a_batchs_migrations_to_its_reservation_alone():
    ledger, _outcome = L.reserve(L.new_ledger("t", "q", uid="u"), "b0", {"limits.cpu": "1"}, {"limits.cpu": "2"},
                                 T0, refs={"migrations": [{"namespace": "t", "name": "theirs", "uid": "u1"}]})
    ledger, _outcome = L.reserve(ledger, "b1", {"limits.cpu": "1"}, {"limits.cpu": "2"}, T0)
    created = {"migrations": [{"namespace": "t", "name": "mine", "uid": "u2"}]}
    new = L.record_refs(ledger, "b0", created)
    assert new.reservations["b0"].refs["migrations"] == [{"namespace": "t", "name": "theirs", "uid": "u1"},
                                                         {"namespace": "t", "name": "mine", "uid": "u2"}]
    assert new.reservations["b1"].refs == ledger.reservations["b1"].refs
    assert (new.base, new.written, new.reservations["b0"].delta) == (ledger.base, ledger.written,
                                                                     ledger.reservations["b0"].delta)
    assert "mine" not in str(ledger.reservations["b0"].refs)            # the ledger given is not changed
    assert L.record_refs(new, "b0", created) is None                     # recorded already
    assert L.record_refs(ledger, "gone", created) is None                # not held here
