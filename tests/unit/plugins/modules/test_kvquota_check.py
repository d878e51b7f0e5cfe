# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kvquota_check module's result: compact by default, full with report=full, and report_file (the full
report as JSON, mode 0600, replaced atomically). The core check is replaced by an evaluated snapshot."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import stat

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as core
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.modules import kvquota_check as module_mod
from ansible_collections.kvquota.maintenance.tests.unit.plugins.module_utils.test_check import (
    NOW,
    make_quota,
    make_vmi,
    snapshot,
)


class FakeModule(object):
    def __init__(self, **params):
        self.params = dict(nodes=[], namespaces=[], api_outage_budget=60, operator_namespace='kvquota-system',
                           report='compact', report_file=None, plan=False)
        self.params.update(params)
        for name in module_mod.PLAN_OPTIONS:
            self.params.setdefault(name, None)
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)


@pytest.fixture
def evaluated(monkeypatch):
    """The report the core returns: one namespace, two VMs, a quota that needs headroom."""
    snap = snapshot({"t": ([make_quota("limits", "t", {"limits.memory": "3Gi", "limits.cpu": "8"})],
                           [make_vmi("vm-1", "t", cpu=1, memory="1Gi"), make_vmi("vm-2", "t", cpu=1, memory="1Gi")])})
    report = core.evaluate(snap, {"now": NOW})
    assert report["verdict"] == "needs_reservation"
    monkeypatch.setattr(module_mod, "connect", lambda *args, **kwargs: None)
    monkeypatch.setattr(module_mod.check_mod, "check", lambda cluster, scope, options: json.loads(json.dumps(report)))
    return report


def test_the_default_result_is_compact(evaluated):
    result = module_mod.check(FakeModule())
    ns = result["namespaces"]["t"]
    assert result["report"] == "compact" and result["changed"] is False and "report_file" not in result
    assert "vms" not in ns and "not_running" not in ns and "batches" not in ns["quotas"][0]
    assert ns["quotas"][0]["needed"] == evaluated["namespaces"]["t"]["quotas"][0]["needed"]
    assert ns["summary"] == {"vms": 2, "migrating_vms": 2, "not_running": 0, "blockers": 0}
    assert ns["needed"] == evaluated["namespaces"]["t"]["needed"] and ns["needed"]
    assert result["batches"] == evaluated["batches"] and result["fixes"] == evaluated["fixes"]
    assert result["findings"] == evaluated["warnings"] and "warnings" not in result


def test_report_full_returns_every_vm(evaluated):
    result = module_mod.check(FakeModule(report="full"))
    assert result["report"] == "full"
    assert result["namespaces"] == evaluated["namespaces"]
    assert [vm["name"] for vm in result["namespaces"]["t"]["vms"]] == ["vm-1", "vm-2"]


def test_report_file_holds_the_full_report_with_mode_0600(evaluated, tmp_path):
    path = tmp_path / "check.json"
    path.write_text("old")
    os.chmod(str(path), 0o644)
    result = module_mod.check(FakeModule(report_file=str(path)))
    assert result["report"] == "compact" and result["report_file"] == str(path)
    assert "vms" not in result["namespaces"]["t"]
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o600
    written = json.loads(path.read_text())
    assert written["namespaces"] == evaluated["namespaces"] and written["batches"] == evaluated["batches"]
    assert written["findings"] == evaluated["warnings"]
    assert os.listdir(str(tmp_path)) == ["check.json"]        # no temporary file left beside it


@pytest.mark.usefixtures("evaluated")
@pytest.mark.parametrize("where", ["missing-dir/check.json", "a-directory"])
def test_an_unwritable_report_file_is_one_clear_error(tmp_path, where):
    (tmp_path / "a-directory").mkdir()
    path = str(tmp_path / where)
    with pytest.raises(InputError) as err:
        module_mod.check(FakeModule(report_file=path))
    assert "cannot write report_file %s" % path in str(err.value)
    assert sorted(os.listdir(str(tmp_path))) == ["a-directory"]
