# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The always-on source (issue 28): typed triggers from watch events (plan/triggers.py), the watch loop that keeps
going (client/watch.py) and the source that ties them (ops/event_source.py)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ForbiddenError,
    KvquotaError,
    UnreachableError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client import watch as W
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import event_source as ES
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import triggers as T
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger as L
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store as S

NOW = 1800000000


def vmim(name="m1", ns="t", refused=True, phase="Scheduling", uid=None):
    status = {"phase": phase}
    if refused is not None:
        status["conditions"] = [{"type": "migrationRejectedByResourceQuota", "status": "True" if refused else "False",
                                 "message": "exceeded quota"}]
    return {"metadata": {"name": name, "namespace": ns, "uid": uid or "uid-" + name},
            "spec": {"vmiName": "vm-a"}, "status": status}


def types(events):
    return [(e["kvquota"]["type"], e["kvquota"]["scope_key"]) for e in events]


# ---------------------------------------------------------------------------
# triggers

def test_a_refused_migration_is_announced_once_until_its_refusal_clears():
    state = T.TriggerState()
    assert types(state.observe(T.MIGRATION, "ADDED", vmim(refused=None), NOW)) == []
    first = state.observe(T.MIGRATION, "MODIFIED", vmim(), NOW)
    assert types(first) == [("migration_refused", "namespace/t")]
    assert first[0]["kvquota"]["subject"] == "t/m1" and "refused by ResourceQuota" in first[0]["kvquota"]["reason"]
    assert "amount" not in json.dumps(first) and first[0]["kvquota"]["scope"] == {"nodes": [], "namespaces": ["t"]}
    assert state.observe(T.MIGRATION, "MODIFIED", vmim(), NOW) == []          # the same fact again
    assert state.observe(T.MIGRATION, "MODIFIED", vmim(refused=False), NOW) == []
    assert types(state.observe(T.MIGRATION, "MODIFIED", vmim(), NOW)) == [("migration_refused", "namespace/t")]
    assert state.observe(T.MIGRATION, "MODIFIED", vmim(phase="Failed"), NOW) == []    # final: nothing to do
    state.observe(T.MIGRATION, "DELETED", vmim(), NOW)
    assert state.announced[T.MIGRATION] == {}


def test_evacuation_outdated_launchers_and_cordons_carry_their_scope():
    state = T.TriggerState()
    vmi = {"metadata": {"name": "vm-a", "namespace": "t", "uid": "u1", "labels": {T.OUTDATED_LABEL: "x"}},
           "status": {"nodeName": "node-1", "evacuationNodeName": "node-1"}}
    assert types(state.observe(T.VMI, "MODIFIED", vmi, NOW)) == [("evacuation_started", "node/node-1"),
                                                                 ("updater_round", "namespace/t")]
    assert state.observe(T.VMI, "MODIFIED", vmi, NOW) == []
    node = {"metadata": {"name": "node-1", "uid": "n1"}, "spec": {"unschedulable": True}}
    assert types(state.observe(T.NODE, "MODIFIED", node, NOW)) == [("node_cordoned", "node/node-1")]
    assert state.observe(T.NODE, "MODIFIED", {"metadata": node["metadata"], "spec": {}}, NOW) == []
    assert len(state.observe(T.NODE, "MODIFIED", node, NOW)) == 1           # cordoned again: a new cordon
    with pytest.raises(KvquotaError, match="unknown kind"):
        state.observe("pod", "ADDED", node, NOW)


def test_a_tenants_evacuation_mark_that_is_no_node_name_or_an_object_of_no_expected_shape_says_nothing():
    """A tenant writes its VMI's status: a mark that is not a DNS-1123 name (Jinja, a megabyte of text) is not
    announced; an object of a shape nothing expects (a condition that is not an object) says nothing, and the
    watch goes on for the others (it used to end the whole source)."""
    state = T.TriggerState()
    for forged in ("no-such-node-{{ 7*7 }}", "x" * 254, "Node-1", "{{ lookup('pipe', 'id') }}", "a" * 1024 * 1024):
        vmi = {"metadata": {"name": "vm-a", "namespace": "t", "uid": "u-%d" % len(forged)},
               "status": {"nodeName": "node-1", "evacuationNodeName": forged}}
        assert state.observe(T.VMI, "MODIFIED", vmi, NOW) == [], forged[:40]
    odd = {"metadata": {"name": "m1", "namespace": "t", "uid": "u-odd"}, "status": {"conditions": [None]}}
    assert state.observe(T.MIGRATION, "MODIFIED", odd, NOW) == []
    assert types(state.observe(T.MIGRATION, "MODIFIED", vmim("m2", uid="u-m2"), NOW)) == [
        ("migration_refused", "namespace/t")]


