# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The playbooks run the way AWX runs them (issue 13, item 6): through ansible-runner, against the lab.

What AWX does for a job template, done here with ansible_runner.run() in a separate Python process:
- a private_data_dir laid out like AWX's: project/ (a one-line playbook importing the collection's, as
  docs/docsite/rst/awx.rst section 3 suggests, with the collection in project/collections), inventory/hosts (the
  built-in localhost), env/extravars (the survey answers) and env/envvars (the credential);
- the credential is AWX's "OpenShift or Kubernetes API Bearer Token": only K8S_AUTH_HOST, K8S_AUTH_API_KEY,
  K8S_AUTH_SSL_CA_CERT and K8S_AUTH_VERIFY_SSL ("True", a string as AWX's injector writes it). The token is a
  bound token (TokenRequest API) of a ServiceAccount that playbooks/install.yml, run once by the lab admin,
  bound to the shipped least-privilege roles. No kubeconfig anywhere: KUBECONFIG points at a missing file;
- survey answers are strings, every one ("true", "3", "node-1"), as AWX surveys of type text and
  multiplechoice pass them; the roles' meta/argument_specs.yml must accept or convert them;
- the result is read where AWX reads it: artifacts/<ident>/status and rc, and the set_stats data in the
  artifact_data of the playbook_on_stats job event (artifacts/<ident>/job_events/*.json).

One lab (scenario a: one VM of a-tenant, a quota too tight to migrate it without a reservation) serves the
jobs in order: preflight (needs_reservation: successful), preflight with "what if ratio 4.5" (blocked: failed),
node_maintenance failing in its plan step (failed, nothing changed), node_maintenance on the VM's node
(successful), a rolling upgrade of a node given as text (successful), the reaper with nothing expired
(successful), and the reaper with the token of a ServiceAccount install.yml did not bind (failed: the jobs
authenticate with the credential and nothing else). Each job's wall time is printed (-s).

Survey strings the roles once mishandled, each covered here: "0" for an option whose 0 means "the cluster's
value" (preflight and node_maintenance passed "0" on to the modules, which refuse 0), and a node list typed as
text (rolling_upgrade looped over the string).

Environment: KVQ_LAB_REQUIRED=1 makes a missing lab build a failure instead of a skip.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import json
import os
import subprocess
import sys
import time

import pytest

from test_roles_lab import REPO, base_fixture, lab_fixture, playbook

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

NS = "a-tenant"
VM = "a-vm-1"
# node_maintenance_results[<node>] as docs/docsite/rst/roles.rst documents it
RESULT_KEYS = ("outcome", "step", "batches", "planned_batches", "migrated_vms", "reservations_made",
               "reservations_released", "reservations_held", "stopped_vms", "seconds", "error")
SA_NAMESPACE = "kvquota-awx"
SA_NAME = "awx"

# ansible_runner.run() in its own process: the job's environment is what this test gives it, nothing of pytest's
RUNNER_SCRIPT = '''
import json, sys
import ansible_runner
r = ansible_runner.run(private_data_dir=sys.argv[1], playbook=sys.argv[2], ident=sys.argv[3], quiet=True)
print(json.dumps({"status": r.status, "rc": r.rc}))
'''

lab = lab_fixture("a")
base = base_fixture(NS)


@pytest.fixture(scope="module")
def credential(lab):
    """AWX's bearer-token credential: {K8S_AUTH_*: value} of a ServiceAccount bound by playbooks/install.yml."""
    lab.rest.create("/api/v1/namespaces", {"metadata": {"name": SA_NAMESPACE}})
    lab.rest.create("/api/v1/namespaces/%s/serviceaccounts" % SA_NAMESPACE, {"metadata": {"name": SA_NAME}})
    # the install playbook as a cluster administrator would run it (the lab admin's kubeconfig)
    install = playbook(lab, "install", {"kvquota_subject_kind": "ServiceAccount", "kvquota_subject_name": SA_NAME,
                                        "kvquota_subject_namespace": SA_NAMESPACE}, admin=True)
    assert install.rc == 0, install
    token = lab.rest.create("/api/v1/namespaces/%s/serviceaccounts/%s/token" % (SA_NAMESPACE, SA_NAME), {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600}})["status"]["token"]
    subject = "system:serviceaccount:%s:%s" % (SA_NAMESPACE, SA_NAME)
    # the token is the least-privilege identity: bound to the shipped roles, nothing more
    assert can_i(lab, subject, "update", "resourcequotas")
    assert can_i(lab, subject, "create", "configmaps", "kvquota-system")
    assert not can_i(lab, subject, "create", "configmaps", NS) and not can_i(lab, subject, "get", "secrets")
    return {
        "K8S_AUTH_HOST": lab.lab.server,
        "K8S_AUTH_API_KEY": token,
        "K8S_AUTH_SSL_CA_CERT": str(lab.lab.ca_file),
        "K8S_AUTH_VERIFY_SSL": "True",
    }


def can_i(lab, user, verb, resource, namespace=None):
    """SubjectAccessReview as the lab admin: may user do verb on resource (in namespace)?"""
    attributes = {"verb": verb, "resource": resource}
    if namespace:
        attributes["namespace"] = namespace
    review = lab.rest.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts", "system:serviceaccounts:%s" % SA_NAMESPACE],
                 "resourceAttributes": attributes}})
    return bool(review["status"].get("allowed"))


class Job(object):
    """What AWX keeps of one job: status, rc, stdout, the job events and the set_stats artifacts."""

    def __init__(self, private_data_dir, ident, reported, seconds):
        self.artifacts_dir = os.path.join(private_data_dir, "artifacts", ident)
        self.reported = reported
        self.seconds = seconds
        self.status = self._read("status")
        self.rc = int(self._read("rc"))
        self.stdout = self._read("stdout")
        self.events = []
        for path in glob.glob(os.path.join(self.artifacts_dir, "job_events", "*.json")):
            with open(path) as fh:
                self.events.append(json.load(fh))
        self.events.sort(key=lambda e: e["counter"])

    def _read(self, name):
        with open(os.path.join(self.artifacts_dir, name)) as fh:
            return fh.read().strip() if name != "stdout" else fh.read()

    def __repr__(self):
        return "<Job %s rc=%s>\n%s" % (self.status, self.rc, self.stdout[-6000:])

    @property
    def artifact_data(self):
        """The set_stats data, as AWX takes it (the playbook_on_stats event's artifact_data)."""
        stats = [e for e in self.events if e["event"] == "playbook_on_stats"]
        assert len(stats) == 1, "expected one playbook_on_stats event, got %d:\n%r" % (len(stats), self)
        return stats[0]["event_data"]["artifact_data"]


# The ansible-core the jobs run on: the venv of KVQ_ANSIBLE_VENV_PLAYBOOKS (the repository's conftest.py put its
# bin first on PATH, where ansible-runner finds ansible-playbook; its kubernetes.core is in <venv>/collections, as
# an execution environment holds it), else the ansible beside this Python.
PLAYBOOK_VENV = os.environ.get("KVQ_ANSIBLE_VENV_PLAYBOOKS")
JOB_PYTHON = os.path.join(os.path.abspath(PLAYBOOK_VENV), "bin", "python") if PLAYBOOK_VENV else sys.executable


def launch(credential, private_data_dir, book, survey, ident):
    """One job: the playbook kvquota.maintenance.<book> with the survey answers (every value a string)."""
    assert all(isinstance(v, str) for v in survey.values()), "survey answers are strings: %r" % survey
    project = os.path.join(private_data_dir, "project")
    collections = os.path.join(project, "collections", "ansible_collections", "kvquota")
    for sub in ("env", "inventory", collections):
        os.makedirs(os.path.join(private_data_dir, sub), exist_ok=True)
    if not os.path.lexists(os.path.join(collections, "maintenance")):
        os.symlink(str(REPO), os.path.join(collections, "maintenance"))
    if PLAYBOOK_VENV:
        kubernetes = os.path.join(project, "collections", "ansible_collections", "kubernetes")
        os.makedirs(kubernetes, exist_ok=True)
        if not os.path.lexists(os.path.join(kubernetes, "core")):
            os.symlink(os.path.join(os.path.abspath(PLAYBOOK_VENV), "collections", "ansible_collections", "kubernetes",
                                    "core"), os.path.join(kubernetes, "core"))
    with open(os.path.join(project, "%s.yml" % book), "w") as fh:
        fh.write("---\n- ansible.builtin.import_playbook: kvquota.maintenance.%s\n" % book)
    with open(os.path.join(private_data_dir, "inventory", "hosts"), "w") as fh:
        fh.write("localhost ansible_connection=local ansible_python_interpreter=%s\n" % JOB_PYTHON)
    with open(os.path.join(private_data_dir, "env", "extravars"), "w") as fh:
        json.dump(survey, fh)
    with open(os.path.join(private_data_dir, "env", "envvars"), "w") as fh:
        json.dump(credential, fh)
    # the job's own environment: nothing of the test's Kubernetes or Ansible settings, no kubeconfig to fall
    # back to (the credential's K8S_AUTH_* come from env/envvars, as AWX passes them)
    env = dict((k, v) for k, v in os.environ.items()
               if not k.startswith(("K8S_AUTH_", "ANSIBLE_", "KVQ_")) and k != "KUBECONFIG")
    env.update({"KUBECONFIG": "/nonexistent/kvq-awx-kubeconfig", "PYTHONUNBUFFERED": "1"})
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", RUNNER_SCRIPT, private_data_dir, "%s.yml" % book, ident],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=900, check=False,
                          universal_newlines=True)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, "ansible_runner.run() raised:\n%s" % proc.stderr[-4000:]
    job = Job(private_data_dir, ident, json.loads(proc.stdout.strip().splitlines()[-1]), seconds)
    print("job %s (%s): %s rc=%s in %.1fs" % (ident, book, job.status, job.rc, seconds))
    assert job.reported == {"status": job.status, "rc": job.rc}, (job.reported, job)
    return job


def vm_node(lab):
    return [v["status"]["nodeName"] for v in lab.vmis(NS) if v["metadata"]["name"] == VM][0]


def test_preflight_needs_a_reservation(lab, base, credential, tmp_path):
    node = vm_node(lab)
    job = launch(credential, str(tmp_path), "preflight",
                 {"preflight_nodes": node, "preflight_non_migratable": "fail", "preflight_fail_on_blockers": "true",
                  "preflight_parallel_migrations_per_cluster": "0", "preflight_report_dir": str(tmp_path / "report")},
                 "preflight-ok")
    assert (job.status, job.rc) == ("successful", 0), job
    data = job.artifact_data
    assert sorted(data) == ["preflight_blocked_vms", "preflight_blockers", "preflight_fixes", "preflight_report_files", "preflight_summary",
                            "preflight_verdict"], data
    assert data["preflight_verdict"] == "needs_reservation", data
    assert data["preflight_blockers"] == [], data
    assert data["preflight_summary"]["migrating_vms"] == 1 and data["preflight_summary"]["batches"] == 1, data
    assert data["preflight_summary"]["blockers"] == 0, data
    files = ["%s/report/preflight.%s" % (tmp_path, ext) for ext in ("json", "md", "html")]
    assert data["preflight_report_files"] == files, data
    with open(files[0]) as fh:
        assert json.load(fh)["verdict"] == "needs_reservation"
    lab.assert_restored(base, [NS])


def test_preflight_blocked_fails_the_job(lab, base, credential, tmp_path):
    job = launch(credential, str(tmp_path), "preflight",
                 {"preflight_nodes": vm_node(lab), "preflight_overhead_ratio": "4.5",
                  "preflight_fail_on_blockers": "true", "preflight_report_dir": str(tmp_path / "report")},
                 "preflight-blocked")
    assert (job.status, job.rc) == ("failed", 2), job
    data = job.artifact_data
    assert data["preflight_verdict"] == "blocked", data
    assert data["preflight_summary"]["blockers"] == len(data["preflight_blockers"]) >= 1, data
    assert any("a-tenant/a-tenant-quota" in b for b in data["preflight_blockers"]), data
    assert any(f.startswith("raise limits.memory of quota a-tenant/a-tenant-quota to") for f in
               data["preflight_fixes"]), data
    assert "blocker(s): [usage_above_hard]" in job.stdout, job
    lab.assert_restored(base, [NS])


def test_node_maintenance_failing_in_its_plan(lab, base, credential, tmp_path):
    node = vm_node(lab)
    job = launch(credential, str(tmp_path), "node_maintenance",
                 {"node_maintenance_node": node, "node_maintenance_hook_tasks": "/nonexistent/hook.yml",
                  "node_maintenance_uncordon": "true", "node_maintenance_lock_timeout": "30"},
                 "maintenance-plan-fails")
    assert (job.status, job.rc) == ("failed", 2), job
    results = job.artifact_data["node_maintenance_results"]
    assert list(results) == [node], results
    result = results[node]
    assert sorted(result) == sorted(RESULT_KEYS), result
    assert (result["outcome"], result["step"]) == ("failed", "plan"), result
    assert result["batches"] == [] and result["migrated_vms"] == [] and result["reservations_made"] == [], result
    assert "/nonexistent/hook.yml is not a file" in result["error"], result
    assert "To resume:" in result["error"] and "not cordoned" in result["error"], result
    assert not lab.node(node)["spec"].get("unschedulable"), "a failure in the plan step must not cordon"
    assert vm_node(lab) == node
    lab.assert_restored(base, [NS])


def test_node_maintenance_migrates_the_vm(lab, base, credential, tmp_path):
    node = vm_node(lab)
    job = launch(credential, str(tmp_path), "node_maintenance",
                 {"node_maintenance_node": node, "node_maintenance_non_migratable": "fail",
                  "node_maintenance_uncordon": "true", "node_maintenance_reservation_ttl": "2h",
                  "node_maintenance_hook_tasks": "", "node_maintenance_safety_margin": "5%",
                  "node_maintenance_lock_timeout": "30", "node_maintenance_poll_interval": "1",
                  "node_maintenance_batch_overlap": "false",
                  # "0" = the KubeVirt CR's: a survey string, true in Jinja unless the role converts it
                  "node_maintenance_parallel_migrations_per_cluster": "0",
                  "node_maintenance_parallel_outbound_migrations_per_node": "0",
                  "node_maintenance_completion_timeout_per_gib": "0", "node_maintenance_progress_timeout": "0"},
                 "maintenance")
    assert (job.status, job.rc) == ("successful", 0), job
    results = job.artifact_data["node_maintenance_results"]
    assert list(results) == [node], results
    result = results[node]
    assert sorted(result) == sorted(RESULT_KEYS), result
    assert (result["outcome"], result["step"], result["error"]) == ("succeeded", "done", ""), result
    assert result["planned_batches"] == 1 and len(result["batches"]) == 1, result
    assert result["migrated_vms"] == ["%s/%s" % (NS, VM)], result
    assert result["reservations_made"] == ["%s-b0" % node], result
    assert result["reservations_released"] == ["%s-b0" % node] and result["reservations_held"] == [], result
    assert result["stopped_vms"] == [], result
    batch = result["batches"][0]
    assert batch["vms"] == ["%s/%s" % (NS, VM)] and batch["reservation"] == "%s-b0" % node, batch
    assert (batch["state"], batch["migrated"], batch["failed_migrations"]) == ("released", True, []), batch
    # the headroom covers the second launcher pod: 2 x 4,800,765,905 bytes (scenario a) above the 5000Mi quota
    headroom = int(batch["headroom"]["%s/a-tenant-quota" % NS]["limits.memory"])
    assert headroom >= 2 * 4800765905 - 5000 * 2 ** 20, batch
    # "true" uncordoned the node; the VM runs elsewhere; quotas back to their base, nothing left in kvquota-system
    assert not lab.node(node)["spec"].get("unschedulable"), "node_maintenance_uncordon: 'true' should uncordon"
    lab.assert_vms_running_off(node, [NS])
    lab.assert_restored(base, [NS])


def test_rolling_upgrade_of_a_node_given_as_text(lab, base, credential, tmp_path):
    """rolling_upgrade_nodes from a text survey: a string (" node-3 "), which the role reads as argument_specs
    does (split on commas, trimmed). One empty node keeps the job short."""
    nodes = sorted(n["metadata"]["name"] for n in lab.get("/api/v1/nodes")["items"])
    free = [n for n in nodes if n not in set(v["status"].get("nodeName") for v in lab.vmis())]
    assert free, "scenario a leaves nodes without VMs: %s" % nodes
    node = free[-1]
    upgrade = tmp_path / "upgrade-node.yml"
    upgrade.write_text(json.dumps([{"name": "the upgrade", "ansible.builtin.debug": {
        "msg": "upgrading {{ node_maintenance_node }}"}}]))
    job = launch(credential, str(tmp_path / "job"), "upgrade",
                 {"rolling_upgrade_nodes": " %s " % node, "rolling_upgrade_tasks": str(upgrade),
                  "rolling_upgrade_preflight": "true", "rolling_upgrade_health_timeout": "60",
                  "rolling_upgrade_health_interval": "1"},
                 "upgrade")
    assert (job.status, job.rc) == ("successful", 0), job
    data = job.artifact_data
    assert sorted(data) == ["node_maintenance_results", "rolling_upgrade_nodes", "rolling_upgrade_waves"], data
    assert data["rolling_upgrade_waves"] == [[node]], data
    assert [(n["node"], n["outcome"], n["batches"], n["vms"]) for n in data["rolling_upgrade_nodes"]] == \
        [(node, "upgraded", 0, 0)], data
    assert list(data["node_maintenance_results"]) == [node], data
    assert data["node_maintenance_results"][node]["outcome"] == "succeeded", data
    assert "upgrading %s" % node in job.stdout, job
    assert not lab.node(node)["spec"].get("unschedulable"), node
    lab.assert_restored(base, [NS])


def test_reaper_with_nothing_expired(lab, base, credential, tmp_path):
    job = launch(credential, str(tmp_path), "reaper",
                 {"reaper_wait": "false", "reaper_wait_timeout": "60", "reaper_force": "false"}, "reaper")
    assert (job.status, job.rc) == ("successful", 0), job
    assert job.artifact_data == {"reaper_released": [], "reaper_deferred": [], "reaper_held_at_usage": [], "reaper_overuse": []}, job.artifact_data
    lab.assert_restored(base, [NS])


def test_a_token_without_the_bindings_is_refused(lab, credential, tmp_path):
    """The jobs above authenticate with the credential and nothing else: the same job with the token of a
    ServiceAccount that install.yml did not bind fails on the API server's refusal, naming that identity."""
    lab.rest.create("/api/v1/namespaces/%s/serviceaccounts" % SA_NAMESPACE, {"metadata": {"name": "unbound"}})
    token = lab.rest.create("/api/v1/namespaces/%s/serviceaccounts/unbound/token" % SA_NAMESPACE, {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600}})["status"]["token"]
    job = launch(dict(credential, K8S_AUTH_API_KEY=token), str(tmp_path), "reaper", {}, "reaper-unbound")
    assert (job.status, job.rc) == ("failed", 2), job
    assert "system:serviceaccount:%s:unbound" % SA_NAMESPACE in job.stdout, job
    assert job.artifact_data == {}, job.artifact_data
