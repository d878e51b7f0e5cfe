# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Always on (issue 28): a real ansible-rulebook runs kvquota.maintenance.protect_migrations with the source
kvquota.maintenance.migrations against the lab, as the lab's least-privilege user; nobody runs a playbook.

An administrator drains a node with kubectl (KubeVirt v1.7.4 with MigrationPriorityQueue: every evacuation
migration at once) whose 10 VMs sit in 3 namespaces with quotas tightened to exactly what their VMs use. The
rulebook's window (maintenance_window, until idle) reserves just in time: every migration completes, none stays
refused by quota while KubeVirt has room for it longer than the source's latency plus one window start plus one
poll, no namespace is expanded beyond its in-flight need longer than one poll plus the quota controller's lag,
every quota ends at its base byte for byte, no ledger is left. Then a second drain, of the node the first one
filled, is served by the same rulebook process; the kube-apiserver restarts (down 20 s) and the source reconnects;
a workload-updater round after a KubeVirt version bump is served the same way.

The rulebook runs from the venv of `make venv-eda` (KVQ_EDA_VENV: ansible-rulebook 1.3, ansible-core of the
newest end, Java 17), with this checkout's collection and the newest venv's kubernetes.core on its collections
path.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import secrets
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

import modlab as M
from kvqlab import aap, emulator, scenarios, tenants
from kvqlab.emulator.rest import Rest
from kvqlab.faults import Faults
from test_follow_lab import kubectl_drain, scenario, tighten
from test_roles_lab import collections_path
from test_window_lab import QUOTA_CONTROLLER_LAG, WindowSampler, assert_window_left_nothing

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

EDA_VENV = os.environ.get("KVQ_EDA_VENV", os.path.expanduser("~/.cache/kvquota/venvs/eda-1.3"))
# what the rulebook's window is given (--vars): as in test_window_lab, so that the same bounds hold
POLL, SETTLE, IDLE = 1, 5, 10
# from the first refusal to the window's first look: the source's watch latency, ansible-rulebook matching the
# event and ansible-playbook starting (its interpreter, the collection, the first reads)
WINDOW_START = 25
# the source_ready of the windows' ruleset (the reaper's ruleset has a source of its own, watching the ledgers)
WINDOWS_READY = "watching migrations, VMIs, nodes and the ledgers"


def eda_env(lab):
    """The environment of ansible-rulebook and what it runs: the EDA venv first on PATH, this checkout's collection
    and the kubernetes.core of the playbook venv (make roles-tests) or the one installed beside the system's
    ansible, the lab's least-privilege user."""
    env = dict(os.environ)
    env.update({
        "PATH": os.path.join(EDA_VENV, "bin") + os.pathsep + env["PATH"],
        "ANSIBLE_COLLECTIONS_PATH": collections_path(),
        "K8S_AUTH_KUBECONFIG": str(lab.user_kubeconfig),
        "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "PYTHONUNBUFFERED": "1",
        "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
    })
    env.pop("KVQ_ANSIBLE_VENV_PLAYBOOKS", None)
    return env