def _ledger_configmap(ttl=60):
    quota = {"metadata": {"name": "q", "namespace": "t", "uid": "3f2b8c1e-0000-4000-8000-000000000001"},
             "spec": {"hard": {"limits.cpu": "2"}}}
    ledger = L.new_ledger("t", "q", uid=quota["metadata"]["uid"])
    ledger, _outcome = L.reserve(ledger, "node-1-b0", {"limits.cpu": "1"}, {"limits.cpu": "2"}, NOW, ttl_seconds=ttl)
    return S.ledger_configmap("kvquota-system", quota, ledger)


def test_a_reservation_past_its_ttl_is_announced_once_by_the_tick():
    state = T.TriggerState()
    configmap = _ledger_configmap(ttl=60)
    assert state.observe(T.LEDGER, "ADDED", configmap, NOW + 59) == []
    expired = state.tick([configmap], NOW + 60)
    assert types(expired) == [("reservation_expired", "namespace/t")]
    assert "reservation node-1-b0 of quota t/q expired" in expired[0]["kvquota"]["reason"]
    assert state.tick([configmap], NOW + 120) == []
    corrupt = dict(configmap, data={"ledger": "{not json"})
    assert state.observe(T.LEDGER, "MODIFIED", corrupt, NOW + 120) == []     # named by the reaper, not here
    other = {"metadata": {"name": "something-else", "uid": "x"}, "data": {}}
    assert state.observe(T.LEDGER, "ADDED", other, NOW) == []


def test_a_relist_forgets_what_is_gone_and_announces_what_came_meanwhile():
    state = T.TriggerState()
    state.observe(T.MIGRATION, "ADDED", vmim("m1"), NOW)
    again = state.resync(T.MIGRATION, [vmim("m2")], NOW)
    assert types(again) == [("migration_refused", "namespace/t")] and again[0]["kvquota"]["subject"] == "t/m2"
    assert [f[0] for f in state.announced[T.MIGRATION]] == ["uid-m2"]


# ---------------------------------------------------------------------------
# the watch loop

class _Script(object):
    """A lister and a streamer that play a script: each streamer call takes the next step, a list of events or
    an exception."""

    def __init__(self, steps, lists=None):
        self.steps, self.list_results = list(steps), list(lists or [([], "1")])
        self.stream_versions, self.sleeps, self.now = [], [], [0.0]

    def lister(self):
        result = self.list_results.pop(0) if len(self.list_results) > 1 else self.list_results[0]
        return result

    def streamer(self, version):
        self.stream_versions.append(version)
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return iter(step)

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now[0] += seconds


def _loop(script, **kw):
    seen, resyncs, outages = [], [], []
    loop = W.WatchLoop(script.lister, script.streamer, lambda t, o: seen.append((t, o["metadata"]["name"])),
                       lambda items: resyncs.append([i["metadata"]["name"] for i in items]),
                       on_outage=lambda secs, msg: outages.append((round(secs), msg)),
                       stopped=lambda: not script.steps, clock=lambda: script.now[0], sleep=script.sleep, **kw)
    return loop, seen, resyncs, outages


def _obj(name, version):
    return {"metadata": {"name": name, "resourceVersion": version}}


def test_the_watch_resumes_from_the_last_version_a_bookmark_included_and_relists_on_410():
    script = _Script([
        [{"type": "ADDED", "object": _obj("a", "5")}, {"type": "BOOKMARK", "object": _obj("", "9")}],
        [{"type": "MODIFIED", "object": _obj("a", "11")}],
        W.Expired("too old"),
        [{"type": "DELETED", "object": _obj("a", "30")}],
    ], lists=[([_obj("x", "1")], "1"), ([_obj("a", "20")], "20")])
    loop, seen, resyncs, _outages = _loop(script)
    loop.run()
    assert script.stream_versions == ["1", "9", "11", "20"]
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]       # no bookmark passed on
    assert resyncs == [["x"], ["a"]] and loop.lists == 2


def test_an_outage_past_the_budget_is_said_once_and_the_watch_relists_when_it_answers():
    down = UnreachableError("cannot reach the API server", "wait", details={"outage_seconds": 1})
    script = _Script([down] * 12 + [[{"type": "ADDED", "object": _obj("a", "40")}]])
    loop, seen, resyncs, outages = _loop(script, outage_budget=10)
    loop.run()
    assert len(outages) == 1 and outages[0][0] >= 10 and "cannot reach" in outages[0][1]
    assert max(script.sleeps) <= W.BACKOFF_CAP and seen == [("ADDED", "a")]
    assert len(resyncs) == 2                                                  # listed again after the outage


