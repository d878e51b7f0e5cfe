# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bad input to the roles (the playbooks of playbooks/), run against the lab, scenario (a): each one must fail
with one clear error naming the problem, and change nothing: the resourceVersions of every quota, namespace,
VM, VMI, migration, lease and KubeVirt CR of the tenant, and of the ledger ConfigMaps and lock Leases in the
operator namespace (kvquota-system), are compared before and after, no kvquota Event may appear, and no node
may be cordoned. The module cases are in test_bad_inputs_lab.py; the chaos command
(tests/chaos/chaos.py, campaign badinput) counts both.

Run: KVQ_LAB_REQUIRED=1 python3 -m pytest -q tests/integration/test_bad_inputs_roles_lab.py
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import pytest

import modlab as M
from test_roles_lab import lab_fixture, playbook, state

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

NS = "a-tenant"
ARG_SPEC_HEADER = "Validation of arguments failed:"

lab = lab_fixture("a")

# (id, playbook, extra vars, fragments the final error must contain); "{node}" is a node running a VM
CASES = [
    ("nm-unknown-node", "node_maintenance", {"node_maintenance_node": "node-99"}, ["node-99"]),
    ("nm-empty-node", "node_maintenance", {"node_maintenance_node": ""}, ["node_maintenance_node"]),
    ("nm-no-node", "node_maintenance", {}, ["node_maintenance_node"]),
    ("nm-ratio-word", "node_maintenance", {"node_maintenance_node": "{node}", "node_maintenance_overhead_ratio": "abc"},
     ["abc"]),
    ("nm-ratio-negative", "node_maintenance",
     {"node_maintenance_node": "{node}", "node_maintenance_overhead_ratio": "-1"}, ["-1"]),
    ("nm-cap-quantity", "node_maintenance",
     {"node_maintenance_node": "{node}", "node_maintenance_per_namespace_cap": {"limits.memory": "lots"}}, ["lots"]),
    ("nm-cap-not-a-dict", "node_maintenance",
     {"node_maintenance_node": "{node}", "node_maintenance_per_namespace_cap": "16Gi"},
     ["node_maintenance_per_namespace_cap"]),
    ("nm-hook-missing", "node_maintenance",
     {"node_maintenance_node": "{node}", "node_maintenance_hook_tasks": "/nonexistent/kvq-hook.yml"},
     ["/nonexistent/kvq-hook.yml"]),
    ("nm-margin", "node_maintenance", {"node_maintenance_node": "{node}", "node_maintenance_safety_margin": "lots%"},
     ["lots"]),
    ("nm-top-up-cap-negative", "node_maintenance",
     {"node_maintenance_node": "{node}", "node_maintenance_top_up_cap": {"limits.memory": "-1Gi"}}, ["-1Gi"]),
    ("nm-ttl", "node_maintenance", {"node_maintenance_node": "{node}", "node_maintenance_reservation_ttl": "soon"},
     ["soon"]),
    ("nm-policy", "node_maintenance", {"node_maintenance_node": "{node}", "node_maintenance_non_migratable": "pray"},
     ["pray"]),
    ("nm-kubevirt-version", "node_maintenance",
     {"node_maintenance_node": "{node}", "node_maintenance_kubevirt_version": "banana"}, ["banana"]),
    ("nm-parallel-negative", "node_maintenance",
     {"node_maintenance_node": "{node}", "node_maintenance_parallel_outbound_migrations_per_node": -2}, ["-2"]),
    ("preflight-ratio", "preflight", {"preflight_overhead_ratio": "abc"}, ["abc"]),
    ("preflight-unknown-node", "preflight", {"preflight_nodes": ["node-99"]}, ["node-99"]),
    ("preflight-cap", "preflight", {"preflight_per_namespace_cap": {"limits.memory": "lots"}}, ["lots"]),
    ("upgrade-unknown-node", "upgrade", {"rolling_upgrade_nodes": ["node-99"]}, ["node-99"]),
    ("upgrade-policy", "upgrade", {"rolling_upgrade_nodes": ["{node}"], "rolling_upgrade_non_migratable": "pray"},
     ["pray"]),
    ("kubevirt-update-mode", "kubevirt_update", {"kubevirt_update_mode": "sideways"}, ["sideways"]),
    ("kubevirt-update-ratio", "kubevirt_update", {"kubevirt_update_overhead_ratio": "abc"}, ["abc"]),
    ("window-until", "maintenance_window", {"maintenance_window_until": "tomorrow"}, ["tomorrow"]),
    ("window-unknown-node", "maintenance_window",
     {"maintenance_window_nodes": ["node-99"], "maintenance_window_until": "nodes_schedulable"}, ["node-99"]),
    ("window-schedulable-without-nodes", "maintenance_window", {"maintenance_window_until": "nodes_schedulable"},
     ["nodes_schedulable names no node"]),
    ("window-ttl", "maintenance_window", {"maintenance_window_nodes": ["{node}"], "maintenance_window_reservation_ttl": "soon"},
     ["soon"]),
    ("reaper-timeout", "reaper", {"reaper_wait": True, "reaper_wait_timeout": "forever"}, ["forever"]),
]


def _final_error(stdout):
    """The msg of the last fatal task result, and how many fatal lines the run printed."""
    fatals = [line for line in stdout.splitlines() if line.startswith("fatal: [localhost]")]
    if not fatals:
        return None, 0
    text = fatals[-1].split("=> ", 1)[1] if "=> " in fatals[-1] else fatals[-1]
    try:
        data = json.loads(text)
    except ValueError:
        return text, len(fatals)
    return data.get("msg") or text, len(fatals)


def _node_with_a_vm(lab):
    return lab.busiest_node([NS])


def _cordoned(lab):
    return sorted(n["metadata"]["name"] for n in lab.get("/api/v1/nodes")["items"] if n["spec"].get("unschedulable"))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_role_input(lab, case):
    _id, book, extra, fragments = case
    node = _node_with_a_vm(lab)
    extra = json.loads(json.dumps(extra).replace("{node}", node))
    before, cordoned = M.snapshot(lab.rest, {NS}), _cordoned(lab)
    operator_before = state.snapshot(lab.rest)
    run = playbook(lab, book, extra, timeout=300)
    assert run.rc != 0, "expected a failure:\n%s" % run.stdout[-3000:]
    msg, _fatals = _final_error(run.stdout)
    assert msg, "no error message:\n%s" % run.stdout[-3000:]
    assert "Traceback" not in msg and "MODULE FAILURE" not in msg, msg
    lines = msg.strip().splitlines()
    if lines[0].strip() == ARG_SPEC_HEADER:
        # Ansible's role argument validation (meta/argument_specs.yml): its header, then one problem per line
        assert len(lines) == 2, "more than one problem reported: %s" % msg
    else:
        assert len(lines) == 1, "not one line: %r" % msg
        assert "Fix:" in msg or "To resume" in msg, "says neither 'Fix:' nor how to resume: %s" % msg
    for fragment in fragments:
        assert fragment in msg, "%r not in the error: %s" % (fragment, msg)
    M.assert_unchanged(before, M.snapshot(lab.rest, {NS}))
    assert state.snapshot(lab.rest) == operator_before, "the operator namespace changed: %s -> %s" % (
        operator_before, state.snapshot(lab.rest))
    assert _cordoned(lab) == cordoned, "a node was cordoned by a run that failed on bad input"
    # not even cordoned and uncordoned again: kvquota_migrate checks its inputs before it cordons
    assert "uncordoned (nothing had moved)" not in msg, "the run cordoned the node: %s" % msg
