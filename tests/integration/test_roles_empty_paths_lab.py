# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' empty and failure paths on each ansible-core in scope (issue 13, defects 1, 3 and 4).

On ansible-core 2.19+ a template that renders nothing is None: the roles' summary tables built from an
empty {% for %} crashed the runs that have no rows. Here, against the lab (scenario a) as the
least-privilege user, on every ansible-core named by KVQ_EMPTY_PATHS_VENVS:
- the reaper with nothing expired: rc 0, its summary, set_stats reaper_released/reaper_deferred empty;
- preflight on a node without VMs: rc 0, verdict ok, the report files, the set_stats artifacts;
- node_maintenance re-run on an emptied node (cordoned, as a run that stopped after its last batch leaves
  it): rc 0, 0 batches, node uncordoned, node_maintenance_results;
- node_maintenance failing in the plan step, before the first batch: rc 2, the error with "To resume" and
  "not cordoned" (the node was never cordoned), node_maintenance_results with outcome failed;
- rolling_upgrade with no node selected and kubevirt_update with nothing outdated: rc 0, their summaries and
  set_stats artifacts;
- one module_defaults entry group/kvquota.maintenance.kvquota reaches kvquota_check and kubernetes.core's
  k8s_info (extend_group in meta/runtime.yml).

Environment:
  KVQ_EMPTY_PATHS_VENVS  os.pathsep-separated list of venvs to run each test on; "system" (the default) is the
                    ansible-playbook beside this pytest's Python. make venv-core-newest / venv-core-2.19
                    build the venvs ($HOME/.cache/kvquota/venvs/core-<series>); their kubernetes.core is in
                    <venv>/collections. make roles-empty-paths runs the three.
  KVQ_LAB_REQUIRED=1 a missing lab build fails instead of skipping.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import subprocess
import sys
import tempfile

import pytest

from test_roles_lab import REPO, Run, base_fixture, collections_path, lab_fixture

pytestmark = pytest.mark.empty_paths   # make roles-empty-paths (conftest.py: every lab test has one such marker)

NS = "a-tenant"

# set_stats artifacts as AWX sees them: written by a callback of the test's own (ansible-core ships no JSON
# stdout callback; ansible.posix's json is not in a bare ansible-core venv).
STATS_CALLBACK = '''
from ansible.plugins.callback import CallbackBase
import json, os

class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kvq_stats"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["KVQ_STATS_FILE"], "w") as fh:
            json.dump(stats.custom, fh, default=str)
'''