def test_a_refusal_is_not_an_outage_it_ends_the_watch():
    script = _Script([ForbiddenError("virtualmachineinstances is forbidden", "bind kvquota-eda")])
    loop, _seen, _resyncs, _outages = _loop(script)
    with pytest.raises(ForbiddenError):
        loop.run()


def test_the_refusal_of_an_api_server_that_is_starting_is_one_more_transient_failure():
    starting = UnreachableError("the API server answered 403 while it starts", "wait",
                                details={"status": 403, "starting": True})
    script = _Script([starting, [{"type": "ADDED", "object": _obj("a", "40")}]])
    loop, seen, _resyncs, outages = _loop(script)
    loop.run()
    assert seen == [("ADDED", "a")] and outages == [] and len(script.sleeps) == 1


class _Lines(object):
    def __init__(self, lines):
        self.lines = lines

    def stream_lines(self, path, query, read_timeout):
        assert query["watch"] == "1" and query["allowWatchBookmarks"] == "true"
        for line in self.lines:
            yield json.dumps(line).encode("utf-8")


def test_watch_events_turns_410_into_a_relist_and_other_errors_into_one():
    ok = list(W.watch_events(_Lines([{"type": "ADDED", "object": _obj("a", "1")}]), "/p", "1"))
    assert ok == [{"type": "ADDED", "object": _obj("a", "1")}]
    with pytest.raises(W.Expired):
        list(W.watch_events(_Lines([{"type": "ERROR", "object": {"code": 410, "message": "too old"}}]), "/p", "1"))
    with pytest.raises(KvquotaError, match="watch /p: boom"):
        list(W.watch_events(_Lines([{"type": "ERROR", "object": {"code": 500, "message": "boom"}}]), "/p", "1"))


# ---------------------------------------------------------------------------
# the source

def test_the_source_is_ready_once_every_watch_listed_and_ticks_ledgers_it_saw():
    emitted = []
    now = [NOW]
    source = ES.EventSource(None, emitted.append, clock=lambda: now[0], monotonic=lambda: now[0])
    for kind in (T.MIGRATION, T.VMI, T.NODE):
        source.on_resync(kind, [])
    assert emitted == []
    source.on_resync(T.LEDGER, [_ledger_configmap(ttl=60)])
    assert types(emitted) == [("source_ready", "cluster")]
    source.on_event(T.MIGRATION, "ADDED", vmim())
    now[0] = NOW + 61
    source.tick()
    # and no window started in the 61 s since the refusal asked for one: asked for again
    assert types(emitted)[1:] == [("migration_refused", "namespace/t"), ("reservation_expired", "namespace/t"),
                                  ("window_wanted", "cluster")]
    source.on_event(T.LEDGER, "DELETED", _ledger_configmap())
    assert source.ledgers == {}
    source.on_outage(T.VMI, 61.2, "connection refused")
    assert emitted[-1]["kvquota"]["type"] == "source_outage" and "61 s" in emitted[-1]["kvquota"]["reason"]
    assert sorted(ES.watched_paths("kvquota-system")) == sorted(T.KINDS)


# ---------------------------------------------------------------------------
# no window queued behind a running one (WindowGate)

def _running(uid="w1", since="2027-01-15T08:00:00Z", version="1", prefix="eda"):
    return {"metadata": {"name": "kvq-running-" + prefix, "namespace": "kvquota-system", "uid": uid,
                         "resourceVersion": version}, "data": {"since": since, "renewed": since}}


def _ready_source(**kw):
    emitted, now = [], [NOW]
    source = ES.EventSource(None, emitted.append, clock=lambda: now[0], monotonic=lambda: now[0], **kw)
    for kind in source.kinds:
        source.on_resync(kind, [])
    assert types(emitted) == [("source_ready", "cluster")]
    del emitted[:]
    return source, emitted, now


def test_no_window_event_while_a_window_runs_and_one_after_it_when_any_came():
    source, emitted, now = _ready_source()
    source.on_event(T.LEDGER, "ADDED", _running())
    source.on_event(T.MIGRATION, "ADDED", vmim("m1"))
    source.on_event(T.VMI, "ADDED", {"metadata": {"name": "vm-a", "namespace": "t", "uid": "v1",
                                                  "labels": {T.OUTDATED_LABEL: "true"}}, "status": {}})
    now[0] += 30
    source.on_event(T.LEDGER, "MODIFIED", _running(version="2"))     # renewed
    now[0] += 60
    source.tick()
    assert emitted == []                                                # the running window serves them
    source.on_event(T.LEDGER, "DELETED", _running(version="2"))
    source.tick()
    assert [e["kvquota"]["type"] for e in emitted] == ["window_wanted"]
    assert emitted[-1]["kvquota"]["action"] == "window" and "2 event(s)" in emitted[-1]["kvquota"]["reason"]
    now[0] += 15
    source.tick()
    assert len(emitted) == 1                                            # asked; not again at once
    source.on_event(T.LEDGER, "ADDED", _running(uid="w2"))             # the next window started: it serves all
    source.on_event(T.LEDGER, "DELETED", _running(uid="w2"))
    now[0] += 600
    source.tick()
    assert len(emitted) == 1
    source.on_event(T.MIGRATION, "ADDED", vmim("m3"))                  # no window runs: at once
    assert types(emitted[1:]) == [("migration_refused", "namespace/t")]


