# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every kubernetes.core task of the roles rides through an API outage (issue 11): it retries `until` its result is
not a kvquota.maintenance.api_outage, and a task that does not poll anyway retries within the role's
<role>_api_outage_budget, 5 s apart (recovering=true: a 401/403/404 on its retry is the API server coming back)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os

import pytest
import yaml

ROLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "roles")
NESTED = ("block", "rescue", "always")


def tasks_of(items):
    for task in items or ():
        yield task
        for key in NESTED:
            yield from tasks_of(task.get(key))


def role_tasks():
    """(role, tasks file name, task) of every task of every role, nested blocks included."""
    for role in sorted(os.listdir(ROLES)):
        folder = os.path.join(ROLES, role, "tasks")
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
            with open(os.path.join(folder, name)) as fh:
                for task in tasks_of(yaml.safe_load(fh)):
                    yield role, name, task


def kubernetes_core_tasks():
    return [(role, name, task) for role, name, task in role_tasks()
            if any(key.startswith("kubernetes.core.") for key in task)]


TASKS = kubernetes_core_tasks()


def test_the_roles_have_kubernetes_core_tasks_to_check():
    # 11 since node_maintenance's cordon moved into kvquota_migrate and its Node read into kvquota_check (13 since
    # kubevirt_update became one kvquota_migrate call: its own k8s create and polls went away)
    assert len(TASKS) >= 11
    roles = set(role for role, _name, _task in TASKS)
    assert roles == {"install", "kubevirt_update", "node_maintenance", "rolling_upgrade"}


@pytest.mark.parametrize("role,name,task", TASKS, ids=["%s/%s: %s" % (r, n, t["name"]) for r, n, t in TASKS])
def test_a_kubernetes_core_task_retries_an_outage_and_nothing_else(role, name, task):
    register = task.get("register")
    assert register, "a retried task registers its result for `until`"
    assert "%s is not kvquota.maintenance.api_outage" % register in " ".join(str(task.get("until", "")).split())
    until = " ".join(str(task.get("until", "")).split())
    if task.get("delay") == 5:
        # not a poll: the retries are the outage budget, and each retry follows an outage
        assert task["retries"] in ("{{ %s_api_outage_budget | int // 5 }}" % role, 3), task["retries"]
        assert until == "%s is not kvquota.maintenance.api_outage(recovering=true)" % register
    else:
        # a poll: any retry may follow an outage, so a 401/403/404 after the first attempt is one more poll (its
        # own timeout bounds it); the full campaign's health gate met a 403 from a restarted API server
        assert "_interval" in str(task.get("delay")), "a poll retries at its own interval: %r" % task.get("delay")
        assert "%s is not kvquota.maintenance.api_outage(recovering=true)" % register in until