class Ansible(object):
    """One ansible-core to run the playbooks with: the system one or a venv of make venv-core-*."""

    def __init__(self, venv):
        if venv in ("", "system"):
            self.bin_dir = os.path.dirname(sys.executable)
            self.python = sys.executable
            self.collections = collections_path()
        else:
            self.bin_dir = os.path.join(venv, "bin")
            self.python = os.path.join(self.bin_dir, "python")
            self.collections = os.pathsep.join([collections_path(), os.path.join(venv, "collections")])
            if not os.path.exists(os.path.join(self.bin_dir, "ansible-playbook")):
                pytest.fail("KVQ_EMPTY_PATHS_VENVS names %s, which has no bin/ansible-playbook. Fix: make venv-core-newest "
                            "(or make venv-core-2.19), or set KVQ_EMPTY_PATHS_VENVS to a built venv" % venv)
        self.version = subprocess.run([self.python, "-c", "import ansible.release as r; print(r.__version__)"],
                                      stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.strip()


def _venvs():
    names = [v for v in os.environ.get("KVQ_EMPTY_PATHS_VENVS", "system").split(os.pathsep) if v] or ["system"]
    return [pytest.param(v, id=os.path.basename(v.rstrip("/")) or v) for v in names]


@pytest.fixture(scope="module", params=_venvs())
def ansible(request, tmp_path_factory):
    found = Ansible(request.param)
    callbacks = tmp_path_factory.mktemp("kvq-callbacks")
    (callbacks / "kvq_stats.py").write_text(STATS_CALLBACK)
    found.callbacks = str(callbacks)
    print("ansible-core %s from %s" % (found.version, found.bin_dir))
    return found


lab = lab_fixture("a")
base = base_fixture(NS)


class StatsRun(Run):
    """A Run plus the set_stats data of the play (stats.custom: {"_run": {...}} for run-wide data)."""

    def __init__(self, proc, stdout, stats):
        Run.__init__(self, proc, stdout, None)
        self.stats = stats

    def artifacts(self):
        return self.stats.get("_run", {})

    def list_msgs(self):
        """The msg of every debug task whose msg is a list (the summary tables), in order."""
        out, lines = [], self.stdout.splitlines()
        for i, line in enumerate(lines):
            if line.strip() == '"msg": [':
                indent = line[:len(line) - len(line.lstrip())]
                end = lines.index(indent + "]", i)
                out.append(json.loads("[" + "\n".join(lines[i + 1:end]) + "]"))
        return out

    def msg_starting(self, prefix):
        found = [m for m in self.list_msgs() if m and str(m[0]).startswith(prefix)]
        assert found, "no debug message starting with %r in\n%s" % (prefix, self.stdout[-4000:])
        return found[-1]


def run(ansible, lab, book, extra_vars=None, k8s_auth_env=True, timeout=900):
    """ansible-playbook <book> (a path, or the name of one of the collection's playbooks) with the given
    ansible-core, as the least-privilege user (given as K8S_AUTH_KUBECONFIG unless k8s_auth_env is false);
    a StatsRun."""
    if not os.path.isabs(book):
        book = str(REPO / "playbooks" / ("%s.yml" % book))
    with tempfile.TemporaryDirectory(prefix="kvq-empty-") as tmp:
        vars_file = os.path.join(tmp, "vars.json")
        stats_file = os.path.join(tmp, "stats.json")
        with open(vars_file, "w") as fh:
            json.dump(extra_vars or {}, fh)
        full_env = dict((k, v) for k, v in os.environ.items() if not k.startswith("K8S_AUTH_") and k != "KUBECONFIG")
        full_env.update({
            "PATH": ansible.bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "ANSIBLE_COLLECTIONS_PATH": ansible.collections,
            "ANSIBLE_PYTHON_INTERPRETER": ansible.python,
            "ANSIBLE_CALLBACK_PLUGINS": ansible.callbacks,
            "ANSIBLE_CALLBACKS_ENABLED": "kvq_stats",
            "KVQ_STATS_FILE": stats_file,
            # nothing may fall back to a default kubeconfig behind the test's back
            "KUBECONFIG": "/nonexistent/kvq-test-kubeconfig",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
            "PYTHONUNBUFFERED": "1",
        })
        if k8s_auth_env:
            full_env["K8S_AUTH_KUBECONFIG"] = str(lab.lab.user_kubeconfig)
        cmd = [os.path.join(ansible.bin_dir, "ansible-playbook"), book, "-e", "@" + vars_file]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=full_env, cwd=tmp,
                              check=False, timeout=timeout, universal_newlines=True)
        stats = {}
        if os.path.exists(stats_file):
            with open(stats_file) as fh:
                stats = json.load(fh)
    return StatsRun(proc, proc.stdout, stats)


def vm_nodes(lab):
    return set(v["status"]["nodeName"] for v in lab.vmis() if (v.get("status") or {}).get("nodeName"))


def empty_node(lab):
    """A node without any VMI (scenario a has one VM on one of its nodes)."""
    nodes = sorted(n["metadata"]["name"] for n in lab.get("/api/v1/nodes")["items"])
    free = [n for n in nodes if n not in vm_nodes(lab)]
    assert free, "scenario a should leave a node without VMs: %s" % nodes
    return free[0]


def cordon(lab, node, unschedulable=True):
    lab.rest.patch("/api/v1/nodes/%s" % node, {"spec": {"unschedulable": unschedulable}})


