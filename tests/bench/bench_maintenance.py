# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of draining one node (scenario d: 20 VMs on node-1, 5 tightly budgeted namespaces), against the lab.

The emulated migration time is fixed (emulator knob migration_seconds = T, source_pod_delay_seconds = D), and
these approaches are measured, each on a FRESH lab with scenario d, one lab at a time, in the same run:

- bound: the lower bound ceil(N / parallelOutboundMigrationsPerNode) x T (computed, not run);
- role: the collection's playbook (ansible-playbook playbooks/node_maintenance.yml -e node_maintenance_node=node-1)
  as the least-privilege user; optionally again with role variables (--role-vars, e.g. a shorter
  node_maintenance_poll_interval: the table says so); role-base: the same playbook of the collection at git
  revision --baseline (default HEAD: the committed code beside the work tree's changes), in the same run;
- naive: expand every quota for ALL its VMs at once (headroom.batch_headroom over the whole node), create every
  VirtualMachineInstanceMigration at once and let KubeVirt queue them, release at the end;
- serial: one VM at a time (reserve for that VM, migrate, wait for its source pod, release, next).

naive and serial reserve and release with the collection's core (reservations.reserve / release) as the same
least-privilege user. Measured per run:

- makespan: from the first migration seen to the last migration seen Succeeded (a sampler thread lists the
  VMIMs every --interval s, so +-interval), and the whole run (the playbook process, or the script's steps);
- peak extra quota: max over samples of sum over the node's quotas of (spec.hard - base), per resource, and of
  the ledgers' active deltas (the kvq-ledger-* ConfigMaps in the operator namespace kvquota-system, read
  through tests/lab/kvqlab/state.py); and per namespace: the largest extra a
  namespace's quotas held, divided by that namespace's largest need in one batch (max over namespaces; 1.00 =
  no namespace ever held more than one batch's worth);
- migrations rejected by quota: "exceeded quota" lines the emulator logged during the run;
- quotas back at base: spec.hard byte-for-byte equal to the base and no ledger of the node's quotas left.

Targets (issue 15): role makespan <= 1.05 x bound and the whole run (the playbook process) <= 1.10 x bound; role
peak extra per namespace <= that namespace's largest need in one batch (from kvquota_check's batches for the node
and batch_headroom). The role overlaps batches (a batch of
other namespaces migrates while the previous batch's reservation waits for its source pods), so the
cluster-wide sum may exceed the largest single batch's need; it is still reported.
Not a test: it prints a table (--json writes everything).

    python3 tests/bench/bench_maintenance.py [--approaches role,naive,serial] [--repeat 2] [--T 6] [--D 1]
        [--role-vars '{"node_maintenance_poll_interval": 1}'] [--json out.json]
"""

from __future__ import (absolute_import, division, print_function)

import argparse
import calendar
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

__import__("conftest")   # makes the work tree importable as ansible_collections.kvquota.maintenance
import kvqlab  # noqa: E402
from kvqlab import emulator as emulator_mod  # noqa: E402
from kvqlab import scenarios  # noqa: E402
from kvqlab import state  # noqa: E402
from kvqlab.emulator import _rest_for  # noqa: E402

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as check_mod  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils import kvquota_module  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as headroom_mod  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations as res_mod  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity  # noqa: E402

COLLECTIONS = os.environ["KVQ_COLLECTIONS_PATH"]  # set by the repository root conftest.py
KV = "/apis/kubevirt.io/v1"
NODE = "node-1"
SCENARIO = "d"
RESOURCES = ("limits.memory", "limits.cpu")
GI = 1024.0 ** 3


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def q(value):
    return float(parse_quantity(value))   # a computed (Fraction) need or a quantity string


# ---------------------------------------------------------------------------------------------------------
# the lab

class Lab(object):
    """A fresh lab with scenario d applied, the emulator running, the timing knobs set."""

    def __init__(self, run_dir, migration_seconds, source_pod_delay, scenario=None):
        self.run_dir = run_dir
        started = time.monotonic()
        self.lab = kvqlab.up(run_dir=run_dir)
        self.emu = emulator_mod.start(self.lab)
        self.scenario = scenario or scenarios.load(SCENARIO)
        scenarios.apply(self.lab, self.scenario, timeout=180)
        # the scenario writes its own knobs (source_pod_delay_seconds: 2): ours come after it
        emulator_mod.set_knobs(self.lab, migration_seconds=migration_seconds,
                               source_pod_delay_seconds=source_pod_delay)
        self.rest = _rest_for(self.lab)
        self.setup_seconds = time.monotonic() - started

    def stop(self):
        try:
            self.emu.stop()
        finally:
            kvqlab.down(self.run_dir)

    def cluster(self):
        # as the modules configure theirs (kubernetes.core's client configuration); the bench sets no K8S_AUTH_*
        return kvquota_module.connect({"kubeconfig": str(self.lab.user_kubeconfig)})

    def quotas(self):
        return [x for x in self.rest.get("/api/v1/resourcequotas")["items"]
                if x["metadata"]["namespace"].startswith("d-tenant-")]

    def ledgers(self):
        """{(namespace, quota): ledger dict} of the scenario's quotas (ledgers in the operator namespace)."""
        return dict((key, ledger) for key, ledger in state.ledgers(self.rest).items()
                    if str(key[0]).startswith("d-tenant-"))

    def vmims(self):
        return self.rest.get(KV + "/virtualmachineinstancemigrations")["items"]

    def vmis_on(self, node):
        return [v for v in self.rest.get(KV + "/virtualmachineinstances")["items"]
                if (v.get("status") or {}).get("nodeName") == node]

    def rejections(self):
        return self.emu.count("exceeded quota")


def base_of(quotas):
    return dict(((x["metadata"]["namespace"], x["metadata"]["name"]), dict(x["spec"]["hard"])) for x in quotas)


class Sampler(threading.Thread):
    """Every interval s: extra quota over base (spec.hard and ledger deltas) and the migrations' phases."""

    def __init__(self, lab, base, interval):
        threading.Thread.__init__(self, daemon=True)
        self.lab, self.base, self.interval = lab, base, interval
        self.stopping = threading.Event()
        self.peak_hard = dict((r, 0.0) for r in RESOURCES)
        self.peak_ledger = dict((r, 0.0) for r in RESOURCES)
        self.peak_quotas_expanded = 0
        self.peak_by_ns = {}      # {namespace: {resource: largest extra (hard - base) seen}}
        self.first_seen = None
        self.succeeded_at = {}
        self.max_running = 0      # migrations with a target pod at once (Scheduling..Running)
        self.samples = 0
        self.errors = 0
        self.series = []   # (wall time, extra limits.memory, extra limits.cpu) when it changes

    def run(self):
        while not self.stopping.is_set():
            begun = time.monotonic()
            try:
                self.sample(begun)
            except Exception:  # a transient API error must not end the measurement
                self.errors += 1
            self.stopping.wait(max(0.0, self.interval - (time.monotonic() - begun)))

    def sample(self, now):
        quotas = self.lab.quotas()
        ledgers = self.lab.ledgers()
        extra = dict((r, 0.0) for r in RESOURCES)
        ledger_extra = dict((r, 0.0) for r in RESOURCES)
        expanded = 0
        by_ns = {}
        for x in quotas:
            key = (x["metadata"]["namespace"], x["metadata"]["name"])
            base = self.base.get(key, {})
            grew = False
            for r in RESOURCES:
                if r in x["spec"]["hard"] and r in base:
                    d = q(x["spec"]["hard"][r]) - q(base[r])
                    extra[r] += d
                    by_ns.setdefault(key[0], dict((n, 0.0) for n in RESOURCES))[r] += d
                    grew = grew or d > 0
            expanded += grew
            if key in ledgers:
                for entry in (ledgers[key].get("reservations") or {}).values():
                    for r, v in (entry.get("delta") or {}).items():
                        if r in ledger_extra and v is not None:
                            ledger_extra[r] += q(v)
        for r in RESOURCES:
            self.peak_hard[r] = max(self.peak_hard[r], extra[r])
            self.peak_ledger[r] = max(self.peak_ledger[r], ledger_extra[r])
        self.peak_quotas_expanded = max(self.peak_quotas_expanded, expanded)
        for ns, rl in by_ns.items():
            peak = self.peak_by_ns.setdefault(ns, dict((n, 0.0) for n in RESOURCES))
            for r in RESOURCES:
                peak[r] = max(peak[r], rl[r])
        point = (round(extra["limits.memory"]), round(extra["limits.cpu"], 3))
        if not self.series or self.series[-1][1:] != point:
            self.series.append((time.time(),) + point)
        seen = time.monotonic()
        running = 0
        for m in self.lab.vmims():
            name = "%s/%s" % (m["metadata"]["namespace"], m["metadata"]["name"])
            if self.first_seen is None:
                self.first_seen = seen
            phase = (m.get("status") or {}).get("phase")
            if phase == "Succeeded" and name not in self.succeeded_at:
                self.succeeded_at[name] = seen
            if phase in ("Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running"):
                running += 1
        self.max_running = max(self.max_running, running)
        self.samples += 1

    def finish(self):
        self.stopping.set()
        self.join(10)
        try:
            self.sample(time.monotonic())
        except Exception:
            self.errors += 1


_TARGET = re.compile(r"^(\S+) INFO virt-controller: created migration target pod (\S+)/\S+ for migration (\S+) ")
_DONE = re.compile(r"^(\S+) INFO virt-controller: migration (\S+)/(\S+) of VMI \S+ Succeeded")
_SOURCE = re.compile(r"^(\S+) INFO virt-handler: source pod \S+ Succeeded")


def _wall(stamp):
    return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + stamp[19:])


def timeline(log_text, since_wall):
    """From the emulator's log (ms timestamps): each migration's transfer (target pod created -> Succeeded),
    the makespan by the log, the mean number of migrations in transfer, and the idle gaps (no migration in
    transfer) with, for each, how long after its start the last source pod completed."""
    started, ended, sources = {}, {}, []
    for line in log_text.splitlines():
        m = _TARGET.match(line)
        if m and _wall(m.group(1)) >= since_wall:
            started.setdefault("%s/%s" % (m.group(2), m.group(3)), _wall(m.group(1)))
            continue
        m = _DONE.match(line)
        if m and _wall(m.group(1)) >= since_wall:
            ended["%s/%s" % (m.group(2), m.group(3))] = _wall(m.group(1))
            continue
        m = _SOURCE.match(line)
        if m and _wall(m.group(1)) >= since_wall:
            sources.append(_wall(m.group(1)))
    spans = sorted((started[k], ended[k]) for k in started if k in ended)
    if not spans:
        return {}
    first, last = spans[0][0], max(e for _s, e in spans)
    busy = sum(e - s for s, e in spans)
    gaps, reach = [], spans[0][1]
    for s, e in spans[1:]:
        if s > reach:
            src = [t - reach for t in sources if reach <= t <= s]
            gaps.append({"at": round(reach - first, 2), "seconds": round(s - reach, 2),
                         "last_source_pod_after": round(max(src), 2) if src else None})
        reach = max(reach, e)
    return {"makespan_log_s": round(last - first, 2), "transfer_mean_s": round(busy / len(spans), 2),
            "mean_in_transfer": round(busy / (last - first), 2) if last > first else None,
            "idle_gaps": gaps, "idle_total_s": round(sum(g["seconds"] for g in gaps), 2),
            "first_target_pod_wall": first, "last_succeeded_wall": last}


# ---------------------------------------------------------------------------------------------------------
# the approaches

def vm_keys(lab):
    return sorted(({"namespace": v["metadata"]["namespace"], "name": v["metadata"]["name"]}
                   for v in lab.vmis_on(NODE)), key=lambda vm: (vm["namespace"], vm["name"]))


def create_vmim(cluster, vm, tag):
    body = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "%s-%s" % (vm["name"], tag), "namespace": vm["namespace"],
                         "labels": {"kubevirt.io/vmi-name": vm["name"], "bench": tag}},
            "spec": {"vmiName": vm["name"]}}
    # as the least-privilege user, like the role
    cluster.create(KV + "/namespaces/%s/virtualmachineinstancemigrations" % vm["namespace"], body,
                   "create migration of %s/%s" % (vm["namespace"], vm["name"]))


