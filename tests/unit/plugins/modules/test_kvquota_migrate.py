# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""kvquota_migrate's plan option: checked before the cluster is touched, its batches and entries handed to the
executor. The executor and the connection are replaced."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.inventory import Snapshot
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as core
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import timeutil
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import versioned
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.modules import kvquota_migrate as module_mod
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import (
    NOW,
    make_quota,
    make_vmi,
    snapshot,
)


class FakeModule(object):
    def __init__(self, **params):
        self.params = dict(
            mode='drive', node='worker-1', nodes=[], namespaces=[], follow_until='idle', follow_idle_seconds=60,
            deadline_seconds=None, batches=None, plan=None, reservation_prefix=None, owner='tester', reason=None,
            ttl='2h', safety_margin=None, top_up_cap='25%', top_up_max_rounds=2, top_up_settle_seconds=10,
            completion_timeout_per_gib=None, progress_timeout=None, scheduling_timeout=300, release_timeout=600,
            stop_release_timeout=120, poll_interval=1, overlap=True, cordon=True, lock_timeout=120,
            kubevirt_version=None, overhead_ratio=None, api_outage_budget=60, operator_namespace='kvquota-system')
        self.params.update(params)
        self.check_mode = False


def _plan(node="worker-1"):
    snap = snapshot({"t": ([make_quota("q", "t", {"limits.memory": "9000Mi"})], [make_vmi("vm1", "t", node=node)])})
    snap["vmis"]["t"][0]["metadata"]["resourceVersion"] = "5"
    snap["scope"] = {"nodes": [node], "namespaces": []}
    planned = core.plan(snap, {"now": NOW})
    return versioned.build(Snapshot.of(snap), {}, planned.movers, planned.keys, planned.facts, timeutil.parse_datetime(NOW))


@pytest.fixture
def untouched(monkeypatch):
    """The cluster must not be reached: connect fails the test."""
    def connect(*args, **kwargs):
        raise AssertionError("the module connected to the cluster")
    monkeypatch.setattr(module_mod, "connect", connect)


@pytest.mark.parametrize("change,problem", [
    (lambda p: p.update(version=2), "plan version 2 is not supported by this collection"),
    (lambda p: p.update(kind="other"), "kind is 'other'"),
    (lambda p: p.update(scope={"nodes": ["worker-2"], "namespaces": []}), "not for node worker-1"),
])
def test_a_plan_that_does_not_load_fails_before_the_cluster_is_touched(untouched, change, problem):
    plan = _plan()
    change(plan)
    with pytest.raises(InputError) as err:
        module_mod.migrate(FakeModule(plan=plan))
    assert problem in err.value.message


def test_a_malformed_margin_fails_before_the_cluster_is_touched(untouched):
    with pytest.raises(InputError) as err:
        module_mod.migrate(FakeModule(plan=_plan(), safety_margin="lots"))
    assert "malformed margin 'lots'" in err.value.message


def test_the_executor_runs_the_plans_batches_and_cordons(monkeypatch):
    built = {}

    class Executor(object):
        def __init__(self, cluster, config, batches, planned):
            built.update(config=config, batches=batches, planned=planned)

        def run(self):
            return {"changed": True}
    monkeypatch.setattr(module_mod, "connect", lambda *a, **k: "cluster")
    monkeypatch.setattr(module_mod.migrate_mod, "Executor", Executor)
    assert module_mod.migrate(FakeModule(plan=_plan())) == {"changed": True}
    assert built["planned"].batches == [["t/vm1"]] and built["batches"] == []
    assert built["config"].cordon is True and built["config"].node == "worker-1"