def test_a_window_killed_outright_stops_counting_once_its_record_is_stale_and_stays_dead_when_listed_again():
    source, emitted, now = _ready_source()
    source.on_event(T.LEDGER, "ADDED", _running())
    source.on_event(T.MIGRATION, "ADDED", vmim("m1"))
    now[0] += 120
    source.on_resync(T.LEDGER, [_running()])              # a relist of the same record renews nothing
    now[0] += 119
    source.tick()
    assert emitted == []
    now[0] += 1                                           # 240 s without a new resourceVersion
    source.tick()
    assert types(emitted) == [("window_wanted", "cluster")]
    source.on_resync(T.LEDGER, [_running()])              # found by an attack: the dead record listed again is no
    now[0] += 60                                          # new window that served what was wanted
    source.tick()
    assert types(emitted) == [("window_wanted", "cluster")] * 2


def test_a_record_only_listed_holds_nothing_back_until_it_is_rewritten():
    # found by an attack: a killed window's record, listed when the source starts, held every event for 90 s
    source, emitted, now = _ready_source()
    source.on_resync(T.LEDGER, [_running()])
    source.on_event(T.MIGRATION, "ADDED", vmim("m1"))
    assert types(emitted) == [("migration_refused", "namespace/t")]
    source.on_event(T.LEDGER, "MODIFIED", _running(version="2"))     # renewed: a live window, which serves it
    source.on_event(T.MIGRATION, "ADDED", vmim("m2"))
    now[0] += 600
    source.on_event(T.LEDGER, "MODIFIED", _running(version="3"))
    source.tick()
    assert len(emitted) == 1


def test_a_window_that_fails_is_followed_by_another_up_to_three_in_a_row():
    source, emitted, now = _ready_source()
    source.on_event(T.MIGRATION, "ADDED", vmim("m1"))
    for number in range(3):
        source.on_event(T.LEDGER, "ADDED", _running(uid="w%d" % number))
        failed = _running(uid="w%d" % number, version="2")
        failed["data"]["ended"] = "failed"
        source.on_event(T.LEDGER, "MODIFIED", failed)
        source.on_event(T.LEDGER, "DELETED", failed)
        now[0] += 60
        source.tick()
    kinds = [e["kvquota"]["type"] for e in emitted]
    assert kinds == ["migration_refused", "window_wanted", "window_wanted", "window_not_started"], kinds
    assert "3 window(s) in a row failed" in emitted[-1]["kvquota"]["reason"]


def test_a_burst_of_events_is_one_ask():
    # found by an attack: four evacuations in a second counted as four asks, and the first retry gave up
    source, emitted, now = _ready_source()
    for name in ("m1", "m2", "m3", "m4"):
        source.on_event(T.MIGRATION, "ADDED", vmim(name))
    now[0] += 60
    source.tick()
    assert [e["kvquota"]["type"] for e in emitted][4:] == ["window_wanted"]


def test_no_info_event_while_a_window_runs():
    source, emitted, _now = _ready_source()
    source.on_event(T.LEDGER, "ADDED", _running())
    source.on_event(T.NODE, "MODIFIED", {"metadata": {"name": "n1", "uid": "n"}, "spec": {"unschedulable": True}})
    assert emitted == []


def test_a_source_for_the_reaper_alone_watches_only_the_ledgers_and_says_only_expiries():
    source, emitted, now = _ready_source(actions=["reap"])
    assert source.kinds == (T.LEDGER,) and sorted(source.make_loops()) == [T.LEDGER]
    source.on_event(T.MIGRATION, "ADDED", vmim("m1"))
    source.on_event(T.LEDGER, "ADDED", _ledger_configmap(ttl=60))
    now[0] += 61
    source.tick()
    assert types(emitted) == [("reservation_expired", "namespace/t")]
    windows, window_events, window_now = _ready_source(actions=["window", "info"])
    windows.on_event(T.LEDGER, "ADDED", _ledger_configmap(ttl=60))
    window_now[0] += 61
    windows.tick()
    assert windows.kinds == T.KINDS and window_events == []     # expiries are the reaper's source's
    for bad in ([], "reap", ["reap", "drain"]):
        with pytest.raises(KvquotaError, match="actions must be"):
            ES.EventSource(None, emitted.append, actions=bad)