class Rulebook(object):
    """ansible-rulebook -r kvquota.maintenance.protect_migrations in the background; its output in a file."""

    def __init__(self, lab, tmp_path, rulebook="kvquota.maintenance.protect_migrations", extra_args=()):
        if not os.path.exists(os.path.join(EDA_VENV, "bin", "ansible-rulebook")):
            pytest.fail("no ansible-rulebook in %s: make venv-eda (or set KVQ_EDA_VENV)" % EDA_VENV)
        inventory = tmp_path / "inventory.yml"
        inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                             "      ansible_python_interpreter: %s\n" % os.path.join(EDA_VENV, "bin", "python"))
        variables = tmp_path / "vars.yml"
        variables.write_text("kvquota_window_idle_seconds: %d\nkvquota_window_deadline_seconds: 900\n"
                             "kvquota_window_poll_interval: %d\nkvquota_window_top_up_settle_seconds: %d\n"
                             % (IDLE, POLL, SETTLE))
        env = eda_env(lab)
        self.output = tempfile.NamedTemporaryFile(prefix="kvq-rulebook-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [os.path.join(EDA_VENV, "bin", "ansible-rulebook"), "-r", rulebook,
             "-i", str(inventory), "--vars", str(variables), "--env-vars", "K8S_AUTH_KUBECONFIG", "--print-events"]
            + list(extra_args), stdout=self.output, stderr=subprocess.STDOUT, env=env, cwd=str(tmp_path))

    def text(self):
        with open(self.output.name) as fh:
            return fh.read()

    def wait_for(self, fragment, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if fragment in self.text():
                return
            assert self.proc.poll() is None, "ansible-rulebook ended (rc %s):\n%s" % (
                self.proc.returncode, self.text()[-6000:])
            time.sleep(0.5)
        raise AssertionError("no %s within %ss:\n%s" % (what, timeout, self.text()[-6000:]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def one_namespace(lab, counts):
    """(scenario, [namespace]) of VMs in one namespace on KubeVirt v1.7.4 with the priority queue, applied."""
    sc, namespaces = scenario(secrets.token_hex(2), counts, version="1.7.4", gates=("MigrationPriorityQueue",))
    scenarios.apply(lab, sc, timeout=180)
    return sc, namespaces


def drain_served(lab, r, node, namespaces, base, units, rulebook, label):
    """kubectl drain node beside the rulebook: every migration succeeds and every quota is back at its base;
    the figures printed."""
    sampler = WindowSampler(r, namespaces, base, units)
    sampler.start()
    try:
        started = time.monotonic()
        code, out = kubectl_drain(lab, node, timeout=400)
        drained = time.monotonic() - started
        assert code == 0, out + rulebook.text()[-6000:]
        assert "Eviction triggered evacuation of VMI" in out, out
        lab.kubectl("uncordon", node)
        for ns in namespaces:
            M.wait(lambda ns=ns: M.quota(r, ns, "q")["spec"]["hard"] == base[ns], 120,
                   "quota %s at its base (%s)" % (ns, label))
        M.wait(lambda: not [k for k in M.ledgers(r) if k.split("/")[0] in namespaces], 60, "no ledger left")
    finally:
        sampler.stopping.set()
        sampler.join()
    print("%s: drain %.0fs; longest quota stall with room to run %.1fs (bound %ds); longest expansion beyond "
          "in-flight need %s (bound %ds); peak expansion per namespace (VMs) %s; %d samples"
          % (label, drained, sampler.longest_stall, WINDOW_START + POLL + SETTLE,
             dict((ns, round(s, 1)) for ns, s in sampler.longest_over.items()), POLL + QUOTA_CONTROLLER_LAG,
             dict((ns, float(v)) for ns, v in sampler.peak_extra.items()), sampler.samples))
    assert max(sampler.peak_extra.values()) > 0, "no reservation was ever seen"
    assert sampler.longest_stall <= WINDOW_START + POLL + SETTLE, sampler.longest_stall
    assert max(sampler.longest_over.values()) <= POLL + QUOTA_CONTROLLER_LAG, sampler.longest_over
    assert_window_left_nothing(r, namespaces, base)
    return drained


def test_the_rulebook_serves_two_drains_a_restart_and_an_updater_round_with_nobody_running_a_playbook(
        lab, emu, r, tmp_path):
    tag = secrets.token_hex(2)
    counts = (4, 3, 3)
    sc, namespaces = scenario(tag, counts, version="1.7.4", gates=("MigrationPriorityQueue",))
    scenarios.apply(lab, sc, timeout=180)
    source = "fl-%s-src" % tag
    rulebook = None
    try:
        base, units = tighten(r, namespaces, counts)
        rulebook = Rulebook(lab, tmp_path)
        rulebook.wait_for(WINDOWS_READY, 90, "the windows' source_ready event")
        drain_served(lab, r, source, namespaces, base, units, rulebook, "first drain")
        migrations = [m for ns in namespaces
                      for m in r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]]
        assert len(migrations) == sum(counts) and all(M.phase(m) == "Succeeded" for m in migrations)

        # the second drain: the node that took most of the VMs, served by the same rulebook process
        nodes = {}
        for ns in namespaces:
            for vmi in r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"]:
                nodes[vmi["status"]["nodeName"]] = nodes.get(vmi["status"]["nodeName"], 0) + 1
        second = sorted(nodes, key=lambda n: (-nodes[n], n))[0]
        assert second != source
        drain_served(lab, r, second, namespaces, base, units, rulebook, "second drain (%s)" % second)
        assert rulebook.proc.poll() is None, rulebook.text()[-6000:]
        # the window the rulebook started ends once the cluster is idle, and says so; the rulebook goes on
        rulebook.wait_for("maintenance window: succeeded", IDLE + 90, "the window's summary")

        # the control plane restarts (kube-apiserver down 20 s): the source's watches reconnect and list again
        outage = Faults(lab, log=print).restart("kube-apiserver", down=20)
        print("kube-apiserver restarted: %s" % outage)
        assert rulebook.proc.poll() is None, rulebook.text()[-6000:]

        # a workload-updater round after a KubeVirt version bump, served by the same rulebook process
        emulator.set_knobs(lab, workload_update_period_seconds=4)
        windows_before = rulebook.text().count("maintenance window: succeeded")
        old = r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % namespaces[0])["items"][0]
        new_image = old["status"]["launcherContainerImageVersion"].rsplit(":", 1)[0] + ":v1.7.4-" + tag
        started = time.monotonic()
        emulator.roll_out_kubevirt(lab, "v1.7.4-" + tag)

        def updated():
            vmis = [v for ns in namespaces for v in r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"]]
            return len(vmis) == sum(counts) and all(v["status"].get("launcherContainerImageVersion") == new_image
                                                    and "kubevirt.io/outdatedLauncherImage" not in
                                                    v["metadata"].get("labels", {}) for v in vmis)
        M.wait(updated, 300, "every VMI on the new launcher", interval=1)
        print("workload-updater round: %.0fs" % (time.monotonic() - started))
        for ns in namespaces:
            M.wait(lambda ns=ns: M.quota(r, ns, "q")["spec"]["hard"] == base[ns], 120, "quota %s at its base" % ns)
        updates = [m for ns in namespaces
                   for m in r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]
                   if m["metadata"]["name"].startswith("kubevirt-workload-update-")]
        phases = [(m["metadata"]["name"], M.phase(m)) for m in updates]
        assert updates and all(phase == "Succeeded" for _name, phase in phases), phases
        M.wait(lambda: rulebook.text().count("maintenance window: succeeded") > windows_before, IDLE + 90,
               "the updater round's window to end")
        assert_window_left_nothing(r, namespaces, base)
        log = rulebook.text()
        print("\n".join(line for line in log.splitlines() if "maintenance window:" in line or "PLAY [" in line))
        assert "QueueFull" not in log and "Traceback" not in log, log[-6000:]
        assert rulebook.proc.poll() is None, log[-6000:]
    finally:
        if rulebook is not None:
            rulebook.stop()
        for node in (source,):
            lab.kubectl("uncordon", node, check=False)
        emulator.set_knobs(lab, workload_update_period_seconds=None)
        M.rest(lab).patch(M.KV + "/namespaces/kubevirt/kubevirts/kubevirt",
                          {"spec": {"imageTag": None, "workloadUpdateStrategy": None}})
        scenarios.delete(lab, sc)


def test_a_tenants_storm_of_migrations_starts_windows_no_faster_than_the_throttle(lab, emu, r, tmp_path):
    """Item 3: a tenant (edit in its namespace) creates migrations of its own VMs as fast as it can for 60 s, in a
    namespace whose quota is at its use (each refused by quota until a window reserves), and marks and unmarks its
    VMIs as running an outdated launcher (the workload updater's label) as fast. The source announces each refused
    migration and each marking at most once, and none while a window runs (that window serves them; one more
    window is asked for after it): the rulebook gets a small part of the markings, starts a window at most once per
    30 s, and none is queued behind a running one; every window ends; every quota ends at its base, no ledger is
    left, the rulebook runs on."""
    counts = (3,)
    sc, namespaces = one_namespace(lab, counts)
    (ns,) = namespaces
    rulebook = None
    try:
        base, _units = tighten(r, namespaces, counts)
        tenant = Rest(tenants.make(lab, ns, roles=("edit",))["edit"].api_client())
        rulebook = Rulebook(lab, tmp_path)
        rulebook.wait_for(WINDOWS_READY, 90, "the windows' source_ready event")
        names = sorted(v["metadata"]["name"] for v in r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"])
        started, created, refused, marked = time.monotonic(), 0, 0, 0
        storm = 60
        while time.monotonic() - started < storm:
            # the workload updater's label, on and off: each marking is an updater_round the source may announce
            for vm in names:
                value = None if marked % 2 else "true"
                tenant.patch(M.KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, vm),
                             {"metadata": {"labels": {"kubevirt.io/outdatedLauncherImage": value}}})
            marked += 1
            # KubeVirt (v1.7+) admits one unfinished migration per VMI; the lab's virt-api does not, so the tenant
            # here creates the next migration of a VM as soon as its last one is final, as fast as KubeVirt lets it
            busy = set(m["spec"]["vmiName"] for m in r.get(
                M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]
                if M.phase(m) not in ("Succeeded", "Failed"))
            for vm in names:
                if vm in busy:
                    continue
                try:
                    tenant.create(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns, {
                        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                        "metadata": {"generateName": "storm-"}, "spec": {"vmiName": vm}})
                    created += 1
                except ApiException:
                    refused += 1
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        print("storm over: %d created, %d refused by admission in %.0fs" % (created, refused, elapsed))
        try:
            M.wait(lambda: M.quota(r, ns, "q")["spec"]["hard"] == base[ns], 180, "quota %s at its base" % ns)
        except AssertionError:
            for m in r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]:
                if M.phase(m) not in ("Succeeded", "Failed"):
                    print("not final:", m["metadata"]["name"], M.phase(m), (m.get("status") or {}).get("conditions"))
            print("ledgers:", M.ledgers(r))
            print("quota:", M.quota(r, ns, "q").get("spec"), M.quota(r, ns, "q").get("status"))
            print(rulebook.text()[-8000:])
            raise
        M.wait(lambda: not [k for k in M.ledgers(r) if k.split("/")[0] == ns], 120, "no ledger left")
        try:
            quiet_since = [time.monotonic(), rulebook.text().count("PLAY [Maintenance window")]

            def quiet():
                # every window started ended, and none more started for IDLE + 35 s (a window asked for after one
                # that held events back finds the cluster idle)
                text = rulebook.text()
                count = text.count("PLAY [Maintenance window")
                if count != quiet_since[1] or count != text.count("maintenance window: "):
                    quiet_since[:] = [time.monotonic(), count]
                return time.monotonic() - quiet_since[0] >= IDLE + 35
            M.wait(quiet, IDLE + 240, "every window started to end, and none more to start")
        except AssertionError:
            for m in r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]:
                if M.phase(m) not in ("Succeeded", "Failed"):
                    print("not final:", m["metadata"]["name"], m["spec"].get("vmiName"), M.phase(m), m.get("status"))
            for v in r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"]:
                print("vmi:", v["metadata"]["name"], v["metadata"].get("labels"), (v.get("status") or {}).get(
                    "evacuationNodeName"), (v.get("status") or {}).get("nodeName"))
            raise
        log = rulebook.text()
        windows = log.count("PLAY [Maintenance window")
        announced = log.count("'type': 'migration_refused'")
        rounds = log.count("'type': 'updater_round'")
        vmims = r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]
        rejected_ever = [m for m in vmims if m["metadata"]["name"].startswith("storm-")]
        print("storm: %d migrations created by the tenant in %.0fs (%d refused by admission), %d refusal events "
              "announced; %d VMI markings, %d updater rounds announced; %d windows started"
              % (created, elapsed, refused, announced, marked * len(names), rounds, windows))
        assert created > 3 and marked > 10
        assert 1 <= rounds <= (marked + 1) // 2 * len(names), (rounds, marked)
        # at most one window per 30 s of the storm and of its aftermath, however many events
        assert 1 <= windows <= int((time.monotonic() - started) // 30) + 1, (windows, log[-6000:])
        # while a window runs, the source holds its window events back (that window serves them) and asks for one
        # more window after it: the rulebook gets only what comes between windows, 27 and 117 of about 770
        # markings in two runs (before, it got every marking on, 384 of 768, and queued a window behind the running
        # one per throttle period)
        assert rounds <= marked * len(names) // 4, (rounds, marked * len(names))
        assert announced <= len(rejected_ever), (announced, len(rejected_ever))
        assert rulebook.proc.poll() is None and "Traceback" not in log, log[-6000:]
    finally:
        if rulebook is not None:
            rulebook.stop()
        scenarios.delete(lab, sc)


def test_a_tenants_forged_marks_keep_no_window_open(lab, emu, r, tmp_path):
    """Item 3, found by an attack: a tenant writes its VMIs' status and labels (on KubeVirt the VMI has no status
    subresource; here the tenant is given virtualmachineinstances/status to stand for that). For 60 s it marks one
    VMI for evacuation from nodes that are not cordoned (a new one every 5 s) and labels the other as running an
    outdated launcher. Each window the rulebook starts ends once idle (the marks count only while the node is
    cordoned, the label only while the KubeVirt CR counts outdated workloads), none runs to its deadline, nothing
    is reserved; a mark that is no node name is not even announced."""
    counts = (2,)
    sc, namespaces = one_namespace(lab, counts)
    (ns,) = namespaces
    rulebook = None
    try:
        tighten(r, namespaces, counts)
        tenant = Rest(tenants.make(lab, ns, roles=("edit",))["edit"].api_client())
        r.create("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles" % ns, {
            "metadata": {"name": "vmi-status"}, "rules": [{"apiGroups": ["kubevirt.io"], "verbs": ["patch"],
                                                          "resources": ["virtualmachineinstances/status"]}]})
        r.create("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings" % ns, {
            "metadata": {"name": "vmi-status"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                            "name": "vmi-status"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant-edit", "namespace": ns}]})
        vmis = r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"]
        vms = sorted(v["metadata"]["name"] for v in vmis)
        # nodes the VMIs do not run on (a mark for its own node makes KubeVirt evacuate it, as it should)
        nodes = sorted(n["metadata"]["name"] for n in r.get("/api/v1/nodes")["items"]
                       if not (n.get("spec") or {}).get("unschedulable")
                       and n["metadata"]["name"] not in set(v["status"].get("nodeName") for v in vmis))
        assert nodes
        rulebook = Rulebook(lab, tmp_path)
        rulebook.wait_for(WINDOWS_READY, 90, "the windows' source_ready event")
        started, marks = time.monotonic(), 0
        while time.monotonic() - started < 60:
            node = "{{ 7*7 }}" if marks % 4 == 3 else nodes[marks % len(nodes)]
            M.wait(lambda node=node: _patched(tenant, M.KV + "/namespaces/%s/virtualmachineinstances/%s/status"
                                              % (ns, vms[0]), {"status": {"evacuationNodeName": node}}), 10,
                   "the tenant's mark")
            tenant.patch(M.KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, vms[1]),
                         {"metadata": {"labels": {"kubevirt.io/outdatedLauncherImage": "x-%d" % marks}}})
            marks += 1
            time.sleep(5)
        M.wait(lambda: rulebook.text().count("PLAY [Maintenance window") ==
               rulebook.text().count("maintenance window: "), IDLE + 120, "every window started to end")
        log = rulebook.text()
        windows = log.count("PLAY [Maintenance window")
        print("forged marks: %d in %.0fs; %d evacuation events announced, %d windows started, %d ended idle"
              % (marks, time.monotonic() - started, log.count("'type': 'evacuation_started'"), windows,
                 log.count("maintenance window: succeeded")))
        assert windows >= 1 and log.count("maintenance window: succeeded") == windows, log[-6000:]
        assert "deadline_seconds" not in log and "7*7" not in log     # no node name: not announced
        assert not [k for k in M.ledgers(r) if k.split("/")[0] == ns]
        assert rulebook.proc.poll() is None and "Traceback" not in log, log[-6000:]
    finally:
        if rulebook is not None:
            rulebook.stop()
        scenarios.delete(lab, sc)


def _patched(rest, path, body):
    try:
        rest.patch(path, body)
        return True
    except ApiException as err:    # the VMI's status written by the emulator meanwhile: once more
        if err.status != 409:
            raise
        return False


def test_the_controller_rulebook_serves_a_drain_through_aap_job_templates(lab, emu, r, tmp_path):
    """Item 2's run_job_template: kvquota.maintenance.protect_migrations_controller with an automation controller
    (kvqlab.aap, the part of AAP's API that ansible-rulebook's run_job_template uses, running each job's playbook
    with ansible-playbook as a job would). A kubectl drain's refusals launch the job template "kvquota maintenance
    window" with the rulebook's extra variables; the job reserves just in time, every migration completes, every
    quota ends at its base, the job ends successful and the rulebook runs on."""
    tag = secrets.token_hex(2)
    counts = (3, 2)
    sc, namespaces = scenario(tag, counts, version="1.7.4", gates=("MigrationPriorityQueue",))
    scenarios.apply(lab, sc, timeout=180)
    controller = rulebook = None
    try:
        base, units = tighten(r, namespaces, counts)
        playbooks = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                 "playbooks")
        controller = aap.Controller({"kvquota maintenance window": os.path.join(playbooks, "maintenance_window.yml"),
                                     "kvquota reaper": os.path.join(playbooks, "reaper.yml")},
                                    os.path.join(EDA_VENV, "bin", "ansible-playbook"), eda_env(lab),
                                    str(tmp_path)).start()
        rulebook = Rulebook(lab, tmp_path, "kvquota.maintenance.protect_migrations_controller",
                            ["--controller-url", controller.url, "--controller-token", controller.token])
        rulebook.wait_for(WINDOWS_READY, 90, "the windows' source_ready event")
        drain_served(lab, r, "fl-%s-src" % tag, namespaces, base, units, rulebook, "drain through AAP")
        M.wait(lambda: controller.jobs and all(job.status in ("successful", "failed") for job in controller.jobs),
               IDLE + 90, "the window's job to end")
        windows = [job for job in controller.jobs if job.template == "kvquota maintenance window"]
        print("jobs: %s" % [(job.number, job.template, job.status) for job in controller.jobs])
        assert windows and all(job.status == "successful" for job in windows), controller.text()[-6000:]
        assert windows[0].extra_vars["maintenance_window_until"] == "idle"
        assert windows[0].extra_vars["maintenance_window_reservation_prefix"] == "eda"
        assert str(windows[0].extra_vars["maintenance_window_idle_seconds"]) == str(IDLE)
        assert "maintenance window: succeeded" in windows[0].output, windows[0].output[-3000:]
        assert ("POST", "/api/v2/job_templates/1/launch/") in controller.requests or \
            ("POST", "/api/v2/job_templates/2/launch/") in controller.requests
        assert rulebook.proc.poll() is None and "Traceback" not in rulebook.text(), rulebook.text()[-6000:]
    finally:
        if rulebook is not None:
            rulebook.stop()
        if controller is not None:
            controller.stop()
        scenarios.delete(lab, sc)


def _allowed(r, user, verb, resource, group="", namespace=None):
    attributes = {"verb": verb, "resource": resource, "group": group}
    if namespace:
        attributes["namespace"] = namespace
    review = r.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "resourceAttributes": attributes}})
    return bool((review.get("status") or {}).get("allowed"))


