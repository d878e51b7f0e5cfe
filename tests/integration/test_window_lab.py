# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The maintenance_window role beside a window someone else drives (issue 12 items 3 and 4), through
playbooks/maintenance_window.yml as the lab's least-privilege user, on the newest ansible-core of the range.

- A real `kubectl drain` of a node with 10 VMs in 3 namespaces whose quotas are tightened to exactly what their
  VMs use, on both sides of KubeVirt v1.7: v1.6.6 (the evacuation controller creates migrations per node up to
  the parallel limits, and counts the ones quota refuses as running) and v1.7.4 with MigrationPriorityQueue (it
  creates every one at once, each Pending until admitted). The role runs until the node is schedulable again.
- A workload-updater round after a KubeVirt version bump (the lab's updater: outdatedLauncherImage labels,
  rounds of parallelMigrationsPerCluster minus the running ones), the role running until the scope is idle.

A sampler reads, every 0.25 s and in this order, each namespace's migrations and launcher pods, then its quota.
From these it measures:
- the in-flight need of a namespace: its VMIs with an unfinished migration, or with a source pod not gone yet;
- the expansion: spec.hard minus the base, in VMs' worth.
The drain cases assert:
- no namespace is expanded beyond its in-flight need for longer than one poll plus the quota controller's lag (the
  role releases a group at its first poll after the source pods are gone and status.used stopped counting them);
- no migration stays refused by quota, while KubeVirt has room to run it, for longer than one poll plus the
  settle time;
- every migration succeeded, every quota is back at its base byte for byte, and no ledger is left.
The stall and expansion figures are printed for the closing note.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import secrets
import threading
import time
import types
from fractions import Fraction

import pytest

import modlab as M
from kvqlab import emulator, scenarios
from test_follow_lab import PER_NODE, kubectl_drain, quota_numbers, scenario, tighten
from test_roles_lab import finish, playbook

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity

pytestmark = pytest.mark.roles   # make roles-tests (conftest.py: every lab test has one such marker)

POLL = 1
SETTLE = 5
# A reservation is given back once its source pods are gone AND status.used no longer counts them (never lower a
# quota below what admission still counts: reservations.release), so the quota controller's lag comes on top of
# the poll before an expansion ends.
QUOTA_CONTROLLER_LAG = 4
RUNNING = ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running")
FINAL = ("Succeeded", "Failed")


