# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Chaos campaigns against the lab: prove that nothing is left behind.

    python3 tests/chaos/chaos.py [--quick] [--campaigns interrupt,reverts,admin,races,short,failed,lingering]
                                 [--json F] [--no-doc] [--keep]

Each campaign starts a fresh lab (tests/lab: a real kube-apiserver with ResourceQuota admission, the quota
controller, the scheduler, kwok and the KubeVirt/Rancher emulator), applies a scenario, runs
playbooks/node_maintenance.yml as the least-privilege user of rbac/clusterrole.yml, injects a fault
(SIGKILL of the ansible-playbook process group, a Rancher agent restart, an administrator's edit, a
concurrent run, oversized pods, failed or stalled migrations, lingering source pods) and checks the cluster
afterwards:

- every quota's spec.hard equals its base byte for byte (and, for Rancher, the namespace annotation too),
- no ledger annotation (kvquota.maintenance/ledger) on any quota or namespace,
- no kvquota Lease left,
- every VM Running, off the maintained node, no migration unfinished,
- the node's cordon state as expected.

While a play runs, a sampler looks at the quotas every ~0.3 s and records any spec.hard below its base
(and, in the races campaign, any quota whose spec.hard differs from what its ledger says it should be).

It prints one line of figures per campaign and writes docs/reliability.md from the measured results (unless
--no-doc). --quick is the reduced version meant for `make test` (a few minutes).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import argparse
import datetime
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _load_repo_conftest():
    """The repository root's conftest.py exports KVQ_COLLECTIONS_PATH and makes the collection importable."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kvq_repo_conftest", str(REPO / "conftest.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_load_repo_conftest()
for extra in (str(REPO / "tests" / "lab"), str(REPO / "tests" / "integration")):
    if extra not in sys.path:
        sys.path.insert(0, extra)

from test_roles_lab import RoleLab, collections_path  # noqa: E402

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.resources import (  # noqa: E402
    parse_resource_list)

KV = "/apis/kubevirt.io/v1"
LEDGER = "kvquota.maintenance/ledger"
RANCHER_ANNOTATION = "field.cattle.io/resourceQuota"
FINAL = ("Succeeded", "Failed")


def _no_progress(result):
    """Default progress hook; main() replaces it to save partial results."""
    return result


PROGRESS = _no_progress

ALL_CAMPAIGNS = ("interrupt", "reverts", "admin", "races", "short", "failed", "lingering")
RUN_ROOT = Path(os.environ.get("KVQ_CHAOS_RUN_ROOT", "/tmp"))


_LIVE = []   # ansible-playbook process groups started here, killed if we are stopped


def _kill_live(*_args):
    for proc in list(_LIVE):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
    if _args:
        sys.exit(143)


def log(msg):
    sys.stderr.write("[chaos %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------------------
# the lab and the playbook runs

class Lab(object):
    """A RoleLab plus what the campaigns need: the base of every quota, state checks, a sampler."""

    def __init__(self, tag, scenario, knobs=None, keep=False):
        self.dir = Path(tempfile.mkdtemp(prefix="kvq-chaos-%s-" % tag, dir=str(RUN_ROOT)))
        self.keep = keep
        log("%s: lab in %s, scenario %s" % (tag, self.dir, scenario))
        try:
            self.r = RoleLab(self.dir, scenario, knobs=knobs)
        except BaseException:
            import kvqlab
            kvqlab.down(str(self.dir))
            raise
        self.namespaces = sorted(set(vm.get("metadata", {}).get("namespace") for vm in self.r.vmis()))
        self.base = dict((ns, self.r.hard(ns)) for ns in self.all_quota_namespaces())
        self.base_annotations = dict((ns, self.ns_annotation(ns)) for ns in self.base)
        self.runs = 0

    def all_quota_namespaces(self):
        out = set()
        for q in self.r.get("/api/v1/resourcequotas")["items"]:
            ns = q["metadata"]["namespace"]
            if not ns.startswith("kube-") and ns != "kvqlab-system":
                out.add(ns)
        return sorted(out)

    def ns_annotation(self, ns):
        return (self.r.namespace(ns)["metadata"].get("annotations") or {}).get(RANCHER_ANNOTATION)

    def stop(self):
        if self.keep:
            log("lab left running in %s" % self.dir)
            return
        try:
            self.r.stop()
        except Exception as exc:  # noqa: BLE001 - best effort
            log("stopping %s: %s" % (self.dir, exc))
        shutil.rmtree(str(self.dir), ignore_errors=True)

    # -- playbook runs ------------------------------------------------------------------------------
    def start(self, extra_vars, name="node_maintenance", env=None):
        """ansible-playbook in its own process group (so that SIGKILL takes every worker and module)."""
        self.runs += 1
        tag = "%s-%d" % (name, self.runs)
        vars_file = self.dir / ("%s.vars.json" % tag)
        vars_file.write_text(json.dumps(extra_vars))
        out_file = self.dir / ("%s.out" % tag)
        full_env = dict(os.environ)
        full_env.update({
            "ANSIBLE_COLLECTIONS_PATH": collections_path(),
            "K8S_AUTH_KUBECONFIG": str(self.r.lab.user_kubeconfig),
            "KUBECONFIG": "/nonexistent/kvq-chaos-kubeconfig",
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            "ANSIBLE_RETRY_FILES_ENABLED": "0", "PYTHONUNBUFFERED": "1",
        })
        full_env.update(env or {})
        cmd = ["ansible-playbook", str(REPO / "playbooks" / ("%s.yml" % name)), "-e", "@%s" % vars_file]
        fh = open(str(out_file), "w")
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=full_env, cwd=str(self.dir),
                                start_new_session=True)
        proc.out_file = out_file
        proc.started = time.monotonic()
        proc.cmd = " ".join(shlex.quote(c) for c in cmd)
        _LIVE.append(proc)
        fh.close()
        return proc

    @staticmethod
    def output(proc):
        try:
            return Path(proc.out_file).read_text(errors="replace")
        except OSError:
            return ""

    @staticmethod
    def kill(proc):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(60)

    def run(self, extra_vars, timeout=900, **kwargs):
        proc = self.start(extra_vars, **kwargs)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill(proc)
        return proc.returncode, self.output(proc), time.monotonic() - proc.started

    # -- reads -------------------------------------------------------------------------------------
    def vmi_nodes(self):
        return dict(("%s/%s" % (v["metadata"]["namespace"], v["metadata"]["name"]),
                     ((v.get("status") or {}).get("phase"), (v.get("status") or {}).get("nodeName")))
                    for v in self.r.vmis())

    def busiest_node(self):
        return self.r.busiest_node(self.namespaces)

    def vms_on(self, node):
        return sorted(k for k, (phase, n) in self.vmi_nodes().items() if n == node)

    def uncordon_all(self):
        for n in self.r.get("/api/v1/nodes")["items"]:
            if n["spec"].get("unschedulable"):
                self.r.rest.patch("/api/v1/nodes/%s" % n["metadata"]["name"], {"spec": {"unschedulable": False}})

    def ledgers(self):
        """[(kind, ns, name, ledger dict)] of every ledger annotation in the cluster."""
        out = []
        for q in self.r.get("/api/v1/resourcequotas")["items"]:
            ann = q["metadata"].get("annotations") or {}
            if LEDGER in ann:
                out.append(("quota", q["metadata"]["namespace"], q["metadata"]["name"], _json(ann[LEDGER])))
        for n in self.r.get("/api/v1/namespaces")["items"]:
            ann = n["metadata"].get("annotations") or {}
            if LEDGER in ann:
                out.append(("namespace", n["metadata"]["name"], n["metadata"]["name"], _json(ann[LEDGER])))
        return out

    def kvquota_leases(self):
        out = []
        for lease in self.r.get("/apis/coordination.k8s.io/v1/leases")["items"]:
            meta = lease["metadata"]
            if meta.get("namespace") == "kube-node-lease":
                continue
            labels = meta.get("labels") or {}
            if meta["name"].startswith("kvquota") or "kvquota" in json.dumps(labels):
                out.append("%s/%s (holder %s)" % (meta["namespace"], meta["name"],
                                                  (lease.get("spec") or {}).get("holderIdentity")))
        return out

    # -- the state every run must leave -------------------------------------------------------------
    def problems(self, node=None, base=None, cordoned=False, vms_off_node=True, rancher=False):
        """Everything that is not as it should be, as a list of strings (empty = clean)."""
        base = base or self.base
        out = []
        for ns, hard in sorted(base.items()):
            now = self.r.hard(ns)
            if now != hard:
                out.append("quota of %s not at base: %s != %s" % (ns, json.dumps(now, sort_keys=True),
                                                                  json.dumps(hard, sort_keys=True)))
            if rancher and self.ns_annotation(ns) != self.base_annotations.get(ns):
                out.append("namespace %s annotation %s is %r, was %r" % (ns, RANCHER_ANNOTATION,
                                                                         self.ns_annotation(ns),
                                                                         self.base_annotations.get(ns)))
        for kind, ns, name, ledger in self.ledgers():
            out.append("ledger left on %s %s/%s: reservations %s" % (kind, ns, name,
                                                                     sorted((ledger.get("reservations") or {}))))
        leases = self.kvquota_leases()
        if leases:
            out.append("kvquota lease(s) left: %s" % ", ".join(leases))
        unfinished = ["%s/%s %s" % (m["metadata"]["namespace"], m["metadata"]["name"],
                                    (m.get("status") or {}).get("phase")) for m in self.r.vmims()
                      if (m.get("status") or {}).get("phase") not in FINAL]
        if unfinished:
            out.append("migrations unfinished: %s" % unfinished)
        for key, (phase, where) in sorted(self.vmi_nodes().items()):
            if phase != "Running":
                out.append("VM %s is %s" % (key, phase))
            elif node and vms_off_node and where == node:
                out.append("VM %s still on %s" % (key, node))
        if node:
            unsched = bool(self.r.node(node)["spec"].get("unschedulable"))
            if unsched != cordoned:
                out.append("node %s unschedulable=%s, expected %s" % (node, unsched, cordoned))
        return out


def _json(text):
    try:
        return json.loads(text)
    except ValueError:
        return {"unparsable": text}


def _num(rl):
    try:
        return parse_resource_list(rl)
    except Exception:  # noqa: BLE001 - a value the sampler cannot read is reported elsewhere
        return {}


class Sampler(threading.Thread):
    """Looks at the cluster every interval while a play runs: events for kill points, and invariants."""

    def __init__(self, lab, node=None, interval=0.3, check_ledger=False):
        super(Sampler, self).__init__(daemon=True)
        self.lab, self.node, self.interval, self.check_ledger = lab, node, interval, check_ledger
        self.stop_flag = threading.Event()
        self.below_base = []          # (ns, quota, resource, value, base)
        self.ledger_mismatch = []     # (ns, quota, spec.hard, ledger written)
        self.samples = 0
        self.state = {}
        self.seen = {"ledger": 0, "vmim_running": 0, "lingering": 0, "reservations": set(), "ledger_gone": 0}
        self._had_ledger = False
        self._base_num = dict((ns, dict((q, _num(h)) for q, h in hard.items())) for ns, hard in lab.base.items())

    def run(self):
        while not self.stop_flag.is_set():
            try:
                self.sample()
            except Exception as exc:  # noqa: BLE001 - the apiserver may be busy; try again
                self.state["error"] = str(exc)
            self.stop_flag.wait(self.interval)

    def stop(self):
        self.stop_flag.set()
        self.join(10)

    def sample(self):
        r = self.lab.r
        quotas = r.get("/api/v1/resourcequotas")["items"]
        namespaces = dict((n["metadata"]["name"], n) for n in r.get("/api/v1/namespaces")["items"])
        ledger_count = 0
        for q in quotas:
            ns, name = q["metadata"]["namespace"], q["metadata"]["name"]
            hard = _num((q.get("spec") or {}).get("hard") or {})
            base = self._base_num.get(ns, {}).get(name)
            if base:
                for res, value in base.items():
                    if res in hard and hard[res] < value:
                        self.below_base.append((ns, name, res, q["spec"]["hard"][res],
                                                self.lab.base[ns][name][res]))
            ann = q["metadata"].get("annotations") or {}
            ledger = _json(ann[LEDGER]) if LEDGER in ann else None
            if ledger is None:
                ns_ann = namespaces.get(ns, {}).get("metadata", {}).get("annotations") or {}
                if LEDGER in ns_ann:
                    ledger = _json(ns_ann[LEDGER])
            if ledger:
                ledger_count += 1
                self.seen["reservations"].update((ledger.get("reservations") or {}).keys())
                if self.check_ledger and ledger.get("backend", "plain") == "plain":
                    written = _num(ledger.get("written") or {})
                    for res, value in written.items():
                        if res in hard and hard[res] != value:
                            self.ledger_mismatch.append((ns, name, q["spec"]["hard"].get(res),
                                                         (ledger.get("written") or {}).get(res)))
        if ledger_count:
            self.seen["ledger"] += 1
            self._had_ledger = True
        elif self._had_ledger:
            self.seen["ledger_gone"] += 1
            self._had_ledger = False
        vmims = r.vmims()
        pods = dict(((p["metadata"]["namespace"], p["metadata"]["name"]), p) for p in
                    r.get("/api/v1/pods", labelSelector="kubevirt.io=virt-launcher")["items"])
        running = [m for m in vmims if (m.get("status") or {}).get("phase") == "Running"]
        if running:
            self.seen["vmim_running"] += 1
        lingering = 0
        for m in vmims:
            st = m.get("status") or {}
            if st.get("phase") != "Succeeded":
                continue
            src = (st.get("migrationState") or {}).get("sourcePod")
            pod = pods.get((m["metadata"]["namespace"], src))
            if pod and (pod.get("status") or {}).get("phase") == "Running":
                lingering += 1
        if lingering and ledger_count:
            self.seen["lingering"] += 1
        self.state = {"ledgers": ledger_count, "vmim_running": len(running), "lingering": lingering,
                      "vmims": len(vmims)}
        self.samples += 1


# ---------------------------------------------------------------------------------------------------------
# campaign 1: interrupt

def interrupt_points(quick):
    """(label, kind, arg): kind time = fraction of a reference run; event = an observed cluster/play event."""
    if quick:
        return [("after the first ledger annotation", "event", "ledger"),
                ("mid-batch, a migration Running", "event", "vmim_running"),
                ("release, a source pod lingering", "event", "lingering")]
    points = []
    for frac in (0.03, 0.08, 0.15, 0.22, 0.3, 0.37, 0.45, 0.52, 0.6, 0.67, 0.75, 0.82, 0.9, 0.97):
        points.append(("%d%% of the reference run" % round(frac * 100), "time", frac))
    points += [
        ("after the first ledger annotation", "event", "ledger"),
        ("first migration Running", "event", "vmim_running"),
        ("3rd sample with a migration Running", "event", ("vmim_running", 3)),
        ("8th sample with a migration Running", "event", ("vmim_running", 8)),
        ("first source pod lingering during release", "event", "lingering"),
        ("3rd sample with a source pod lingering", "event", ("lingering", 3)),
        ("2nd reservation appeared", "event", ("reservations", 2)),
        ("4th reservation appeared", "event", ("reservations", 4)),
        ("between batches (ledger just removed)", "event", ("ledger_gone", 1)),
        ("between batches, 3rd time", "event", ("ledger_gone", 3)),
        ("task: Cordon the node", "task", "Cordon the node"),
        ("task: Plan the migrations", "task", "Plan the migrations"),
        ("task: Reserve quota, batch 1", "task", "Reserve quota for its migrations - batch 1"),
        ("task: Start its migrations, batch 2", "task", "Start its migrations - batch 2"),
        ("task: Give the quota back, batch 3", "task", "Give the quota back once the source pods are gone - batch 3"),
        ("task: Give the quota back, batch 1", "task", "Give the quota back once the source pods are gone - batch 1"),
        ("task: Drain the remaining pods", "task", "Drain"),
        ("task: Make the node schedulable again", "task", "Make the node schedulable again"),
    ]
    return points


def _event_reached(sampler, arg):
    if isinstance(arg, tuple):
        key, n = arg
    else:
        key, n = arg, 1
    value = sampler.seen[key]
    return (len(value) if isinstance(value, set) else value) >= n


# bounded waits, so that a run that cannot release fails in minutes rather than 10 (the role's default)
BOUNDED = {"node_maintenance_release_timeout": 90, "node_maintenance_rescue_release_timeout": 30}


def campaign_interrupt(args):
    quick = args.quick
    scenario = "b" if quick else "d"
    lab = Lab("interrupt", scenario, keep=args.keep)

    rows, evidence = [], []
    try:
        reference = None
        if not quick:
            node = lab.busiest_node()
            rc, out, secs = lab.run(dict(BOUNDED, node_maintenance_node=node))
            probs = lab.problems(node)
            reference = secs
            log("interrupt: reference run on %s rc=%s %.0fs problems=%s" % (node, rc, secs, probs))
            if rc != 0 or probs:
                evidence.append({"point": "reference run", "rc": rc, "problems": probs, "tail": out[-3000:]})
        else:
            reference = 40.0
        vms_total = len(lab.vmi_nodes())
        for label, kind, arg in interrupt_points(quick):
            node = lab.busiest_node()
            moved = len(lab.vms_on(node))
            sampler = Sampler(lab, node)
            sampler.start()
            proc = lab.start(dict(BOUNDED, node_maintenance_node=node))
            killed_at, reached = None, False
            deadline = time.monotonic() + 900
            while proc.poll() is None and time.monotonic() < deadline:
                elapsed = time.monotonic() - proc.started
                if kind == "time":
                    reached = elapsed >= arg * reference
                elif kind == "event":
                    reached = _event_reached(sampler, arg)
                else:
                    reached = ("TASK [kvquota.maintenance.node_maintenance : %s" % arg) in lab.output(proc)
                if reached:
                    lab.kill(proc)
                    killed_at = elapsed
                    break
                time.sleep(0.1)
            first_out = lab.output(proc)
            first_rc = proc.returncode
            rc, out, secs = lab.run(dict(BOUNDED, node_maintenance_node=node))
            sampler.stop()
            probs = lab.problems(node)
            if sampler.below_base:
                probs.append("spec.hard below base during the run: %s" % sampler.below_base[:3])
            if rc != 0:
                probs.insert(0, "re-run failed rc=%s" % rc)
            row = {"point": label, "node": node, "vms_on_node": moved, "killed": killed_at is not None,
                   "killed_at_s": round(killed_at, 1) if killed_at is not None else None,
                   "first_rc": first_rc, "rerun_rc": rc, "rerun_s": round(secs, 1),
                   "resumed": "resuming:" in out, "problems": probs, "samples": sampler.samples}
            rows.append(row)
            log("interrupt: %-45s node=%s killed=%s at %s rerun rc=%s %.0fs resumed=%s problems=%d"
                % (label, node, row["killed"], row["killed_at_s"], rc, secs, row["resumed"], len(probs)))
            if probs:
                evidence.append({"point": label, "problems": probs, "first_tail": first_out[-2500:],
                                 "rerun_tail": out[-4000:]})
                # the next point starts from a clean cluster, not from this one's leftovers (see below)
                pass
            PROGRESS(_interrupt_result(rows, evidence, scenario, reference, vms_total, len(interrupt_points(quick))))
            if probs:
                lab.stop()
                lab = Lab("interrupt", scenario, keep=args.keep)
    finally:
        lab.stop()
    return _interrupt_result(rows, evidence, scenario, reference, vms_total, len(interrupt_points(quick)))


def _interrupt_result(rows, evidence, scenario, reference, vms_total, planned):
    killed = [r for r in rows if r["killed"]]
    ok = [r for r in killed if not r["problems"]]
    not_reached = [r for r in rows if not r["killed"]]
    vms_moved = sum(r["vms_on_node"] for r in killed)
    vms_ok = sum(r["vms_on_node"] for r in ok)
    line = ("interrupt: %d/%d interruptions recovered (quotas at base byte-for-byte, %d reservations left, "
            "%d/%d VMs Running off their node; %d point(s) not reached before the run ended%s%s)"
            % (len(ok), len(killed), sum(1 for r in killed for p in r["problems"] if "ledger left" in p),
               vms_ok, vms_moved, len(not_reached),
               "" if len(ok) == len(killed) else "; FAILED at: " + ", ".join(r["point"] for r in killed
                                                                             if r["problems"]),
               "" if len(rows) >= planned else "; PARTIAL: %d of %d planned points run" % (len(rows), planned)))
    return {"name": "interrupt", "line": line, "ok": len(ok) == len(killed) and bool(killed) and len(rows) >= planned,
            "scenario": scenario, "rows": rows, "evidence": evidence, "reference_s": reference,
            "vms_total": vms_total}


# ---------------------------------------------------------------------------------------------------------
# campaign 2: Rancher reverts

def campaign_reverts(args):
    lab = Lab("reverts", "c", keep=args.keep)
    rounds = 1 if args.quick else 5
    rng = random.Random(20261122)
    rows, evidence = [], []
    try:
        for i in range(rounds):
            node = lab.r.busiest_node(["c-tenant"])
            sampler = Sampler(lab, node)
            sampler.start()
            proc = lab.start({"node_maintenance_node": node})
            restarts = 0
            while proc.poll() is None:
                time.sleep(rng.uniform(0.5, 4.0))
                if proc.poll() is None:
                    lab.r.rancher_agent_restart()
                    restarts += 1
            proc.wait()
            out = lab.output(proc)
            time.sleep(2)   # let the last agent restart settle before judging
            sampler.stop()
            probs = lab.problems(node, rancher=True)
            if sampler.below_base:
                probs.append("spec.hard below base during the run: %s" % sampler.below_base[:3])
            if proc.returncode != 0:
                probs.insert(0, "run failed rc=%s" % proc.returncode)
            reverted_warn = out.count("revert")
            rows.append({"round": i + 1, "node": node, "restarts": restarts, "rc": proc.returncode,
                         "problems": probs, "revert_mentions": reverted_warn,
                         "ledger_samples": sampler.seen["ledger"]})
            log("reverts: round %d node=%s restarts=%d rc=%s problems=%s" % (i + 1, node, restarts,
                                                                             proc.returncode, probs))
            if probs:
                evidence.append({"round": i + 1, "problems": probs, "tail": out[-5000:]})
                lab.uncordon_all()
    finally:
        lab.stop()
    ok = [r for r in rows if not r["problems"]]
    line = ("reverts: %d/%d Rancher-managed drains succeeded and ended at base (%d agent restarts injected, "
            "%d below-base samples)" % (len(ok), len(rows), sum(r["restarts"] for r in rows),
                                        sum(1 for r in rows for p in r["problems"] if "below base" in p)))
    return {"name": "reverts", "line": line, "ok": len(ok) == len(rows), "scenario": "c", "rows": rows,
            "evidence": evidence}


# ---------------------------------------------------------------------------------------------------------
# campaign 3: an administrator edits spec.hard during a reservation

def campaign_admin(args):
    lab = Lab("admin", "b", keep=args.keep)
    ns = "b-tenant"
    rows, evidence = [], []
    try:
        qname = sorted(lab.base[ns])[0]
        base = lab.base[ns][qname]
        node = lab.busiest_node()
        lab.r.set_knobs(stall_migrations="all")
        proc = lab.start({"node_maintenance_node": node})
        try:
            lab.r.wait(lambda: any(entry[0] == "quota" for entry in lab.ledgers())
                       and any((m.get("status") or {}).get("phase") == "Running" for m in lab.r.vmims(ns)),
                       180, "a reservation and a running migration")
            during = lab.r.hard(ns)[qname]
            old_mem = parse_resource_list({"m": base["limits.memory"]})["m"]
            new_value = "%dMi" % (int(old_mem / (1024 * 1024)) + 512)
            patched = dict(during)
            patched["limits.memory"] = new_value
            lab.r.rest.patch("/api/v1/namespaces/%s/resourcequotas/%s" % (ns, qname), {"spec": {"hard": patched}})
            log("admin: %s/%s limits.memory base %s, reserved %s, administrator set %s"
                % (ns, qname, base["limits.memory"], during["limits.memory"], new_value))
        finally:
            lab.r.set_knobs(stall_migrations=None)
        proc.wait(900)
        out = lab.output(proc)
        expected = dict(base)
        expected["limits.memory"] = new_value
        probs = lab.problems(node, base={ns: {qname: expected}})
        if proc.returncode != 0:
            probs.insert(0, "run failed rc=%s" % proc.returncode)
        final = lab.r.hard(ns)[qname]
        rows.append({"base": base["limits.memory"], "reserved": during["limits.memory"], "admin": new_value,
                     "final": final.get("limits.memory"), "rc": proc.returncode, "problems": probs,
                     "warned": "QuotaBaseChanged" in out or "new base" in out or "administrator" in out})
        if probs:
            evidence.append({"problems": probs, "tail": out[-5000:]})
    finally:
        lab.stop()
    row = rows[0] if rows else {}
    ok = bool(rows) and not row["problems"]
    line = ("admin: %s (base %s, reserved %s, administrator set %s during the reservation, final %s%s)"
            % ("new base kept" if ok else "FAILED", row.get("base"), row.get("reserved"), row.get("admin"),
               row.get("final"), "" if ok else "; " + "; ".join(row.get("problems", ["no run"]))[:300]))
    return {"name": "admin", "line": line, "ok": ok, "scenario": "b", "rows": rows, "evidence": evidence}


# ---------------------------------------------------------------------------------------------------------
# campaign 4: two maintenance runs at once on two nodes sharing namespaces

def campaign_races(args):
    lab = Lab("races", "d", keep=args.keep)
    rounds = [("default owner", None, None)] if args.quick else [
        ("default owner", None, None), ("distinct owners", "awx-job-101", "awx-job-102"),
        ("distinct owners", "awx-job-103", "awx-job-104")]
    rows, evidence = [], []
    try:
        # spread the VMs first: drain node-1 (all 20 VMs start there)
        rc, out, secs = lab.run({"node_maintenance_node": "node-1"})
        if rc != 0:
            evidence.append({"setup": "drain node-1", "rc": rc, "tail": out[-3000:]})
        for label, owner_a, owner_b in rounds:
            counts = {}
            for key, (phase, node) in lab.vmi_nodes().items():
                counts.setdefault(node, []).append(key.split("/")[0])
            if len([n for n in counts if n]) < 2:   # the last round put every VM on one node: spread them
                only = [n for n in counts if n][0]
                lab.run({"node_maintenance_node": only})
                counts = {}
                for key, (phase, node) in lab.vmi_nodes().items():
                    counts.setdefault(node, []).append(key.split("/")[0])
            nodes = sorted(counts, key=lambda n: -len(counts[n]))[:2]
            shared = sorted(set(counts[nodes[0]]) & set(counts[nodes[1]]))
            sampler = Sampler(lab, check_ledger=True)
            sampler.start()
            procs = []
            for node, owner in zip(nodes, (owner_a, owner_b)):
                extra = {"node_maintenance_node": node}
                if owner:
                    extra["node_maintenance_owner"] = owner
                procs.append(lab.start(extra))
            for p in procs:
                p.wait(1200)
            sampler.stop()
            outs = [lab.output(p) for p in procs]
            probs = []
            for node in nodes:
                probs += lab.problems(node)
            if sampler.below_base:
                probs.append("spec.hard below base during the run: %s" % sampler.below_base[:3])
            if sampler.ledger_mismatch:
                probs.append("spec.hard differed from the ledger's written value: %s" % sampler.ledger_mismatch[:3])
            rcs = [p.returncode for p in procs]
            if any(rcs):
                probs.insert(0, "run(s) failed rc=%s" % rcs)
            waits = sum(o.count("is held by") for o in outs)
            rows.append({"round": label, "nodes": nodes, "shared_namespaces": shared, "rcs": rcs,
                         "lease_waits_named": waits, "problems": probs, "samples": sampler.samples})
            log("races: %s nodes=%s shared=%d rcs=%s held-by mentions=%d problems=%s"
                % (label, nodes, len(shared), rcs, waits, probs))
            if probs:
                evidence.append({"round": label, "problems": probs, "tails": [o[-3000:] for o in outs]})
            lab.uncordon_all()
    finally:
        lab.stop()
    ok = [r for r in rows if not r["problems"]]
    line = ("races: %d/%d concurrent pairs ended at base with no lost update (%d ledger/spec mismatches sampled; "
            "lease wait naming the holder seen in %d/%d pairs; shared namespaces per pair: %s)"
            % (len(ok), len(rows), sum(1 for r in rows for p in r["problems"] if "differed" in p),
               sum(1 for r in rows if r["lease_waits_named"]), len(rows),
               "/".join(str(len(r["shared_namespaces"])) for r in rows)))
    return {"name": "races", "line": line, "ok": len(ok) == len(rows), "scenario": "d", "rows": rows,
            "evidence": evidence}


# ---------------------------------------------------------------------------------------------------------
# campaign 5: pods bigger than estimated

def campaign_short(args):
    lab = Lab("short", "b", keep=args.keep)
    cases = [("1%", {"oversize_percent": "1"}, {}), ("5%", {"oversize_percent": "5"}, {}),
             ("64Mi", {"oversize_bytes": "64Mi"}, {}),
             ("256Mi past a 16Mi top-up cap", {"oversize_bytes": "256Mi"},
              {"node_maintenance_top_up_cap": {"limits.memory": "16Mi"}})]
    if args.quick:
        cases = [cases[1], cases[3]]
    rows, evidence = [], []
    try:
        for label, knobs, extra in cases:
            node = lab.busiest_node()
            lab.r.set_knobs(**knobs)
            sampler = Sampler(lab, node)
            sampler.start()
            vars_ = dict(BOUNDED, node_maintenance_node=node)
            vars_.update(extra)
            try:
                rc, out, secs = lab.run(vars_)
            finally:
                lab.r.set_knobs(**dict((k, None) for k in knobs))
            sampler.stop()
            capped = "cap" in label
            topups = out.count("topped up") + out.count("top-up:")
            if capped:
                probs = lab.problems(node, vms_off_node=False, cordoned=bool(lab.r.node(node)["spec"]
                                                                             .get("unschedulable")))
                if rc == 0:
                    probs.insert(0, "expected the run to stop past the cap, rc=0")
                elif "To resume" not in out:
                    probs.insert(0, "no resume advice in the failure")
                rc2, out2 = lab.run(dict(BOUNDED, node_maintenance_node=node))[:2]
                probs2 = lab.problems(node)
                if rc2 != 0:
                    probs2.insert(0, "re-run without oversize failed rc=%s" % rc2)
                probs += ["after re-run: " + p for p in probs2]
            else:
                probs = lab.problems(node)
                if rc != 0:
                    probs.insert(0, "run failed rc=%s" % rc)
            if sampler.below_base:
                probs.append("spec.hard below base during the run: %s" % sampler.below_base[:3])
            msg = ""
            for line_ in out.splitlines():
                if "still missing" in line_ or "still refuses" in line_ or "shortfall" in line_:
                    msg = line_.strip()[:300]
                    break
            rows.append({"case": label, "node": node, "rc": rc, "seconds": round(secs, 1), "topups_mentioned":
                         topups, "problems": probs, "stop_message": msg})
            log("short: %s rc=%s topups~%d problems=%s" % (label, rc, topups, probs))
            if probs:
                evidence.append({"case": label, "problems": probs, "tail": out[-5000:]})
                lab.uncordon_all()
    finally:
        lab.stop()
    ok = [r for r in rows if not r["problems"]]
    line = ("short: %d/%d oversize cases handled (%s)" % (len(ok), len(rows), "; ".join(
        "%s: %s" % (r["case"], "ok" if not r["problems"] else "FAILED") for r in rows)))
    return {"name": "short", "line": line, "ok": len(ok) == len(rows), "scenario": "b", "rows": rows,
            "evidence": evidence}


# ---------------------------------------------------------------------------------------------------------
# campaign 6: failed and stalled migrations

def campaign_failed(args):
    lab = Lab("failed", "b", keep=args.keep)
    cases = [("fail_migrations=all", {"fail_migrations": "all"}, {}),
             ("stall_migrations=all", {"stall_migrations": "all"},
              {"node_maintenance_completion_timeout_per_gib": 5, "node_maintenance_progress_timeout": 5,
               "node_maintenance_scheduling_timeout": 10})]
    rows, evidence = [], []
    try:
        for label, knobs, extra in cases:
            node = lab.busiest_node()
            on_node = lab.vms_on(node)
            lab.r.set_knobs(**knobs)
            vars_ = dict(BOUNDED, node_maintenance_node=node)
            vars_.update(extra)
            try:
                rc, out, secs = lab.run(vars_)
                still = lab.vms_on(node)
                probs = []
                if rc == 0:
                    probs.append("the run succeeded although migrations %s" % label)
                if "To resume" not in out:
                    probs.append("no 'To resume' advice in the output")
                lost = [k for k in on_node if lab.vmi_nodes().get(k, (None,))[0] != "Running"]
                if lost:
                    probs.append("VMs not Running after the failure: %s" % lost)
                held = lab.ledgers()
                if held:
                    probs.append("reservation(s) still held after the failed run: %s"
                                 % ["%s/%s %s" % (n, q, sorted(led.get("reservations") or {})) for _kind, n, q, led in held])
                if lab.r.hard("b-tenant") != lab.base["b-tenant"] and not held:
                    probs.append("quota not at base after the failed run: %s" % lab.r.hard("b-tenant"))
            finally:
                lab.r.set_knobs(**dict((k, None) for k in knobs))
            rc2, out2, secs2 = lab.run(dict(BOUNDED, node_maintenance_node=node))
            probs2 = lab.problems(node)
            if rc2 != 0:
                probs2.insert(0, "re-run failed rc=%s" % rc2)
            failure_msg = ""
            for line_ in out.splitlines():
                if "To resume" in line_ or "failed" in line_ and "migration" in line_:
                    failure_msg = line_.strip()[:400]
                    break
            rows.append({"case": label, "node": node, "vms_on_node": len(on_node), "vms_stayed": len(still),
                         "rc": rc, "rerun_rc": rc2, "problems": probs + ["after re-run: " + p for p in probs2],
                         "message": failure_msg})
            log("failed: %s rc=%s stayed=%d/%d rerun=%s problems=%s" % (label, rc, len(still), len(on_node), rc2,
                                                                        rows[-1]["problems"]))
            if rows[-1]["problems"]:
                evidence.append({"case": label, "problems": rows[-1]["problems"], "tail": out[-5000:],
                                 "rerun_tail": out2[-3000:]})
                lab.uncordon_all()
    finally:
        lab.stop()
    ok = [r for r in rows if not r["problems"]]
    line = ("failed: %d/%d failed/stalled-migration cases clean (%s)" % (len(ok), len(rows), "; ".join(
        "%s: rc=%s, VMs kept on source %d/%d, %s, re-run rc=%s" % (
            r["case"], r["rc"], r["vms_stayed"], r["vms_on_node"],
            "released" if not any("still held" in p for p in r["problems"]) else "reservation HELD",
            r["rerun_rc"]) for r in rows)))
    return {"name": "failed", "line": line, "ok": len(ok) == len(rows), "scenario": "b", "rows": rows,
            "evidence": evidence}


# ---------------------------------------------------------------------------------------------------------
# campaign 7: lingering source pods

def campaign_lingering(args):
    delay = 10 if args.quick else 30
    scenario = "b" if args.quick else "d"   # d: two batches in a row in each namespace
    lab = Lab("lingering", scenario, keep=args.keep)
    rows, evidence = [], []
    try:
        lab.r.set_knobs(source_pod_delay_seconds=str(delay))
        node = lab.busiest_node()
        moved = len(lab.vms_on(node))
        lab.r.mark()
        sampler = Sampler(lab, node)
        sampler.start()
        rc, out, secs = lab.run({"node_maintenance_node": node})
        sampler.stop()
        emu_log = lab.r.emulator_log()
        rejections = [line_ for line_ in emu_log.splitlines() if "exceeded quota" in line_]
        probs = lab.problems(node)
        if rc != 0:
            probs.insert(0, "run failed rc=%s" % rc)
        if rejections:
            probs.append("%d quota rejection(s) in the emulator log, e.g. %s" % (len(rejections), rejections[0][:300]))
        if sampler.below_base:
            probs.append("spec.hard below base during the run: %s" % sampler.below_base[:3])
        rows.append({"delay": delay, "node": node, "vms": moved, "rc": rc, "seconds": round(secs, 1),
                     "lingering_samples": sampler.seen["lingering"], "rejections": len(rejections),
                     "problems": probs})
        if probs:
            evidence.append({"problems": probs, "tail": out[-5000:]})
    finally:
        lab.stop()
    row = rows[0] if rows else {}
    ok = bool(rows) and not row["problems"]
    line = ("lingering: %s (source pods completing %ss after Succeeded; %s VMs in %s s, release waited through "
            "%s samples with a lingering source pod under a reservation, %s quota rejection(s) in the emulator log)"
            % ("ok" if ok else "FAILED", row.get("delay"), row.get("vms"), row.get("seconds"),
               row.get("lingering_samples"), row.get("rejections")))
    return {"name": "lingering", "line": line, "ok": ok, "scenario": scenario, "rows": rows, "evidence": evidence}


CAMPAIGNS = {"interrupt": campaign_interrupt, "reverts": campaign_reverts, "admin": campaign_admin,
             "races": campaign_races, "short": campaign_short, "failed": campaign_failed,
             "lingering": campaign_lingering}


# ---------------------------------------------------------------------------------------------------------
# the report

def write_doc(path, results, command, started, seconds):
    lines = [
        "# Reliability: chaos campaigns in the lab",
        "",
        "Generated by `tests/chaos/chaos.py` from the figures it measured; do not edit by hand.",
        "",
        "- command: `%s`" % command,
        "- date: %s (UTC), %d s" % (started, seconds),
        "- lab: real kube-apiserver, ResourceQuota admission, quota controller and scheduler (Kubernetes "
        "v1.33), kwok nodes, the KubeVirt/Rancher emulator of tests/lab; every playbook runs as the "
        "least-privilege user of `rbac/clusterrole.yml`.",
        "- checks after every run: each quota's `spec.hard` equal to its base byte for byte (Rancher: the "
        "namespace annotation too), no `%s` annotation on any quota or namespace, no kvquota Lease, every "
        "VM Running off the maintained node, no migration unfinished, the node's cordon state as expected; "
        "while a play runs, a sampler (~0.3 s) records any `spec.hard` below its base." % LEDGER,
        "",
        "## Results",
        "",
        "```",
    ]
    lines += ["[%s] %s" % (r.get("mode", "?"), r["line"]) for r in results]
    lines += ["```", ""]
    for r in results:
        lines += ["## %s, %s run (scenario %s, %s s)" % (r["name"], r.get("mode", "?"), r.get("scenario", "?"),
                                                         r.get("seconds", "?")), "", "Result: **%s**."
                  % ("passed" if r["ok"] else "FAILED"), ""]
        if r.get("error"):
            lines += ["The campaign stopped with an error:", "", "```", r["error"][-2000:], "```", ""]
        rows = r.get("rows") or []
        if rows:
            keys = [k for k in rows[0].keys() if k not in ("problems",)]
            lines.append("| " + " | ".join(keys) + " | problems |")
            lines.append("|" + "---|" * (len(keys) + 1))
            for row in rows:
                cells = [str(row.get(k)) for k in keys]
                probs = "; ".join(row.get("problems") or []) or "none"
                lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " | "
                             + probs.replace("|", "/")[:400] + " |")
            lines.append("")
    Path(path).write_text("\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true", help="reduced campaigns for make test")
    parser.add_argument("--campaigns", default=",".join(ALL_CAMPAIGNS))
    parser.add_argument("--json", help="write the full results (rows and evidence) here")
    parser.add_argument("--doc", default=str(REPO / "docs" / "reliability.md"))
    parser.add_argument("--no-doc", action="store_true", help="do not write docs/reliability.md")
    parser.add_argument("--keep", action="store_true", help="leave the labs running")
    parser.add_argument("--report-from", help="only write the doc from earlier --json files (comma-separated)")
    args = parser.parse_args(argv)
    if args.report_from:
        results, commands, dates = [], [], []
        for f in args.report_from.split(","):
            data = json.loads(Path(f).read_text())
            for r in data["results"]:
                r.setdefault("mode", "quick" if "--quick" in data["command"] else "full")
            results += data["results"]
            commands.append(data["command"])
            dates.append(data["date"])
        for r in results:
            print(r["line"])
        write_doc(args.doc, results, " ; ".join(commands), " / ".join(sorted(set(dates))),
                  sum(r.get("seconds", 0) for r in results))
        return 0 if all(r["ok"] for r in results) else 1
    names = [n.strip() for n in args.campaigns.split(",") if n.strip()]
    unknown = [n for n in names if n not in CAMPAIGNS]
    if unknown:
        parser.error("unknown campaign(s) %s; known: %s" % (", ".join(unknown), ", ".join(ALL_CAMPAIGNS)))
    import atexit
    import kvqlab
    kvqlab.find_bin_dir()
    atexit.register(_kill_live)
    signal.signal(signal.SIGTERM, _kill_live)   # fails early with "lab binaries missing" and the fix
    command = "python3 tests/chaos/chaos.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                  else sys.argv[1:]))
    started = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M")
    t0 = time.monotonic()
    results = []

    def save(extra=None):
        if args.json:
            Path(args.json).write_text(json.dumps({"command": command, "date": started,
                                                  "results": results + ([extra] if extra else [])},
                                                  indent=1, default=str))

    global PROGRESS
    PROGRESS = save
    for name in names:
        c0 = time.monotonic()
        try:
            result = CAMPAIGNS[name](args)
        except Exception:  # noqa: BLE001 - record it honestly, go on with the next campaign
            err = traceback.format_exc()
            log(err)
            result = {"name": name, "line": "%s: ERROR %s" % (name, err.strip().splitlines()[-1][:300]),
                      "ok": False, "error": err, "rows": [], "evidence": []}
        result["seconds"] = round(time.monotonic() - c0, 1)
        result["mode"] = "quick" if args.quick else "full"
        results.append(result)
        print(result["line"])
        sys.stdout.flush()
        save()
    if not args.no_doc:
        write_doc(args.doc, results, command, started, time.monotonic() - t0)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
