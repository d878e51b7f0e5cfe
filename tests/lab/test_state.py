"""kvqlab.state without a lab: a fake API answering the list requests it makes. The lab tests, chaos campaigns
and the benchmark decide "no ledger left" / "no lock in force" with it, so its reading is checked here on
hand-written objects (python3 -m pytest -q tests/lab/test_state.py)."""
from __future__ import annotations

import calendar
import json
import time

import pytest

from kvqlab import state

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

NOW = calendar.timegm((2026, 11, 24, 12, 0, 0))


def _stamp(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + ".250000Z"


class FakeRest:
    """get(path) of the paths kvqlab.state lists; request() makes it look like a kvqlab Rest."""

    def __init__(self, objects):
        self.objects = objects

    def request(self, *args, **kwargs):
        raise AssertionError("kvqlab.state only reads with get()")

    def get(self, path, **query):
        return {"items": self.objects.get(path, [])}


def quota(ns, name, uid, annotations=None):
    return {"metadata": {"namespace": ns, "name": name, "uid": uid, "annotations": annotations or {}}}


def ledger_cm(uid, data, shown=None):
    return {"metadata": {"name": "kvq-ledger-" + uid, "namespace": "kvquota-system", "resourceVersion": "7",
                         "annotations": {"kvquota.maintenance/quota": shown} if shown else {}},
            "data": {"ledger": data if isinstance(data, str) else json.dumps(data)}}


def lease(ns, name, holder, renewed, duration=90):
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": "9"},
            "spec": {"holderIdentity": holder, "renewTime": _stamp(renewed) if renewed else None,
                     "leaseDurationSeconds": duration}}


def cluster():
    return FakeRest({
        "/api/v1/resourcequotas": [quota("a-tenant", "compute", "u-1"),
                                   quota("b-tenant", "compute", "u-2", {"kvquota.maintenance/ledger": "{}"})],
        "/api/v1/namespaces": [{"metadata": {"name": "c-tenant", "annotations": {"kvquota.maintenance/ledger": "{}"}}}],
        "/api/v1/namespaces/kvquota-system/configmaps": [
            ledger_cm("u-1", {"v": 2, "namespace": "a-tenant", "quota": "compute", "reservations": {"n1-b0": {},
                                                                                                    "n1-b1": {}}}),
            # its quota was deleted: the ledger names it
            ledger_cm("u-9", {"v": 2, "namespace": "gone", "quota": "q", "reservations": {"old": {}}}),
            # corrupt, its quota gone too: the display annotation names it
            ledger_cm("u-8", "{not json", shown="x-tenant/q8"),
            {"metadata": {"name": "kube-root-ca.crt", "resourceVersion": "1"}, "data": {}},
            {"metadata": {"name": "kvq-window-follow-node-1", "resourceVersion": "3"},
             "data": {"cordoned": '{"node-1": {"seen": "2026-11-24T10:00:00Z", "uid": "n"}}'}},
            {"metadata": {"name": "kvq-running-eda", "resourceVersion": "4"},
             "data": {"since": "2026-11-24T10:00:00Z", "renewed": "2026-11-24T10:00:30Z"}},
        ],
        "/apis/coordination.k8s.io/v1/namespaces/kvquota-system/leases": [
            lease("kvquota-system", "kvq-lock-a-tenant", "job-1@h", NOW - 10),          # in force until NOW + 80
            lease("kvquota-system", "kvq-lock-b-tenant", "job-2@h", NOW - 91),          # expired a second ago
            lease("kvquota-system", "kvq-lock-c-tenant", None, NOW),                    # no holder: free
            lease("kvquota-system", "something-else", "x", NOW),
        ],
        "/apis/coordination.k8s.io/v1/leases": [
            lease("kvquota-system", "kvq-lock-a-tenant", "job-1@h", NOW - 10),
            lease("kube-node-lease", "node-1", "node-1", NOW),
            lease("a-tenant", "kvquota-maintenance", "squatter", NOW),
            lease("a-tenant", "app-leader", "app", NOW),
        ],
    })


def test_ledgers_are_keyed_by_the_quota_their_uid_names():
    found = state.ledgers(cluster())
    assert sorted(found) == [("a-tenant", "compute"), ("gone", "q"), ("x-tenant", "q8")]
    assert sorted(found[("a-tenant", "compute")]["reservations"]) == ["n1-b0", "n1-b1"]
    assert found[("x-tenant", "q8")] == {"unparsable": "{not json"}
    assert state.reservation_ids(found.values()) == ["n1-b0", "n1-b1", "old"]


def test_locks_in_force_and_expired():
    assert sorted(state.locks(cluster(), now=NOW)) == ["a-tenant"]
    held = state.locks(cluster(), now=NOW)["a-tenant"]
    assert held["holder"] == "job-1@h" and held["expires_at"] == NOW + 80.25 and not held["expired"]
    every = state.locks(cluster(), now=NOW, include_expired=True)
    assert sorted(every) == ["a-tenant", "b-tenant", "c-tenant"]
    assert every["b-tenant"]["expired"] and every["c-tenant"]["expired"]
    assert state.locks(cluster(), now=NOW + 81) == {}


def test_tenant_side_leftovers():
    assert state.legacy_annotations(cluster()) == [("quota", "b-tenant", "compute"),
                                                   ("namespace", "c-tenant", "c-tenant")]
    assert state.legacy_annotations(cluster(), ["a-tenant"]) == []
    assert state.tenant_leases(cluster()) == ["a-tenant/kvquota-maintenance (holder squatter)"]


def test_leftovers_of_some_namespaces():
    left = state.leftovers(cluster(), ["a-tenant"], now=NOW)
    assert len(left) == 3, left
    assert left[0] == "ledger left for a-tenant/compute: reservations ['n1-b0', 'n1-b1']"
    assert left[1].startswith("lock left on a-tenant: lease kvquota-system/kvq-lock-a-tenant held by job-1@h")
    assert left[2] == "kvquota lease in a tenant namespace: a-tenant/kvquota-maintenance (holder squatter)"
    assert state.leftovers(FakeRest({})) == []
    # a window's record belongs to no namespace: named when every namespace is checked
    assert [text for text in state.leftovers(cluster(), now=NOW) if text.startswith("window record left")] == [
        'window record left: kvquota-system/kvq-window-follow-node-1 (nodes seen cordoned: '
        '{"node-1": {"seen": "2026-11-24T10:00:00Z", "uid": "n"}})',
        'window record left: kvquota-system/kvq-running-eda (running since 2026-11-24T10:00:00Z)']


def test_snapshot_names_only_ledgers_window_records_and_locks():
    assert state.snapshot(cluster()) == {
        "configmaps": {"kvq-ledger-u-1": "7", "kvq-ledger-u-9": "7", "kvq-ledger-u-8": "7",
                       "kvq-window-follow-node-1": "3", "kvq-running-eda": "4"},
        "leases": {"kvq-lock-a-tenant": "9", "kvq-lock-b-tenant": "9", "kvq-lock-c-tenant": "9"}}
