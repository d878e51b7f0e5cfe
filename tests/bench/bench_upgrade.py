# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of a whole-cluster rolling upgrade (scenario u: 60 VMs on 6 nodes, 10 tightly budgeted namespaces,
KubeVirt's default limits), against the lab, side by side in one run, each approach on a FRESH lab:

- node-by-node @ <baseline>: playbooks/upgrade.yml of the collection at git revision --baseline (default 0a09e82,
  before waves and steering): node by node, nothing steering the targets;
- the work tree's playbooks/upgrade.yml with rolling_upgrade_max_unavailable 1 without steering, 1 with steering,
  2 and 3 (with steering);
- the bound: ceil(migrations / parallelMigrationsPerCluster) x T plus the hooks (a no-op hook here), computed for
  each run from the migrations it made (a run that moves VMs twice has a larger bound: the ratio measures speed
  only; migrations per VM says the rest).

Measured per run: the whole upgrade (the playbook process), its ratio to the bound; migrations per VM (Succeeded
migrations / VMs) and how many VMs moved more than once; per namespace the peak extra quota (spec.hard - base)
against its in-flight need (what a batch of as many of its VMs as it ever had migrations under way at once,
Pending included, needs its quotas to grow by) and against its largest batch's need (as many VMs as one reservation
carried: the label kvquota.io/reservation on the migrations); "exceeded quota" refusals; quotas back at base and taints gone.

Targets (issue 29): max_unavailable 3 at most 1.25 x the bound; migrations per VM at most 1.1; per-namespace peak
within the in-flight need. Not a test: it prints a table (--json writes everything).

    python3 tests/bench/bench_upgrade.py [--approaches base,1,1s,2s,3s] [--T 6] [--json out.json]
"""

from __future__ import (absolute_import, division, print_function)

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_maintenance as bm  # noqa: E402  (its lab, sampler and baseline tree)

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as headroom_mod  # noqa: E402

SCENARIO = "u"
PREFIX = "u-tenant-"
TAINT = "kvquota.io/upgrade-pending"
IN_FLIGHT = ("Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "")

APPROACHES = {
    # name: (label, extra vars, from the baseline tree)
    "base": ("node by node @ baseline", {}, True),
    "1": ("max_unavailable 1, no steering", {"rolling_upgrade_max_unavailable": 1, "rolling_upgrade_steer": False}, False),
    "1s": ("max_unavailable 1, steering", {"rolling_upgrade_max_unavailable": 1, "rolling_upgrade_steer": True}, False),
    "2s": ("max_unavailable 2, steering", {"rolling_upgrade_max_unavailable": 2, "rolling_upgrade_steer": True}, False),
    "3s": ("max_unavailable 3, steering", {"rolling_upgrade_max_unavailable": 3, "rolling_upgrade_steer": True}, False),
}


class Lab(bm.Lab):
    """bm.Lab with scenario u: its quotas and ledgers are the u-tenant-* namespaces'."""

    def quotas(self):
        return [x for x in self.rest.get("/api/v1/resourcequotas")["items"]
                if x["metadata"]["namespace"].startswith(PREFIX)]

    def ledgers(self):
        return dict((key, ledger) for key, ledger in bm.state.ledgers(self.rest).items()
                    if str(key[0]).startswith(PREFIX))

    def nodes(self):
        return self.rest.get("/api/v1/nodes")["items"]


class InFlight(threading.Thread):
    """Every interval s: per namespace, its migrations under way (not final); the largest count seen."""

    def __init__(self, lab, interval):
        threading.Thread.__init__(self, daemon=True)
        self.lab, self.interval = lab, interval
        self.stopping = threading.Event()
        self.peak = {}

    def run(self):
        while not self.stopping.is_set():
            try:
                counts = {}
                for m in self.lab.vmims():
                    if (m.get("status") or {}).get("phase", "") in IN_FLIGHT:
                        ns = m["metadata"]["namespace"]
                        counts[ns] = counts.get(ns, 0) + 1
                for ns, n in counts.items():
                    self.peak[ns] = max(self.peak.get(ns, 0), n)
            except Exception:   # a transient API error must not end the measurement
                pass
            self.stopping.wait(self.interval)

    def finish(self):
        self.stopping.set()
        self.join(10)


