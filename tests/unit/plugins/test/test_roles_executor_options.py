# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles pass kvquota_migrate's executor options as one dict (issue 25): each role that calls kvquota_migrate
builds <role>__executor_options once (roles/<role>/vars/main.yml) and gives it to every such task through
module_defaults group/kvquota.maintenance.executor (meta/runtime.yml), the task itself only what differs per call.
A task that also gave one of the dict's options directly would silently override it; an option the module does not
take would fail every run."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.kvquota.maintenance.plugins.module_utils import kvquota_module
from ansible_collections.kvquota.maintenance.plugins.modules import kvquota_migrate as module_mod
from ansible_collections.kvquota.maintenance.tests.unit.plugins.test.test_roles_ride_through import ROLES, role_tasks

ROOT = os.path.join(ROLES, "..")
GROUP = "group/kvquota.maintenance.executor"
MIGRATE = "kvquota.maintenance.kvquota_migrate"


TASKS = [(role, name, task) for role, name, task in role_tasks() if MIGRATE in task]


def _options_dict(role):
    with open(os.path.join(ROLES, role, "vars", "main.yml")) as fh:
        return yaml.safe_load(fh)["%s__executor_options" % role]


def _module_options(monkeypatch):
    captured = {}

    class Module(object):
        def __init__(self, argument_spec, **_kwargs):
            captured.update(argument_spec)
            raise SystemExit(0)
    monkeypatch.setattr(kvquota_module, "AnsibleModule", Module)
    with pytest.raises(SystemExit):
        module_mod.main()
    return captured


def test_the_executor_group_holds_kvquota_migrate():
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as fh:
        groups = yaml.safe_load(fh)["action_groups"]
    assert groups["executor"] == ["kvquota_migrate"]
    assert sorted(set(role for role, _name, _task in TASKS)) == ["kubevirt_update", "maintenance_window",
                                                                 "node_maintenance"]


@pytest.mark.parametrize("role,name,task", TASKS, ids=["%s/%s: %s" % (r, n, t["name"]) for r, n, t in TASKS])
def test_a_kvquota_migrate_task_takes_its_roles_executor_options_as_one_dict(monkeypatch, role, name, task):
    assert task.get("module_defaults") == {GROUP: "{{ %s__executor_options }}" % role}
    options = _options_dict(role)
    taken = _module_options(monkeypatch)
    assert set(options) <= set(taken), "not kvquota_migrate options: %s" % sorted(set(options) - set(taken))
    shared = sorted(set(options) & set(task[MIGRATE]))
    assert not shared, "given directly as well (it would override the dict's): %s" % shared
    # the ledgers' namespace is the one the role's other tasks use, whatever a play's module_defaults say
    assert task[MIGRATE]["operator_namespace"] == "{{ %s_operator_namespace }}" % role
    # every option is the role's own variable (or its survey-safe form), none a constant
    assert all(("%s_" % role) in str(value) for value in options.values())