def test_reaper_with_nothing_expired(ansible, lab, base):
    result = run(ansible, lab, "reaper")
    assert result.rc == 0, result
    summary = result.msg_starting("reaper: ")
    assert summary[0].startswith("reaper: 0 quota(s) released, 0 held at usage, 0 deferred"), summary
    assert summary[1].split("|")[0].strip() == "outcome" and len(summary) == 2, summary
    assert result.artifacts() == {"reaper_released": [], "reaper_deferred": [], "reaper_held_at_usage": [], "reaper_overuse": []}, result.stats
    lab.assert_restored(base, [NS])


def test_preflight_on_a_node_without_vms(ansible, lab, base, tmp_path):
    node = empty_node(lab)
    result = run(ansible, lab, "preflight", {"preflight_nodes": [node], "preflight_report_dir": str(tmp_path)})
    assert result.rc == 0, result
    summary = result.msg_starting("preflight: ")
    assert summary[0].startswith("preflight: verdict ok - 0 namespace(s), 0 VM(s) to migrate in 0 batch(es); "
                                 "0 blocker(s)"), summary
    assert summary[1].split("|")[0].strip() == "namespace", summary
    assert summary[2:] == ["report: %s/preflight.{json,md,html}" % tmp_path], summary
    artifacts = result.artifacts()
    assert artifacts["preflight_verdict"] == "ok", artifacts
    assert artifacts["preflight_summary"]["migrating_vms"] == 0 and artifacts["preflight_summary"]["batches"] == 0
    assert artifacts["preflight_blockers"] == [] and artifacts["preflight_fixes"] == [], artifacts
    files = ["%s/preflight.%s" % (tmp_path, ext) for ext in ("json", "md", "html")]
    assert artifacts["preflight_report_files"] == files, artifacts
    assert all(os.path.getsize(f) > 0 for f in files)
    assert json.loads((tmp_path / "preflight.json").read_text())["verdict"] == "ok"


def test_node_maintenance_rerun_on_an_emptied_node(ansible, lab, base):
    node = empty_node(lab)
    cordon(lab, node)   # as a run that migrated every VM and then stopped (hook, drain) leaves it
    try:
        result = run(ansible, lab, "node_maintenance", {"node_maintenance_node": node})
        assert result.rc == 0, result
        summary = result.msg_starting("node_maintenance %s: " % node)
        assert summary[0].startswith("node_maintenance %s: succeeded in " % node), summary
        assert summary[0].endswith("s, 0 of 0 batch(es) migrated"), summary
        assert summary[1].split("|")[0].strip() == "batch", summary
        assert summary[2:] == ["reservations made: none; released: none; still held: none",
                               "VMs stopped by the shutdown policy: none"], summary
        results = result.artifacts()["node_maintenance_results"][node]
        assert results["outcome"] == "succeeded" and results["step"] == "done", results
        assert results["batches"] == [] and results["planned_batches"] == 0 and results["migrated_vms"] == []
        assert results["reservations_made"] == [] and results["error"] == "", results
        assert not lab.node(node)["spec"].get("unschedulable"), "the role should uncordon the node it maintained"
    finally:
        cordon(lab, node, False)
    lab.assert_restored(base, [NS])


def test_node_maintenance_failure_before_the_first_batch(ansible, lab, base):
    node = sorted(vm_nodes(lab))[0]
    vms_before = sorted((v["metadata"]["namespace"], v["metadata"]["name"]) for v in lab.vmis()
                        if v["status"].get("nodeName") == node)
    result = run(ansible, lab, "node_maintenance",
                 {"node_maintenance_node": node, "node_maintenance_hook_tasks": "/nonexistent/hook.yml"})
    assert result.rc == 2, result
    summary = result.msg_starting("node_maintenance %s: " % node)
    assert summary[0].startswith("node_maintenance %s: failed in " % node), summary
    assert summary[0].endswith("s, 0 of 0 batch(es) migrated"), summary
    error = [line for line in result.stdout.splitlines() if "To resume:" in line]
    assert error, result
    text = error[-1]
    assert "node_maintenance of %s failed in step plan" % node in text, text
    assert "/nonexistent/hook.yml is not a file" in text, text
    assert "0 of 0 batch(es) migrated; %d VM(s) still on the node" % len(vms_before) in text, text
    assert "node not cordoned (the run stopped before the cordon)" in text, text
    assert "left cordoned" not in text, text
    results = result.artifacts()["node_maintenance_results"][node]
    assert results["outcome"] == "failed" and results["step"] == "plan", results
    assert results["batches"] == [] and results["migrated_vms"] == [] and results["reservations_made"] == []
    assert "To resume:" in results["error"] and "not cordoned" in results["error"], results
    assert not lab.node(node)["spec"].get("unschedulable")
    assert sorted((v["metadata"]["namespace"], v["metadata"]["name"]) for v in lab.vmis()
                  if v["status"].get("nodeName") == node) == vms_before
    lab.assert_restored(base, [NS])


