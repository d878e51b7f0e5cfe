# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Molecule scenario a user runs against their own cluster (extensions/molecule/own_cluster), here against a
lab standing in for it (scenario a), as the least-privilege user, exactly as its molecule.yml tells a user to run
it: `molecule test -s own_cluster` with only K8S_AUTH_KUBECONFIG and KVQ_MOLECULE_NODE set. Every step passes
(create, prepare, converge, idempotence, check - node_maintenance in check mode -, verify), and the cluster is
the same afterwards: no quota limit changed, the VM is still on its node, the node is schedulable, nothing is
left in the operator namespace. Without KVQ_MOLECULE_NODE the scenario stops in create with the fix.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import subprocess
import sys

import pytest

from test_roles_lab import REPO, base_fixture, lab_fixture

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

NS = "a-tenant"
lab = lab_fixture("a")
base = base_fixture(NS)


def molecule(lab, node):
    """molecule test -s own_cluster from the repository root, with the system ansible (the one beside this Python)."""
    bin_dir = os.path.dirname(sys.executable)
    env = dict((k, v) for k, v in os.environ.items()
               if not k.startswith(("K8S_AUTH_", "ANSIBLE_", "MOLECULE_")) and k != "KUBECONFIG")
    env.update({"PATH": bin_dir + os.pathsep + env.get("PATH", ""), "NO_COLOR": "1", "PY_COLORS": "0",
                "KVQ_COLLECTIONS_PATH": os.environ["KVQ_COLLECTIONS_PATH"],
                "MOLECULE_GLOB": "extensions/molecule/*/molecule.yml",
                "K8S_AUTH_KUBECONFIG": str(lab.lab.user_kubeconfig),
                "KUBECONFIG": "/nonexistent/kvq-test-kubeconfig"})
    if node:
        env["KVQ_MOLECULE_NODE"] = node
    proc = subprocess.run([os.path.join(bin_dir, "molecule"), "-c", str(REPO / "extensions" / "molecule" / "config.yml"),
                           "test", "-s", "own_cluster"], cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=1200, check=False)
    return proc.returncode, proc.stdout


def test_own_cluster_scenario_passes_and_changes_nothing(lab, base):
    node = lab.busiest_node([NS])
    before = dict((v["metadata"]["name"], v["status"]["nodeName"]) for v in lab.vmis(NS))
    rc, out = molecule(lab, node)
    assert rc == 0, out[-6000:]
    for step in ("create", "prepare", "converge", "idempotence", "check", "verify"):
        assert "own_cluster > %s: Executed: Successful" % step in out, "step %s did not succeed:\n%s" % (step, out[-6000:])
    assert "objects unchanged" in out, out[-4000:]
    assert lab.hard(NS) == base[NS]
    assert dict((v["metadata"]["name"], v["status"]["nodeName"]) for v in lab.vmis(NS)) == before
    assert not lab.node(node)["spec"].get("unschedulable"), "check mode cordoned %s" % node


def test_without_a_node_it_stops_with_the_fix(lab, base):
    rc, out = molecule(lab, None)
    assert rc != 0
    assert "Fix: export both" in out, out[-4000:]
    assert lab.hard(NS) == base[NS]