class WindowSampler(threading.Thread):
    """Per namespace and sample: in-flight need and expansion (VMs' worth of pods), the longest time a namespace
    was expanded beyond its need, and the longest time a refused migration waited while fewer than
    PER_NODE migrations ran (KubeVirt had room for it)."""

    def __init__(self, r, namespaces, base, units):
        threading.Thread.__init__(self, daemon=True)
        self.r, self.namespaces, self.base, self.units = r, namespaces, base, units
        self.stopping = threading.Event()
        self.samples = 0
        self.over_since = dict((ns, None) for ns in namespaces)
        self.longest_over = dict((ns, 0.0) for ns in namespaces)
        self.peak_extra = dict((ns, Fraction(0)) for ns in namespaces)
        self.stalled_since = None
        self.longest_stall = 0.0

    def _need(self, ns):
        vmims = self.r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]
        names = dict((v["metadata"]["uid"], v["metadata"]["name"])
                     for v in self.r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"])
        busy = set(m["spec"]["vmiName"] for m in vmims if M.phase(m) not in FINAL)
        live = {}
        for pod in M.launcher_pods(self.r, ns):
            if (pod.get("status") or {}).get("phase") not in FINAL:
                uid = pod["metadata"].get("labels", {}).get("kubevirt.io/created-by")
                live[uid] = live.get(uid, 0) + 1
        busy |= set(names.get(uid, uid) for uid, count in live.items() if count > 1)
        return len(busy), vmims

    def run(self):
        while not self.stopping.is_set():
            now = time.monotonic()
            running, refused = 0, 0
            for ns in self.namespaces:
                need, vmims = self._need(ns)
                running += sum(1 for m in vmims if M.phase(m) in RUNNING)
                refused += sum(1 for m in vmims if M.phase(m) not in FINAL and M.rejected(m))
                hard, _used = quota_numbers(self.r, ns)
                extra = Fraction(hard["pods"] - parse_quantity(self.base[ns]["pods"])) / self.units[ns]["pods"]
                self.peak_extra[ns] = max(self.peak_extra[ns], extra)
                if extra > need:
                    self.over_since[ns] = self.over_since[ns] or now
                    self.longest_over[ns] = max(self.longest_over[ns], now - self.over_since[ns])
                else:
                    self.over_since[ns] = None
            if refused and running < PER_NODE:
                self.stalled_since = self.stalled_since or now
                self.longest_stall = max(self.longest_stall, now - self.stalled_since)
            else:
                self.stalled_since = None
            self.samples += 1
            time.sleep(0.25)


def window(lab, tmp_path, extra):
    """Start playbooks/maintenance_window.yml in the background (the lab's least-privilege user)."""
    holder = types.SimpleNamespace(lab=lab, run_dir=tmp_path)
    return playbook(holder, "maintenance_window", dict({
        "maintenance_window_poll_interval": POLL, "maintenance_window_top_up_settle_seconds": SETTLE,
        "maintenance_window_reservation_ttl": "30m"}, **extra), background=True)


def summary(run):
    """The role's summary line ('maintenance window: <outcome>, ...')."""
    lines = [line.strip().strip('",') for line in run.stdout.splitlines() if '"maintenance window: ' in line]
    assert lines, run.stdout[-4000:]
    return lines[-1]


def assert_window_left_nothing(r, namespaces, base):
    for ns in namespaces:
        M.wait(lambda ns=ns: M.quota(r, ns, "q")["spec"]["hard"] == base[ns], 30, "quota %s at its base" % ns)
    assert [key for key in M.ledgers(r) if key.split("/")[0] in namespaces] == []


VERSIONS = [("1.6.6", ()), ("1.7.4", ("MigrationPriorityQueue",))]


@pytest.mark.parametrize("version,gates", VERSIONS, ids=["v1.6.6-per-node", "v1.7.4-all-at-once"])
def test_window_beside_kubectl_drain(lab, emu, r, tmp_path, version, gates):
    tag = secrets.token_hex(2)
    counts = (4, 3, 3)
    sc, namespaces = scenario(tag, counts, version=version, gates=gates)
    scenarios.apply(lab, sc, timeout=180)
    source = "fl-%s-src" % tag
    try:
        base, units = tighten(r, namespaces, counts)
        sampler = WindowSampler(r, namespaces, base, units)
        proc = window(lab, tmp_path, {"maintenance_window_nodes": [source], "maintenance_window_until": "nodes_schedulable",
                                      "maintenance_window_deadline_seconds": 500})
        sampler.start()
        try:
            time.sleep(8)        # the role is up and watching before the drain evicts anything
            assert proc.poll() is None, "the role ended before the drain: %s" % finish(proc).stdout[-4000:]
            started = time.monotonic()
            code, out = kubectl_drain(lab, source, timeout=400)
            drained = time.monotonic() - started
            assert code == 0, out
            assert "Eviction triggered evacuation of VMI" in out, out
            lab.kubectl("uncordon", source)
            run = finish(proc, timeout=300)
        finally:
            sampler.stopping.set()
            sampler.join()
            if proc.poll() is None:
                proc.kill()
        print(run.stdout[-5000:])
        assert run.rc == 0, run
        line = summary(run)
        assert line.startswith("maintenance window: succeeded, ") and "ended: nodes %s schedulable" % source in line, line
        migrations = [m for ns in namespaces for m in r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]]
        assert len(migrations) == sum(counts) and all(M.phase(m) == "Succeeded" for m in migrations)
        assert all(m["metadata"]["name"].startswith("kubevirt-evacuation-") for m in migrations)
        print("kubevirt %s: drain %.0fs; longest quota stall with room to run %.1fs (bound %ds); longest expansion "
              "beyond in-flight need %s (bound %ds); peak expansion per namespace (VMs) %s; %d samples"
              % (version, drained, sampler.longest_stall, POLL + SETTLE,
                 dict((ns, round(s, 1)) for ns, s in sampler.longest_over.items()), POLL + QUOTA_CONTROLLER_LAG,
                 dict((ns, float(v)) for ns, v in sampler.peak_extra.items()), sampler.samples))
        assert sampler.samples > 20
        assert max(sampler.peak_extra.values()) > 0, "no reservation was ever seen"
        assert sampler.longest_stall <= POLL + SETTLE, sampler.longest_stall
        assert max(sampler.longest_over.values()) <= POLL + QUOTA_CONTROLLER_LAG, sampler.longest_over
        assert_window_left_nothing(r, namespaces, base)
    finally:
        lab.kubectl("uncordon", source, check=False)
        scenarios.delete(lab, sc)


