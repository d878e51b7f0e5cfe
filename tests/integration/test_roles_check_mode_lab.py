# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role's playbook with `ansible-playbook --check` against the lab (scenario a), as the least-privilege
user: it exits 0 where a real run would proceed, says what it would do, and changes nothing - the
resourceVersion of every quota, namespace, VM, VMI, migration, lease and KubeVirt CR of the tenant, the ledgers
and locks of the operator namespace, no kvquota Event, no node cordoned (issue 13, item 3).

Run: KVQ_LAB_REQUIRED=1 python3 -m pytest -q tests/integration/test_roles_check_mode_lab.py
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import time

import pytest

import modlab as M
from test_roles_lab import KV, lab_fixture, playbook, state

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

NS = "a-tenant"
OUTDATED = "kubevirt.io/outdatedLauncherImage"

lab = lab_fixture("a")


def _cordoned(lab):
    return sorted(n["metadata"]["name"] for n in lab.get("/api/v1/nodes")["items"] if n["spec"].get("unschedulable"))


def _set_outdated(lab, value):
    for vmi in lab.vmis(NS):
        lab.rest.patch(KV + "/namespaces/%s/virtualmachineinstances/%s" % (NS, vmi["metadata"]["name"]),
                       {"metadata": {"labels": {OUTDATED: value}}})


def _expired_reservation(lab):
    """A reservation whose TTL has passed, made by the module as the least-privilege user: the reaper's work."""
    M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": "check-reap", "ttl": "1s", "vms": [
        {"namespace": NS, "name": lab.vmis(NS)[0]["metadata"]["name"]}]}, str(lab.lab.user_kubeconfig)),
        "kvquota_reserve (ttl 1s)")
    time.sleep(2)


# (playbook, extra vars, what the output must say it would do); {node} is the node with most VMs of NS
CASES = [
    ("node_maintenance", {"node_maintenance_node": "{node}"}, ["check mode: the batches would migrate"]),
    ("upgrade", {"rolling_upgrade_nodes": ["{node}"]}, ["{node}"]),
    ("kubevirt_update", {"kubevirt_update_mode": "drive", "kubevirt_update_namespaces": [NS]},
     ["check mode, would move", "KubeVirt update window: planned"]),
    ("maintenance_window", {"maintenance_window_nodes": ["{node}"], "maintenance_window_until": "nodes_schedulable"},
     ["maintenance window: planned"]),
    ("preflight", {"preflight_nodes": ["{node}"]}, ["preflight_verdict"]),
    ("reaper", {}, ["check-reap"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_check_mode_changes_nothing(lab, case, tmp_path):
    book, extra, says = case
    node = lab.busiest_node([NS])
    extra = dict((k, [x.replace("{node}", node) for x in v] if isinstance(v, list) else
                  (v.replace("{node}", node) if isinstance(v, str) else v)) for k, v in extra.items())
    if book == "preflight":
        extra["preflight_report_dir"] = str(tmp_path)
    if book == "upgrade":
        # the operator's upgrade tasks; in check mode they run in check mode too (this one would write a file)
        hook = tmp_path / "upgrade-node.yml"
        hook.write_text("- name: Pretend to upgrade the node\n"
                        "  ansible.builtin.copy:\n"
                        "    content: upgraded\n"
                        "    dest: \"%s/{{ node_maintenance_node }}\"\n"
                        "    mode: '0644'\n" % tmp_path)
        extra["rolling_upgrade_tasks"] = str(hook)
    if book == "kubevirt_update":
        _set_outdated(lab, "")
    if book == "reaper":
        _expired_reservation(lab)
    try:
        before, cordoned = M.snapshot(lab.rest, {NS}), _cordoned(lab)
        operator_before = state.snapshot(lab.rest)
        run = playbook(lab, book, extra, timeout=600, check=True)
        print(run.stdout)
        assert run.rc == 0, run.stdout[-3000:]
        for text in says:
            assert text.replace("{node}", node) in run.stdout, "the run does not say %r" % text
        M.assert_unchanged(before, M.snapshot(lab.rest, {NS}))
        assert state.snapshot(lab.rest) == operator_before, "the operator namespace changed"
        assert _cordoned(lab) == cordoned, "a node was cordoned in check mode"
        assert not (tmp_path / node).exists(), "the upgrade tasks ran for real in check mode"
    finally:
        if book == "kubevirt_update":
            _set_outdated(lab, None)
        if book == "reaper":
            assert playbook(lab, "reaper").rc == 0