def test_rolling_upgrade_with_no_node_selected(ansible, lab, base, tmp_path):
    upgrade = tmp_path / "upgrade.yml"
    upgrade.write_text(json.dumps([{"name": "never reached", "ansible.builtin.fail": {"msg": "no node was selected"}}]))
    result = run(ansible, lab, "upgrade", {"rolling_upgrade_node_selector": "kvquota.test/none=true",
                                           "rolling_upgrade_tasks": str(upgrade)})
    assert result.rc == 0, result
    summary = result.msg_starting("rolling upgrade: ")
    assert summary[0].startswith("rolling upgrade: 0 of 0 node(s) upgraded in 0 wave(s), "), summary
    assert summary[1] == "migrations per VM: 0 migration(s) of 0 VM(s), 0 moved more than once", summary
    assert [c.strip() for c in summary[2].split("|")] == ["node", "outcome", "batches", "VMs", "seconds"], summary
    assert len(summary) == 3, summary
    assert result.artifacts() == {"rolling_upgrade_nodes": [], "rolling_upgrade_waves": []}, result.stats
    lab.assert_restored(base, [NS])


def test_kubevirt_update_with_nothing_outdated(ansible, lab, base):
    result = run(ansible, lab, "kubevirt_update", {"kubevirt_update_namespaces": [NS],
                                                   "kubevirt_update_outdated_wait": 0})
    assert result.rc == 0, result
    summary = result.msg_starting("KubeVirt update window: ")
    assert summary[0].startswith("KubeVirt update window: succeeded, 0 VM(s) to update, 0 batch(es) or group(s) in "), summary
    assert summary[1].split("|")[0].strip() == "reservation" and len(summary) == 2, summary
    assert result.artifacts() == {"kubevirt_update_result": {"outcome": "succeeded", "mode": "follow", "vms": [],
                                                             "batches": [], "reservations_made": [],
                                                             "reservations_released": [],
                                                             "reservations_held": []}}, result.stats
    lab.assert_restored(base, [NS])


def test_one_module_defaults_entry_reaches_both_groups(ansible, lab, tmp_path):
    """group/kvquota.maintenance.kvquota alone gives the connection to kvquota_check and to kubernetes.core's
    k8s_info: no K8S_AUTH_* in the environment, KUBECONFIG points nowhere."""
    book = tmp_path / "defaults.yml"
    book.write_text(json.dumps([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "module_defaults": {"group/kvquota.maintenance.kvquota": {"kubeconfig": str(lab.lab.user_kubeconfig)}},
        "tasks": [
            {"name": "kubernetes.core module", "kubernetes.core.k8s_info": {"kind": "Node"}, "register": "nodes"},
            {"name": "kvquota module", "kvquota.maintenance.kvquota_check": {"namespaces": [NS]}, "register": "check"},
            {"name": "both read the cluster", "ansible.builtin.set_stats": {"data": {
                "nodes": "{{ nodes.resources | map(attribute='metadata.name') | sort }}",
                "namespaces": "{{ check.namespaces.keys() | list }}"}}},
        ]}]))
    result = run(ansible, lab, str(book), k8s_auth_env=False)
    assert result.rc == 0, result
    expected_nodes = sorted(n["metadata"]["name"] for n in lab.get("/api/v1/nodes")["items"])
    assert result.artifacts() == {"nodes": expected_nodes, "namespaces": [NS]}, result.stats