def wait_succeeded(lab, names, timeout=900, poll=0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        phases = dict(("%s/%s" % (m["metadata"]["namespace"], m["metadata"]["name"]),
                       (m.get("status") or {}).get("phase")) for m in lab.vmims())
        bad = [n for n in names if phases.get(n) == "Failed"]
        if bad:
            raise RuntimeError("migrations failed: %s" % bad)
        if all(phases.get(n) == "Succeeded" for n in names):
            return
        time.sleep(poll)
    raise RuntimeError("migrations not Succeeded after %ss" % timeout)


def run_naive(lab, tag="naive"):
    cluster = lab.cluster()
    vms = vm_keys(lab)
    headroom, refs, _report = headroom_mod.batch_headroom(cluster, vms)
    res_mod.reserve(cluster, "bench-naive", headroom, "bench", "naive: all VMs at once", 7200, refs=refs)
    for vm in vms:
        create_vmim(cluster, vm, tag)
    wait_succeeded(lab, ["%s/%s-%s" % (vm["namespace"], vm["name"], tag) for vm in vms])
    res_mod.release(cluster, "bench-naive", wait_for_pods=True, timeout=600, poll_interval=0.5)
    return {"vms": len(vms), "rc": 0}


def run_serial(lab, tag="serial"):
    cluster = lab.cluster()
    vms = vm_keys(lab)
    for i, vm in enumerate(vms):
        rid = "bench-one-%d" % i
        headroom, refs, _report = headroom_mod.batch_headroom(cluster, [vm])
        res_mod.reserve(cluster, rid, headroom, "bench", "serial: one VM", 7200, refs=refs)
        create_vmim(cluster, vm, tag)
        wait_succeeded(lab, ["%s/%s-%s" % (vm["namespace"], vm["name"], tag)])
        res_mod.release(cluster, rid, wait_for_pods=True, timeout=600, poll_interval=0.5)
    return {"vms": len(vms), "rc": 0}


def baseline_collections(rev, out_dir):
    """(collections path, playbooks dir) of the collection as it was at git revision rev: `git archive` into
    out_dir (nothing in the work tree or its .git changes), under ansible_collections/kvquota/maintenance."""
    tree = os.path.join(out_dir, "ansible_collections", "kvquota", "maintenance")
    os.makedirs(tree)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], stdout=subprocess.PIPE, check=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    return out_dir, os.path.join(tree, "playbooks")


