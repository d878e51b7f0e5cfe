# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_steer, run by ansible-playbook as the lab's LEAST-PRIVILEGE user against the real control plane: the
steering taint kvquota.io/upgrade-pending:PreferNoSchedule is recorded (ConfigMap kvq-steering-<record> of the
operator namespace, with the Node UIDs) and set on the nodes, another taint of a node kept; untainting one node
and then the rest leaves no taint and no record; check mode changes nothing; an interrupted run's record is
cleaned by the next run; an unknown node writes nothing. The nodes' taints are read back as the admin.

Run: python3 -m pytest -q -m lab tests/integration/test_steering_lab.py
(uses $KVQ_LAB_RUN_DIR when set, else starts a lab of its own; skipped when the lab binaries are not built,
unless KVQ_LAB_REQUIRED=1). Every taint it sets is removed at the end, whatever happened.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import secrets

import pytest

import modlab as M
from kubernetes.client import ApiException  # noqa: E402

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

KEY = "kvquota.io/upgrade-pending"
EFFECT = "PreferNoSchedule"
CM_PATH = "/api/v1/namespaces/%s/configmaps" % M.OPERATOR_NS


def node_names(r):
    return sorted(n["metadata"]["name"] for n in r.get("/api/v1/nodes")["items"])


def taints(r, name):
    return (r.get("/api/v1/nodes/" + name).get("spec") or {}).get("taints") or []


def is_ours(taint):
    return taint.get("key") == KEY and taint.get("effect") == EFFECT


def ours(r, name):
    return [t for t in taints(r, name) if is_ours(t)]


def set_taints(r, name, change):
    """As the admin: the node's taints replaced by change(taints), conditional on the node's resourceVersion (the
    node controller writes nodes too), retried on 409."""
    for _attempt in range(10):
        node = r.get("/api/v1/nodes/" + name)
        try:
            return r.patch("/api/v1/nodes/" + name, {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": change((node.get("spec") or {}).get("taints") or [])}})
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError("node %s changed on every attempt" % name)


def record(r, name):
    """{node: uid} of the record ConfigMap, or None."""
    cm = r.get_or_none("%s/%s" % (CM_PATH, name))
    return None if cm is None else json.loads(cm["data"]["nodes"])


@pytest.fixture
def steer(r, user):
    """(record name, run(args, **kw) of kvquota_steer as the least-privilege user); afterwards every steering taint
    and the record are removed as the admin, so that no other test on a shared lab meets them."""
    name = "lab-steer-%s" % secrets.token_hex(3)

    def run(args, **kwargs):
        return M.run_module("kvquota_steer", dict(args, record=name), user, **kwargs)
    yield name, run
    for node in node_names(r):
        if ours(r, node):
            set_taints(r, node, lambda current: [t for t in current if not is_ours(t)])
    r.delete("%s/kvq-steering-%s" % (CM_PATH, name))


def test_taint_two_nodes_untaint_one_then_the_rest(r, steer):
    name, run = steer
    cm = "kvq-steering-" + name
    first, second = node_names(r)[:2]
    other = {"key": "kvqlab.test/keep-" + name, "value": "yes", "effect": EFFECT}
    set_taints(r, first, lambda current: current + [other])
    try:
        # check mode: what would change, nothing written
        before = {first: taints(r, first), second: taints(r, second)}
        res = M.assert_ok(run({"nodes": [first, second]}, check=True, diff=True), "kvquota_steer --check")
        assert res["changed"] is True and res["tainted"] == [first, second] and res["record"] == cm
        assert res["diff"]["after"][first]["spec"]["taints"] == before[first] + [
            {"key": KEY, "value": name, "effect": EFFECT}]
        assert {first: taints(r, first), second: taints(r, second)} == before and record(r, cm) is None

        # taint both: recorded with their UIDs, tainted, the other taint kept
        res = M.assert_ok(run({"nodes": [first, second]}), "kvquota_steer present")
        assert res["changed"] is True and res["tainted"] == [first, second] and res["record"] == cm
        uids = dict((n, r.get("/api/v1/nodes/" + n)["metadata"]["uid"]) for n in (first, second))
        assert record(r, cm) == uids
        for node in (first, second):
            assert ours(r, node) == [{"key": KEY, "value": name, "effect": EFFECT}], taints(r, node)
        assert other in taints(r, first)
        cm_obj = r.get("%s/%s" % (CM_PATH, cm))
        assert cm_obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kvquota.maintenance"

        # a repeat changes nothing
        res = M.assert_ok(run({"nodes": [second, first]}), "kvquota_steer present again")
        assert res["changed"] is False and res["tainted"] == []

        # untaint one: only ours goes, the record keeps the other node
        res = M.assert_ok(run({"nodes": [first], "state": "absent"}), "kvquota_steer absent one")
        assert res["changed"] is True and res["untainted"] == [first]
        assert ours(r, first) == [] and other in taints(r, first) and ours(r, second)
        assert record(r, cm) == {second: uids[second]}

        # check mode of the rest: nothing written
        res = M.assert_ok(run({"state": "absent"}, check=True), "kvquota_steer absent --check")
        assert res["changed"] is True and res["untainted"] == [second]
        assert ours(r, second) and record(r, cm) == {second: uids[second]}

        # untaint the rest (every recorded node): no taint left, the record gone
        res = M.assert_ok(run({"state": "absent"}), "kvquota_steer absent")
        assert res["changed"] is True and res["untainted"] == [second]
        assert ours(r, first) == [] and ours(r, second) == [] and record(r, cm) is None
        assert other in taints(r, first)

        # nothing left to do
        res = M.assert_ok(run({"state": "absent"}), "kvquota_steer absent again")
        assert res["changed"] is False and res["untainted"] == []
    finally:
        set_taints(r, first, lambda current: [t for t in current if t != other])


def test_an_interrupted_runs_record_is_cleaned_by_the_next_run(r, steer):
    """The record lists a tainted node and one the run never reached (recorded before its taint): state absent
    without nodes removes the taint and the record."""
    name, run = steer
    cm = "kvq-steering-" + name
    first, second = node_names(r)[:2]
    uids = dict((n, r.get("/api/v1/nodes/" + n)["metadata"]["uid"]) for n in (first, second))
    r.create(CM_PATH, {"metadata": {"name": cm, "labels": {"app.kubernetes.io/managed-by": "kvquota.maintenance"}},
                       "data": {"nodes": json.dumps(uids, sort_keys=True)}})
    set_taints(r, first, lambda current: current + [{"key": KEY, "value": name, "effect": EFFECT}])
    res = M.assert_ok(run({"state": "absent"}), "kvquota_steer absent after an interruption")
    assert res["changed"] is True and res["untainted"] == [first]
    assert ours(r, first) == [] and ours(r, second) == [] and record(r, cm) is None


def test_an_unknown_node_writes_nothing(r, steer):
    name, run = steer
    first = node_names(r)[0]
    ghost = "no-such-node-" + name
    res = run({"nodes": [first, ghost]})
    M.assert_one_line_error(res, "no such node: " + ghost, "kubectl get nodes")
    assert ours(r, first) == [] and record(r, "kvq-steering-" + name) is None