def run_upgrade(lab, extra_vars, out_dir, collections):
    """ansible-playbook upgrade.yml (every node, in name order, a no-op hook) as the lab's least-privilege user."""
    collections_path, playbooks = collections
    hook = os.path.join(out_dir, "hook.yml")
    with open(hook, "w") as fh:
        fh.write("- name: Pretend to upgrade the node\n  ansible.builtin.debug:\n"
                 "    msg: upgrading {{ node_maintenance_node }}\n")
    handle, vars_file = tempfile.mkstemp(prefix="kvq-bench-vars-", suffix=".json", dir=out_dir)
    with os.fdopen(handle, "w") as fh:
        json.dump(dict({"rolling_upgrade_tasks": hook, "rolling_upgrade_health_interval": 1}, **extra_vars), fh)
    env = bm.playbook_env(lab, collections_path)
    out_file = os.path.join(out_dir, "upgrade-%d.out" % int(time.time()))
    with open(out_file, "w") as out:
        proc = subprocess.run(["ansible-playbook", os.path.join(playbooks, "upgrade.yml"), "-e", "@" + vars_file],
                              stdout=out, stderr=subprocess.STDOUT, env=env, cwd=out_dir, timeout=3600, check=False)
    with open(out_file) as fh:
        text = fh.read()
    return {"rc": proc.returncode, "output": out_file, "tail": text[-3000:] if proc.returncode else "",
            "summary": [line.strip().strip('",') for line in text.splitlines()
                        if "rolling upgrade: " in line or "migrations per VM: " in line]}


def batch_needs(lab):
    """{namespace: {k: what a batch of k of its VMs needs its quotas to grow by (limits.memory, limits.cpu)}}, from
    the collection's own sizing before anything moves (k x a VM's target charge, less the room the quota has)."""
    cluster = lab.cluster()
    names = {}
    for vmi in lab.rest.get(bm.KV + "/virtualmachineinstances")["items"]:
        ns = vmi["metadata"]["namespace"]
        if ns.startswith(PREFIX):
            names.setdefault(ns, []).append(vmi["metadata"]["name"])
    need = {}
    for ns, vms in sorted(names.items()):
        for k in range(1, len(vms) + 1):
            headroom, _refs, _r = headroom_mod.batch_headroom(cluster, [{"namespace": ns, "name": n} for n in vms[:k]])
            need.setdefault(ns, {})[k] = dict((r, sum(bm.q(h.get(r, "0")) for h in headroom.values()))
                                              for r in bm.RESOURCES)
    return need


def largest_batch_count(lab):
    """{namespace: the most of its migrations one reservation (batch) carried}, from the label kvquota.io/reservation
    the executor puts on each migration it creates: what a namespace's reservation is sized for at once."""
    per = {}
    for m in lab.vmims():
        ns = m["metadata"]["namespace"]
        rid = ((m["metadata"].get("labels") or {}).get("kvquota.io/reservation"))
        if ns.startswith(PREFIX) and rid:
            per[(ns, rid)] = per.get((ns, rid), 0) + 1
    largest = {}
    for (ns, _rid), n in per.items():
        largest[ns] = max(largest.get(ns, 0), n)
    return largest