def playbook_env(lab, collections_path):
    """The environment of a benchmarked ansible-playbook: the collections, the lab's least-privilege user, quiet
    output; with KVQ_BENCH_PROFILE=1 each task's time in the output (profile_tasks, in task order)."""
    env = dict(os.environ)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": collections_path,
        "K8S_AUTH_KUBECONFIG": str(lab.lab.user_kubeconfig),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks" if os.environ.get("KVQ_BENCH_PROFILE") else "",
        "PROFILE_TASKS_TASK_OUTPUT_LIMIT": "all",
        "PROFILE_TASKS_SORT_ORDER": "none",
        "PYTHONUNBUFFERED": "1",
    })
    return env


def run_role(lab, extra_vars, out_dir, collections=None):
    """ansible-playbook node_maintenance.yml as the lab's least-privilege user; collections: (path, playbooks dir)
    of another collection tree (--baseline), else the work tree's."""
    collections_path, playbooks = collections or (COLLECTIONS, os.path.join(ROOT, "playbooks"))
    handle, vars_file = tempfile.mkstemp(prefix="kvq-bench-vars-", suffix=".json", dir=out_dir)
    with os.fdopen(handle, "w") as fh:
        json.dump(dict({"node_maintenance_node": NODE}, **(extra_vars or {})), fh)
    env = playbook_env(lab, collections_path)
    out_file = os.path.join(out_dir, "role-%d.out" % int(time.time()))
    with open(out_file, "w") as out:
        proc = subprocess.run(["ansible-playbook", os.path.join(playbooks, "node_maintenance.yml"),
                               "-e", "@" + vars_file], stdout=out, stderr=subprocess.STDOUT, env=env,
                              cwd=out_dir, timeout=1800, check=False)
    with open(out_file) as fh:
        text = fh.read()
    progress = [line.strip().strip('"').replace('"msg": "', "") for line in text.splitlines()
                if "batch " in line and " done:" in line]
    return {"rc": proc.returncode, "output": out_file, "progress": progress,
            "tail": text[-3000:] if proc.returncode else ""}