def test_the_source_needs_only_its_own_read_only_roles(lab, emu, r):
    """Least privilege: the source runs as a ServiceAccount bound to kvquota-eda and kvquota-eda-ledgers alone
    (roles/install/files, as the install playbook binds them with kvquota_bind_eda): its four watches list, it says
    so (source_ready), and a cordon comes through as an event; that identity can write nothing."""
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops.event_source import EventSource
    ns = "eda-rbac-" + secrets.token_hex(2)
    sa = "eda-source"
    user = "system:serviceaccount:%s:%s" % (ns, sa)
    r.create("/api/v1/namespaces", {"metadata": {"name": ns, "labels": {"kvqlab/test": "true"}}})
    r.create("/api/v1/namespaces/%s/serviceaccounts" % ns, {"metadata": {"name": sa}})
    subject = [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    r.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": ns}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kvquota-eda"}})
    r.create("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings" % M.OPERATOR_NS, {
        "metadata": {"name": ns}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kvquota-eda-ledgers"}})
    node = "node-3"
    emitted, source = [], None
    try:
        M.wait(lambda: _allowed(r, user, "watch", "virtualmachineinstances", "kubevirt.io")
               and _allowed(r, user, "watch", "configmaps", namespace=M.OPERATOR_NS), 30, "the bindings granted")
        for verb, resource, group, where in (("create", "virtualmachineinstancemigrations", "kubevirt.io", "default"),
                                             ("update", "configmaps", "", M.OPERATOR_NS), ("list", "pods", "", None),
                                             ("update", "resourcequotas", "", "default"), ("get", "secrets", "", None)):
            assert not _allowed(r, user, verb, resource, group, where), (verb, resource)
        path = Path(lab.run_dir) / ("%s.kubeconfig" % ns)
        tenants._kubeconfig(lab, user, tenants.token_for(lab, ns, sa), path)
        source = EventSource(M.connect({"kubeconfig": str(path)}), emitted.append, tick_seconds=1)
        thread = threading.Thread(target=source.run, daemon=True)
        thread.start()
        M.wait(lambda: [e for e in emitted if e["kvquota"]["type"] == "source_ready"] or source.errors, 60,
               "source_ready")
        assert not source.errors, source.errors
        lab.kubectl("cordon", node)
        M.wait(lambda: [e for e in emitted if e["kvquota"]["type"] == "node_cordoned"
                        and e["kvquota"]["subject"] == node], 30, "the cordon as an event")
        assert not source.errors, source.errors
        print("source as %s: %d events, %s" % (user, len(emitted), sorted(set(e["kvquota"]["type"] for e in emitted))))
    finally:
        lab.kubectl("uncordon", node, check=False)
        if source is not None:
            source.stop()
        r.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + ns)
        r.delete("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings/%s" % (M.OPERATOR_NS, ns))
        M.delete_namespace(r, ns)