def migrations_per_vm(lab):
    counts = {}
    for m in lab.vmims():
        if (m.get("status") or {}).get("phase") == "Succeeded" and m["metadata"]["namespace"].startswith(PREFIX):
            key = "%s/%s" % (m["metadata"]["namespace"], m["spec"]["vmiName"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def one_run(name, args, baseline):
    label, extra, from_base = APPROACHES[name]
    run_dir = tempfile.mkdtemp(prefix="kvq-benchu-%s-" % name)
    bm.log("%s: fresh lab in %s" % (label, run_dir))
    lab = Lab(run_dir, args.T, args.D, scenario=bm.scenarios.load(SCENARIO))
    try:
        base = bm.base_of(lab.quotas())
        vms = len([v for v in lab.rest.get(bm.KV + "/virtualmachineinstances")["items"]
                   if v["metadata"]["namespace"].startswith(PREFIX)])
        need = batch_needs(lab)
        sampler = bm.Sampler(lab, base, args.interval)
        flight = InFlight(lab, args.interval)
        flight.start()
        rejected_before = lab.rejections()
        collections = baseline if from_base else (bm.COLLECTIONS, os.path.join(bm.ROOT, "playbooks"))
        detail, total, makespan = bm.measured(sampler, lambda: run_upgrade(lab, extra, run_dir, collections),
                                              args.settle)
        flight.finish()
        moves = migrations_per_vm(lab)
        migrations = sum(moves.values())
        per_cluster = 5
        bound = math.ceil(migrations / float(per_cluster)) * args.T
        batch_count = largest_batch_count(lab)

        def ratio(counts):
            ratios = {}
            for ns, peak in sampler.peak_by_ns.items():
                for r in bm.RESOURCES:
                    allowed = need.get(ns, {}).get(counts.get(ns, 0), {}).get(r, 0.0)
                    value = peak[r] / allowed if allowed else (0.0 if peak[r] <= 0 else float("inf"))
                    ratios[r] = max(ratios.get(r, 0.0), value)
            return ratios
        ratios = ratio(flight.peak)
        result = {
            "approach": name, "label": label, "extra_vars": extra, "vms": vms, "migrations": migrations,
            "per_vm": migrations / float(vms) if vms else None,
            "moved_more_than_once": sorted(k for k, n in moves.items() if n > 1),
            "T": args.T, "D": args.D, "bound_s": bound, "total_s": total, "total_ratio": total / bound if bound else None,
            "makespan_s": makespan, "per_namespace_peak_ratio": ratios, "in_flight_peak": flight.peak,
            "per_namespace_peak_batch_ratio": ratio(batch_count), "largest_batch_count": batch_count,
            "peak_extra_by_namespace": sampler.peak_by_ns,
            "batch_needs": dict((ns, dict((str(k), v) for k, v in by_k.items())) for ns, by_k in need.items()),
            "rejected_by_quota": lab.rejections() - rejected_before, "restored": bm.restored(lab, base),
            "taints_left": sorted(n["metadata"]["name"] for n in lab.nodes()
                                  if any(t.get("key") == TAINT for t in n["spec"].get("taints") or [])),
            "cordoned_left": sorted(n["metadata"]["name"] for n in lab.nodes() if n["spec"].get("unschedulable")),
            "detail": detail,
        }
        bm.log("%s: %.1f s (bound %d s, x%.2f), %d migrations of %d VMs, restored %s, rc %s" % (
            label, total, bound, result["total_ratio"] or 0, migrations, vms, result["restored"], detail.get("rc")))
        return result
    finally:
        lab.stop()
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)


def table(results):
    head = ("approach", "whole upgrade s", "bound s", "x bound", "migrations / VM", "moved twice", "per-ns peak / "
            "in-flight need (mem, cpu)", "per-ns peak / largest batch need", "rejected", "at base", "taints left", "rc")
    rows = []
    for r in results:
        rows.append((r["label"], "%.1f" % r["total_s"], "%d" % r["bound_s"], "%.2f" % (r["total_ratio"] or 0),
                     "%.2f" % (r["per_vm"] or 0), str(len(r["moved_more_than_once"])),
                     ", ".join("%.2f" % r["per_namespace_peak_ratio"].get(x, 0.0) for x in bm.RESOURCES),
                     ", ".join("%.2f" % r["per_namespace_peak_batch_ratio"].get(x, 0.0) for x in bm.RESOURCES),
                     str(r["rejected_by_quota"]), "yes" if r["restored"] else "NO",
                     ",".join(r["taints_left"]) or "none", str(r["detail"].get("rc"))))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    fmt = " | ".join("%%-%ds" % w for w in widths)
    return "\n".join([fmt % head, "-+-".join("-" * w for w in widths)] + [fmt % row for row in rows])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--approaches", default="base,1,1s,2s,3s", help="comma-separated of %s" % ", ".join(APPROACHES))
    ap.add_argument("--baseline", default="0a09e82", help="git revision of the node-by-node role (approach base)")
    ap.add_argument("--T", type=float, default=6, help="emulated migration time (knob migration_seconds)")
    ap.add_argument("--D", type=float, default=1, help="knob source_pod_delay_seconds")
    ap.add_argument("--interval", type=float, default=0.5, help="sampling interval (s)")
    ap.add_argument("--settle", type=float, default=1.0, help="sampling after the run (s)")
    ap.add_argument("--json", help="write all figures here")
    ap.add_argument("--keep", action="store_true", help="keep the run dirs (logs)")
    args = ap.parse_args(argv)
    bm.kvqlab.find_bin_dir()
    names = [a.strip() for a in args.approaches.split(",") if a.strip()]
    baseline = None
    if "base" in names:
        baseline = bm.baseline_collections(args.baseline, tempfile.mkdtemp(prefix="kvq-benchu-base-"))
    results = []
    for name in names:
        results.append(one_run(name, args, baseline))
        if args.json:   # as we go: a partial run still leaves figures
            with open(args.json, "w") as fh:
                json.dump({"results": results, "args": vars(args)}, fh, indent=1, sort_keys=True)
    print("rolling upgrade of scenario %s: %d VMs on 6 nodes, T=%ss, source_pod_delay=%ss, parallelMigrationsPerCluster 5, "
          "parallelOutboundMigrationsPerNode 2; bound = ceil(migrations / 5) x T (no-op hooks)"
          % (SCENARIO, results[0]["vms"], args.T, args.D))
    print(table(results))
    for r in results:
        if r["approach"] == "3s":
            print("target max_unavailable 3: <= 1.25 x bound: %s; migrations per VM <= 1.1: %s; per-namespace peak "
                  "within the in-flight need: %s" % (
                      "met" if (r["total_ratio"] or 99) <= 1.25 else "MISSED",
                      "met" if (r["per_vm"] or 99) <= 1.1 else "MISSED",
                      "met" if all(v <= 1 + 1e-9 for v in r["per_namespace_peak_ratio"].values()) else "MISSED"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