# ---------------------------------------------------------------------------------------------------------

def largest_batch_need(lab):
    """(plan summary, {resource: max over kvquota_check's batches of the sum over quotas of the batch's need}).
    The plan summary also has by_namespace: {namespace: {resource: that namespace's largest need in one batch}}."""
    cluster = lab.cluster()
    report = check_mod.check(cluster, {"nodes": [NODE]})
    per_batch = []
    by_ns = {}
    for batch in report["batches"]:
        vms = [dict(zip(("namespace", "name"), k.split("/", 1))) if isinstance(k, str) else k for k in batch["vms"]]
        headroom, _refs, _r = headroom_mod.batch_headroom(cluster, vms)
        sums = dict((r, sum(q(h.get(r, "0")) for h in headroom.values())) for r in RESOURCES)
        per_batch.append({"vms": len(vms), "need": sums})
        here = {}
        for (ns, _quota), h in headroom.items():
            for r in RESOURCES:
                here.setdefault(ns, dict((n, 0.0) for n in RESOURCES))[r] += q(h.get(r, "0"))
        for ns, rl in here.items():
            largest = by_ns.setdefault(ns, dict((n, 0.0) for n in RESOURCES))
            for r in RESOURCES:
                largest[r] = max(largest[r], rl[r])
    peak = dict((r, max([b["need"][r] for b in per_batch] or [0.0])) for r in RESOURCES)
    kv = report["kubevirt"]
    return {"batches": len(per_batch), "per_batch": per_batch, "by_namespace": by_ns,
            "parallel_outbound_per_node": kv["parallel_outbound_migrations_per_node"],
            "parallel_per_cluster": kv["parallel_migrations_per_cluster"], "verdict": report["verdict"]}, peak