def test_window_through_a_workload_updater_round(lab, emu, r, tmp_path):
    """A KubeVirt version bump: the updater migrates every VMI to the new launcher in rounds of
    parallelMigrationsPerCluster minus the running ones; without reservations the tight namespaces' migrations
    stay Pending for ever (kubevirt issue 16353)."""
    tag = secrets.token_hex(2)
    counts = (3, 2, 2)
    sc, namespaces = scenario(tag, counts, version="1.6.6", gates=())
    scenarios.apply(lab, sc, timeout=180)
    emulator.set_knobs(lab, workload_update_period_seconds=4)
    try:
        base, _units = tighten(r, namespaces, counts)
        proc = window(lab, tmp_path, {"maintenance_window_namespaces": ",".join(namespaces),   # as an AWX survey
                                      "maintenance_window_until": "idle", "maintenance_window_idle_seconds": 20,
                                      "maintenance_window_deadline_seconds": 400})
        try:
            time.sleep(3)        # the role is up (well within its idle time) before the update starts
            old = r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % namespaces[0])["items"][0]
            old_image = old["status"]["launcherContainerImageVersion"]
            emulator.roll_out_kubevirt(lab, "v1.6.6-" + tag)
            new_image = old_image.rsplit(":", 1)[0] + ":v1.6.6-" + tag
            run = finish(proc, timeout=480)
        finally:
            if proc.poll() is None:
                proc.kill()
        print(run.stdout[-5000:])
        assert run.rc == 0, run
        line = summary(run)
        assert line.startswith("maintenance window: succeeded, ") and "ended: idle" in line, line
        vmis = [v for ns in namespaces for v in r.get(M.KV + "/namespaces/%s/virtualmachineinstances" % ns)["items"]]
        assert len(vmis) == sum(counts)
        assert all(v["status"]["launcherContainerImageVersion"] == new_image for v in vmis)
        assert not [v for v in vmis if "kubevirt.io/outdatedLauncherImage" in v["metadata"].get("labels", {})]
        migrations = [m for ns in namespaces for m in r.get(M.KV + "/namespaces/%s/virtualmachineinstancemigrations" % ns)["items"]]
        assert migrations and all(m["metadata"]["name"].startswith("kubevirt-workload-update-") for m in migrations)
        assert all(M.phase(m) in FINAL for m in migrations)
        assert_window_left_nothing(r, namespaces, base)
    finally:
        emulator.set_knobs(lab, workload_update_period_seconds=None)
        M.rest(lab).patch(M.KV + "/namespaces/kubevirt/kubevirts/kubevirt",
                          {"spec": {"imageTag": None, "workloadUpdateStrategy": None}})
        scenarios.delete(lab, sc)