def restored(lab, base):
    now = base_of(lab.quotas())
    return now == base and not lab.ledgers()


def measured(sampler, run, settle):
    """run() with sampler sampling from its start to settle seconds after its end: (run's detail, or the error it
    raised as {rc: 1, error}; its seconds; the makespan, first migration seen to last Succeeded, or None)."""
    sampler.start()
    started = time.monotonic()
    try:
        detail = run()
    except Exception as exc:  # report, do not lose the other runs
        detail = {"rc": 1, "error": "%s: %s" % (type(exc).__name__, exc)}
    total = time.monotonic() - started
    time.sleep(settle)
    sampler.finish()
    last = max(sampler.succeeded_at.values()) if sampler.succeeded_at else None
    makespan = (last - sampler.first_seen) if last is not None and sampler.first_seen is not None else None
    return detail, total, makespan


def one_run(approach, rep, args, role_vars, baseline=None):
    run_dir = tempfile.mkdtemp(prefix="kvq-benchm-%s-%d-" % (approach, rep))
    log("%s #%d: fresh lab in %s" % (approach, rep, run_dir))
    lab = Lab(run_dir, args.T, args.D)
    try:
        quotas = lab.quotas()
        base = base_of(quotas)
        n = len(lab.vmis_on(NODE))
        plan, batch_peak = largest_batch_need(lab)
        rejected_before = lab.rejections()
        sampler = Sampler(lab, base, args.interval)
        started_wall = time.time()
        runs = {"naive": lambda: run_naive(lab), "serial": lambda: run_serial(lab)}
        detail, total, makespan = measured(
            sampler, runs.get(approach, lambda: run_role(lab, role_vars, run_dir, baseline)), args.settle)
        bound = math.ceil(n / float(plan["parallel_outbound_per_node"])) * args.T
        result = {
            "approach": approach, "rep": rep, "role_vars": role_vars if approach.startswith("role") else None,
            "vms": n, "migrations_succeeded": len(sampler.succeeded_at), "T": args.T, "D": args.D,
            "lower_bound_s": bound, "makespan_s": makespan,
            "makespan_ratio": (makespan / bound) if makespan else None,
            "total_s": total, "total_ratio": total / bound, "lab_setup_s": lab.setup_seconds,
            "peak_extra_hard": sampler.peak_hard, "peak_extra_ledger": sampler.peak_ledger,
            "peak_quotas_expanded": sampler.peak_quotas_expanded,
            "peak_extra_by_namespace": sampler.peak_by_ns,
            "per_namespace_peak_ratio": per_namespace_ratio(sampler.peak_by_ns, plan["by_namespace"]),
            "max_concurrent_migrations": sampler.max_running,
            "largest_batch_need": batch_peak, "plan": plan,
            "rejected_by_quota": lab.rejections() - rejected_before,
            "restored": restored(lab, base), "vms_left_on_node": len(lab.vmis_on(NODE)),
            "samples": sampler.samples, "sample_errors": sampler.errors, "detail": detail,
            "timeline": timeline(lab.emu.log_text(), started_wall),
            "extra_series": [(round(t - started_wall, 2), m, c) for t, m, c in sampler.series],
        }
        tl = result["timeline"]
        log("%s #%d: log makespan %s s, mean in transfer %s, idle %s s in %d gap(s)" % (
            approach, rep, tl.get("makespan_log_s"), tl.get("mean_in_transfer"), tl.get("idle_total_s"),
            len(tl.get("idle_gaps") or [])))
        log("%s #%d: makespan %s s, total %.1f s, peak %s, rejected %d, restored %s, rc %s" % (
            approach, rep, None if makespan is None else round(makespan, 1), total,
            dict((r, round(v, 3)) for r, v in sampler.peak_hard.items()), result["rejected_by_quota"],
            result["restored"], detail.get("rc")))
        return result
    finally:
        lab.stop()
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)


def per_namespace_ratio(peak_by_ns, need_by_ns):
    """{resource: max over namespaces of (peak extra of the namespace / its largest need in one batch)}: 1.0 means
    no namespace ever held more than its largest batch needs."""
    ratio = {}
    for r in RESOURCES:
        values = [peak_by_ns.get(ns, {}).get(r, 0.0) / need[r] for ns, need in need_by_ns.items() if need.get(r)]
        ratio[r] = max(values) if values else None
    return ratio


def fmt_mem(v):
    return "%.2f Gi" % (v / GI)


def table(results):
    lines = []
    head = ("approach", "rep", "makespan s", "x bound", "whole run s", "x bound", "peak +limits.memory (hard/ledger)",
            "peak +limits.cpu (hard/ledger)", "per-ns peak / largest need (mem, cpu)", "quotas up", "rejected",
            "at base")
    rows = []
    for r in results:
        ms = r["makespan_s"]
        rows.append((r["label"], str(r["rep"]), "-" if ms is None else "%.1f" % ms,
                     "-" if ms is None else "%.2f" % r["makespan_ratio"], "%.1f" % r["total_s"],
                     "%.2f" % (r["total_s"] / r["lower_bound_s"]),
                     "%s / %s" % (fmt_mem(r["peak_extra_hard"]["limits.memory"]),
                                  fmt_mem(r["peak_extra_ledger"]["limits.memory"])),
                     "%.3f / %.3f" % (r["peak_extra_hard"]["limits.cpu"], r["peak_extra_ledger"]["limits.cpu"]),
                     ", ".join("-" if r["per_namespace_peak_ratio"][x] is None else "%.2f" % r["per_namespace_peak_ratio"][x]
                               for x in RESOURCES),
                     str(r["peak_quotas_expanded"]), str(r["rejected_by_quota"]), "yes" if r["restored"] else "NO"))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    fmt = " | ".join("%%-%ds" % w for w in widths)
    lines.append(fmt % head)
    lines.append("-+-".join("-" * w for w in widths))
    for row in rows:
        lines.append(fmt % row)
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--approaches", default="role,naive,serial",
                    help="comma-separated: role, role-tuned (role with --tuned-vars), role-base (the role of "
                         "--baseline), naive, serial")
    ap.add_argument("--baseline", default="HEAD",
                    help="git revision whose collection role-base runs (side by side with the work tree's role)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--T", type=float, default=6, help="emulated migration time (knob migration_seconds)")
    ap.add_argument("--D", type=float, default=1, help="knob source_pod_delay_seconds")
    ap.add_argument("--interval", type=float, default=0.5, help="sampling interval (s)")
    ap.add_argument("--settle", type=float, default=1.0, help="sampling after the run (s)")
    ap.add_argument("--role-vars", default="{}", help="JSON extra vars for the role")
    ap.add_argument("--tuned-vars", default='{"node_maintenance_poll_interval": 1}',
                    help="JSON extra vars for role-tuned")
    ap.add_argument("--json", help="write all figures here")
    ap.add_argument("--keep", action="store_true", help="keep the run dirs (logs)")
    args = ap.parse_args(argv)
    kvqlab.find_bin_dir()
    approaches = [a.strip() for a in args.approaches.split(",") if a.strip()]
    baseline = None
    if "role-base" in approaches:
        baseline = baseline_collections(args.baseline, tempfile.mkdtemp(prefix="kvq-benchm-base-"))
        log("role-base: the collection at %s (%s)" % (args.baseline, subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", args.baseline], stdout=subprocess.PIPE, text=True,
            check=True).stdout.strip()))
    results = []
    for rep in range(1, args.repeat + 1):
        for approach in approaches:   # interleaved: rep 1 of each, then rep 2 of each
            vars_ = json.loads(args.tuned_vars if approach == "role-tuned" else args.role_vars) \
                if approach.startswith("role") else None
            r = one_run("role" if approach.startswith("role") else approach, rep, args, vars_,
                        baseline if approach == "role-base" else None)
            r["label"] = approach if not vars_ else "%s %s" % (approach, json.dumps(vars_, sort_keys=True))
            if approach == "role-base":
                r["label"] = "role @ %s" % args.baseline
            results.append(r)
            if args.json:   # write as we go: a partial run still leaves figures
                with open(args.json, "w") as fh:
                    json.dump({"results": results, "args": vars(args)}, fh, indent=1, sort_keys=True)
    first = results[0]
    print("node maintenance of %s, scenario %s: %d VMs, T=%ss, source_pod_delay=%ss, parallelOutbound=%d -> "
          "lower bound %.0f s; kvquota_check batches %d, largest batch needs +%s limits.memory, +%.3f limits.cpu"
          % (NODE, SCENARIO, first["vms"], args.T, args.D, first["plan"]["parallel_outbound_per_node"],
             first["lower_bound_s"], first["plan"]["batches"], fmt_mem(first["largest_batch_need"]["limits.memory"]),
             first["largest_batch_need"]["limits.cpu"]))
    print(table(results))
    for r in results:
        if r["approach"] == "role":
            ok_time = r["makespan_ratio"] is not None and r["makespan_ratio"] <= 1.05
            ok_whole = r["total_ratio"] <= 1.10
            ok_quota = all(r["peak_extra_hard"][x] <= r["largest_batch_need"][x] + 1e-9 for x in RESOURCES)
            ok_ns = all(v is None or v <= 1 + 1e-9 for v in r["per_namespace_peak_ratio"].values())
            print("target %s #%d: makespan <= 1.05 x bound: %s; whole run <= 1.10 x bound: %s; per-namespace peak "
                  "extra <= that namespace's largest batch need: %s (cluster-wide sum <= largest batch: %s)" % (
                      r["label"], r["rep"], "met" if ok_time else "MISSED", "met" if ok_whole else "MISSED",
                      "met" if ok_ns else "MISSED", "yes" if ok_quota else "no"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
