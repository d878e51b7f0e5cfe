# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of a drain someone else drives (issue 12 item 5): scenario d (20 VMs on node-1, 5 tightly budgeted
namespaces) drained by a real `kubectl drain`, so KubeVirt's evacuation controller creates the migrations.

Each approach runs on a FRESH lab, one lab at a time, in the same run:

- nothing: nobody reserves. After --stuck-after seconds (300 by default) it counts the migrations not Succeeded,
  those refused by quota among them, and the VMs still on the node; then it stops the drain.
- harvester: Harvester's way. When a migration turns Pending, reserve that VM's exact need for it; do this for
  every Pending migration. Release each reservation once its migration ended and its source pod is gone. The
  reservations use the collection's core (the reservations service's reserve / release) as the least-privilege
  user; only the timing differs.
- window: the maintenance_window role (playbooks/maintenance_window.yml: nodes [node-1], until nodes_schedulable)
  as the least-privilege user, started before the drain; the node is uncordoned once the drain succeeded.
- rulebook: nobody starts anything for the drain. ansible-rulebook -r kvquota.maintenance.protect_migrations (issue
  28; the venv of `make venv-eda`, KVQ_EDA_VENV) runs as the least-privilege user from before the drain; its
  source sees the refusals and it starts the window (until idle) itself. Stopped once every quota is at its base.

Measured:
- makespan: first migration seen to last Succeeded, against the bound ceil(N / parallelOutboundMigrationsPerNode)
  x T (T = the emulated migration time);
- peak extra quota per namespace, in VMs' worth (spec.hard - base of limits.memory over one VM's charge), against
  that namespace's peak in-flight need. A VM is in flight when it has two live launcher pods (a target admitted,
  or a source not gone yet);
- the same for the total over the namespaces;
- from the first migration seen refused by quota to the first reservation that names it (a ledger's refs, by UID);
- the longest time a namespace's extra quota stays above its in-flight need (a reservation made for a target not
  admitted yet, or kept until its source pod is gone and the quota controller counted it: about one poll).
Targets (window): makespan <= 1.15 x bound; peak extra per namespace <= its peak in-flight need.
Targets (rulebook, issue 28 item 6): the first refused migration reserved within 10 s; makespan <= 1.20 x bound.
--kubevirt 1.7.4 builds scenario d at that version with MigrationPriorityQueue (evacuation creates every migration
of the node at once).
Not a test: it prints a table (--json writes everything).

    python3 tests/bench/bench_window.py [--approaches nothing,harvester,window,rulebook] [--T 6] [--D 1]
        [--stuck-after 300] [--kubevirt 1.5.0|1.7.4] [--rulebook-idle 20] [--json out.json]
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

import bench_maintenance as bm  # noqa: E402  (the lab, the sampler and the figures of the node_maintenance bench)
from bench_maintenance import KV, NODE, base_of, log, q, restored  # noqa: E402

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import headroom as headroom_mod  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations as res_mod  # noqa: E402

FINAL = ("Succeeded", "Failed")
EDA_VENV = os.environ.get("KVQ_EDA_VENV", os.path.expanduser("~/.cache/kvquota/venvs/eda-1.3"))


class WindowSampler(bm.Sampler):
    """The node_maintenance bench's sampler, plus per namespace the extra quota and the VMs in flight in VMs'
    worth (unit: one VM's limits.memory charge at the start)."""

    def __init__(self, lab, base, interval, units):
        bm.Sampler.__init__(self, lab, base, interval)
        self.units = units
        self.peak_units = dict((ns, 0.0) for ns in units)
        self.peak_in_flight = dict((ns, 0) for ns in units)
        self.peak_units_total = 0.0
        self.peak_in_flight_total = 0
        self.refused_at = {}       # migration UID -> when it was first seen refused by quota
        self.reserved_at = {}      # migration UID -> when a ledger's reservation first named it (refs)
        self.first_expanded = None  # when any quota was first seen above its base
        self.over_since = {}       # namespace -> since when its extra exceeds its in-flight need (None: it does not)
        self.longest_over = dict((ns, 0.0) for ns in units)

    def sample(self, now):
        for m in self.lab.vmims():
            uid = m["metadata"]["uid"]
            if uid not in self.refused_at and refused_by_quota(m):
                self.refused_at[uid] = now
        for ledger in self.lab.ledgers().values():
            for entry in (ledger.get("reservations") or {}).values():
                for ref in ((entry.get("refs") or {}).get("migrations") or ()):
                    if ref.get("uid") and ref["uid"] not in self.reserved_at:
                        self.reserved_at[ref["uid"]] = now
        pods = self.lab.rest.get("/api/v1/pods", labelSelector="kubevirt.io=virt-launcher")["items"]
        live = {}
        for pod in pods:
            if (pod.get("status") or {}).get("phase") not in FINAL:
                key = (pod["metadata"]["namespace"], pod["metadata"].get("labels", {}).get("kubevirt.io/created-by"))
                live[key] = live.get(key, 0) + 1
        in_flight = dict((ns, 0) for ns in self.units)
        for (ns, _uid), count in live.items():
            if ns in in_flight and count > 1:
                in_flight[ns] += 1
        bm.Sampler.sample(self, now)
        total = 0.0
        for x in self.lab.quotas():
            ns = x["metadata"]["namespace"]
            base = self.base.get((ns, x["metadata"]["name"]), {})
            if ns in self.units and "limits.memory" in base:
                extra = (q(x["spec"]["hard"]["limits.memory"]) - q(base["limits.memory"])) / self.units[ns]
                if self.first_expanded is None and extra > 0:
                    self.first_expanded = now
                over = extra > in_flight[ns] + 1e-6
                if not over:
                    self.over_since[ns] = None
                elif self.over_since.get(ns) is None:
                    self.over_since[ns] = now
                else:
                    self.longest_over[ns] = max(self.longest_over[ns], now - self.over_since[ns])
                self.peak_units[ns] = max(self.peak_units[ns], extra)
                total += extra
        self.peak_units_total = max(self.peak_units_total, total)
        for ns, count in in_flight.items():
            self.peak_in_flight[ns] = max(self.peak_in_flight[ns], count)
        self.peak_in_flight_total = max(self.peak_in_flight_total, sum(in_flight.values()))


def refused_by_quota(migration):
    return any(c.get("type") == "migrationRejectedByResourceQuota" and c.get("status") == "True"
               for c in (migration.get("status") or {}).get("conditions") or [])


def refusal_to_reservation(sampler):
    """(seconds from the first migration seen refused by quota to the first reservation that names it (a ledger's
    refs, by UID), or None when nothing was refused or it never got one; seconds from that refusal to the first
    quota seen expanded, 0 when the expansion came first)."""
    if not sampler.refused_at:
        return None, None
    uid, refused = min(sampler.refused_at.items(), key=lambda item: item[1])
    reserved = sampler.reserved_at.get(uid)
    own = None if reserved is None else max(0.0, reserved - refused)
    expanded = None if sampler.first_expanded is None else max(0.0, sampler.first_expanded - refused)
    return own, expanded


def units_of(lab):
    """{namespace: one VM's limits.memory charge} from the quotas' status.used at the start."""
    vms = {}
    for v in lab.vmis_on(NODE):
        vms[v["metadata"]["namespace"]] = vms.get(v["metadata"]["namespace"], 0) + 1
    units = {}
    for x in lab.quotas():
        ns = x["metadata"]["namespace"]
        if vms.get(ns):
            units[ns] = q(x["status"]["used"]["limits.memory"]) / vms[ns]
    return units


def start_drain(lab, timeout):
    argv = ["/usr/bin/kubectl", "--kubeconfig", str(lab.lab.admin_kubeconfig), "drain", NODE,
            "--ignore-daemonsets", "--timeout=%ds" % timeout]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)


def run_nothing(lab, args):
    drain = start_drain(lab, int(args.stuck_after) + 60)
    time.sleep(args.stuck_after)
    migrations = lab.vmims()
    stuck = [m for m in migrations if (m.get("status") or {}).get("phase") != "Succeeded"]
    refused = [m for m in stuck if refused_by_quota(m)]
    drain.kill()
    drain.communicate()
    return {"rc": None, "stuck_after_s": args.stuck_after, "migrations": len(migrations), "stuck": len(stuck),
            "stuck_refused_by_quota": len(refused), "vms_left_on_node": len(lab.vmis_on(NODE))}


def run_harvester(lab, args):
    """Reserve for every migration the moment it is Pending; release once it ended and its source pod is gone."""
    cluster = lab.cluster()
    service = res_mod.Reservations(cluster)
    drain = start_drain(lab, 1200)
    reserved, releasers, errors = {}, [], []

    def release(rid):
        try:
            service.release(res_mod.ReleaseRequest(rid, wait_for_pods=True, timeout=600, poll_interval=0.5))
        except Exception as exc:   # reported, not fatal to the measurement
            errors.append("%s: %s" % (rid, exc))

    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline:
        migrations = lab.vmims()
        for m in migrations:
            uid = m["metadata"]["uid"]
            phase = (m.get("status") or {}).get("phase")
            if uid not in reserved and phase in ("", None, "Pending"):
                vm = {"namespace": m["metadata"]["namespace"], "name": m["spec"]["vmiName"]}
                headroom, refs, _report = headroom_mod.batch_headroom(cluster, [vm])
                rid = "harvester-%s" % uid[:8]
                service.reserve(res_mod.ReserveRequest(rid, headroom, "bench", "Harvester's way: one Pending migration",
                                                       7200, refs=refs), enforce_timeout=0)
                reserved[uid] = rid
            elif uid in reserved and phase in FINAL and reserved[uid]:
                thread = threading.Thread(target=release, args=(reserved[uid],), daemon=True)
                thread.start()
                releasers.append(thread)
                reserved[uid] = None
        if drain.poll() is not None and migrations and all((m.get("status") or {}).get("phase") in FINAL
                                                           for m in migrations) and \
                all(v is None for v in reserved.values()):
            break
        time.sleep(0.5)
    for thread in releasers:
        thread.join(600)
    if drain.poll() is None:     # the deadline passed: stop the drain, the figures say what was left
        drain.kill()
    drain.communicate()
    lab.lab.kubectl("uncordon", NODE, check=False)
    return {"rc": drain.returncode, "reservations": len(reserved), "release_errors": errors}


def collections_path():
    """This checkout's collection, and kubernetes.core: the playbook venv's (KVQ_ANSIBLE_VENV_PLAYBOOKS, as in make
    roles-tests; conftest.py puts it in KVQ_ROLES_COLLECTIONS_PATH; the window runs that venv's ansible-playbook)
    or one installed beside the system's ansible."""
    return os.environ.get("KVQ_ROLES_COLLECTIONS_PATH", bm.COLLECTIONS)


def run_window(lab, args, out_dir):
    handle, vars_file = tempfile.mkstemp(prefix="kvq-bench-vars-", suffix=".json", dir=out_dir)
    with os.fdopen(handle, "w") as fh:
        json.dump({"maintenance_window_nodes": [NODE], "maintenance_window_until": "nodes_schedulable",
                   "maintenance_window_deadline_seconds": 1800}, fh)
    env = dict(os.environ)
    env.update({"ANSIBLE_COLLECTIONS_PATH": collections_path(), "K8S_AUTH_KUBECONFIG": str(lab.lab.user_kubeconfig),
                "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
                "ANSIBLE_RETRY_FILES_ENABLED": "0", "PYTHONUNBUFFERED": "1"})
    out_file = os.path.join(out_dir, "window.out")
    with open(out_file, "w") as out:
        venv = os.environ.get("KVQ_ANSIBLE_VENV_PLAYBOOKS")
        playbook = os.path.join(venv, "bin", "ansible-playbook") if venv else "ansible-playbook"
        role = subprocess.Popen([playbook, os.path.join(bm.ROOT, "playbooks", "maintenance_window.yml"),
                                 "-e", "@" + vars_file], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=out_dir)
        time.sleep(args.window_lead)      # the role is up and watching before the drain evicts anything
        drain = start_drain(lab, 1200)
        drain_out = drain.communicate()[0]
        lab.lab.kubectl("uncordon", NODE, check=False)
        role.wait(timeout=600)
    with open(out_file) as fh:
        text = fh.read()
    progress = [line.strip().strip('",').replace('"msg": "', "") for line in text.splitlines() if " done: " in line]
    return {"rc": role.returncode, "drain_rc": drain.returncode, "progress": progress,
            "tail": text[-3000:] if role.returncode else "", "drain_tail": drain_out[-1500:] if drain.returncode else ""}


def run_rulebook(lab, args, out_dir, base):
    """ansible-rulebook -r kvquota.maintenance.protect_migrations as the least-privilege user, started before the
    drain and left alone: its source sees the refusals and starts the window itself (until idle). Once the drain
    succeeded, the node is uncordoned and the rulebook stopped when no quota is expanded any more."""
    rulebook_bin = os.path.join(EDA_VENV, "bin", "ansible-rulebook")
    if not os.path.exists(rulebook_bin):
        raise SystemExit("no ansible-rulebook in %s: make venv-eda (or set KVQ_EDA_VENV)" % EDA_VENV)
    inventory = os.path.join(out_dir, "inventory.yml")
    with open(inventory, "w") as fh:
        fh.write("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                 "      ansible_python_interpreter: %s\n" % os.path.join(EDA_VENV, "bin", "python"))
    variables = os.path.join(out_dir, "rulebook-vars.yml")
    with open(variables, "w") as fh:
        fh.write("kvquota_window_idle_seconds: %d\n" % args.rulebook_idle)
    env = dict(os.environ)
    env.update({"PATH": os.path.join(EDA_VENV, "bin") + os.pathsep + env["PATH"],
                "ANSIBLE_COLLECTIONS_PATH": collections_path(),
                "K8S_AUTH_KUBECONFIG": str(lab.lab.user_kubeconfig), "ANSIBLE_NOCOLOR": "1", "PYTHONUNBUFFERED": "1",
                "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0"})
    out_file = os.path.join(out_dir, "rulebook.out")

    def text():
        with open(out_file) as fh:
            return fh.read()

    with open(out_file, "w") as out:
        rulebook = subprocess.Popen([rulebook_bin, "-r", "kvquota.maintenance.protect_migrations", "-i", inventory,
                                     "--vars", variables, "--env-vars", "K8S_AUTH_KUBECONFIG", "--print-events"],
                                    stdout=out, stderr=subprocess.STDOUT, env=env, cwd=out_dir)
        try:
            deadline = time.monotonic() + 120
            while "source_ready" not in text():
                if rulebook.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the rulebook did not start:\n" + text()[-3000:])
                time.sleep(0.5)
            drain = start_drain(lab, 1200)
            drain_out = drain.communicate()[0]
            lab.lab.kubectl("uncordon", NODE, check=False)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not restored(lab, base):
                time.sleep(1)
            # the window ends by itself once the cluster is idle (kvquota_window_idle_seconds): let it say so
            deadline = time.monotonic() + args.rulebook_idle + 120
            while time.monotonic() < deadline and text().count("PLAY [Maintenance window") > \
                    text().count("maintenance window: "):
                time.sleep(1)
        finally:
            rulebook.terminate()
            try:
                rulebook.wait(30)
            except subprocess.TimeoutExpired:
                rulebook.kill()
    output = text()
    return {"rc": 0 if drain.returncode == 0 else 1, "drain_rc": drain.returncode,
            "windows": output.count("PLAY [Maintenance window"),
            "windows_succeeded": output.count("maintenance window: succeeded"),
            "progress": [line.strip().strip('",').replace('"msg": "', "") for line in output.splitlines()
                         if " done: " in line],
            "tail": output[-3000:] if drain.returncode else "", "drain_tail": drain_out[-1500:] if drain.returncode else ""}


def one_run(approach, args):
    run_dir = tempfile.mkdtemp(prefix="kvq-benchw-%s-" % approach)
    log("%s: fresh lab in %s" % (approach, run_dir))
    scenario = bm.scenarios.load(bm.SCENARIO)
    if args.kubevirt != scenario.data["kubevirt"]["version"]:
        # the whole scenario at that version from the start (its launcher pods sized by it), so that no pod grows
        # when it moves; from v1.7 with MigrationPriorityQueue, evacuation creates every migration at once
        scenario.data["kubevirt"]["version"] = args.kubevirt
        scenario.data["kubevirt"]["configuration"]["developerConfiguration"] = {"featureGates": ["MigrationPriorityQueue"]}
    lab = bm.Lab(run_dir, args.T, args.D, scenario)
    try:
        base = base_of(lab.quotas())
        units = units_of(lab)
        n = len(lab.vmis_on(NODE))
        kv = lab.rest.get(KV + "/namespaces/kubevirt/kubevirts/kubevirt")["spec"]["configuration"]["migrations"]
        per_node = int(kv.get("parallelOutboundMigrationsPerNode", 2))
        sampler = WindowSampler(lab, base, args.interval, units)
        runs = {"nothing": lambda: run_nothing(lab, args), "harvester": lambda: run_harvester(lab, args),
                "window": lambda: run_window(lab, args, run_dir), "rulebook": lambda: run_rulebook(lab, args, run_dir, base)}
        detail, total, makespan = bm.measured(sampler, runs[approach], args.settle)
        first_wait, expanded_wait = refusal_to_reservation(sampler)
        if len(sampler.succeeded_at) < n:
            makespan = None      # not every migration done: no makespan
        bound = math.ceil(n / float(per_node)) * args.T
        result = {
            "approach": approach, "kubevirt": args.kubevirt, "vms": n, "T": args.T, "D": args.D,
            "parallel_outbound_per_node": per_node, "lower_bound_s": bound, "makespan_s": makespan,
            "makespan_ratio": (makespan / bound) if makespan else None, "total_s": total,
            "refusal_to_reservation_s": first_wait, "refusal_to_first_expansion_s": expanded_wait,
            "migrations_refused": len(sampler.refused_at), "longest_over_need_s_by_namespace": sampler.longest_over,
            "migrations_succeeded": len(sampler.succeeded_at),
            "peak_extra_vms_by_namespace": sampler.peak_units, "peak_in_flight_by_namespace": sampler.peak_in_flight,
            "peak_extra_vms_total": sampler.peak_units_total, "peak_in_flight_total": sampler.peak_in_flight_total,
            "peak_extra_hard": sampler.peak_hard, "restored": restored(lab, base),
            "vms_left_on_node": len(lab.vmis_on(NODE)), "samples": sampler.samples,
            "sample_errors": sampler.errors, "detail": detail,
        }
        log("%s: makespan %s s (bound %s s), peak extra %s VMs vs in flight %s, detail %s" % (
            approach, None if makespan is None else round(makespan, 1), bound, round(sampler.peak_units_total, 2),
            sampler.peak_in_flight_total, dict((k, v) for k, v in detail.items() if k not in ("tail", "progress"))))
        return result
    finally:
        lab.stop()
        if not args.keep:
            shutil.rmtree(run_dir, ignore_errors=True)


def over_need(r):
    """Namespaces whose peak extra (VMs' worth) exceeded their peak in-flight need."""
    return sorted(ns for ns, extra in r["peak_extra_vms_by_namespace"].items()
                  if extra > r["peak_in_flight_by_namespace"].get(ns, 0) + 1e-6)


def table(results):
    head = ("approach", "kubevirt", "migrations done", "stuck after wait", "1st refused -> its reservation s",
            "makespan s", "x bound", "whole run s",
            "peak extra per ns (VMs) / peak in flight", "peak extra total (VMs) / in flight",
            "longest over need s", "at base")
    rows = []
    for r in results:
        d = r["detail"]
        per_ns = ", ".join("%s %.1f/%d" % (ns.replace("d-tenant-", "t"), r["peak_extra_vms_by_namespace"][ns],
                                           r["peak_in_flight_by_namespace"][ns])
                           for ns in sorted(r["peak_extra_vms_by_namespace"]))
        rows.append((r["approach"], r["kubevirt"], "%d/%d" % (r["migrations_succeeded"], r["vms"]),
                     "%s (%s refused) at %ss" % (d["stuck"], d["stuck_refused_by_quota"], int(d["stuck_after_s"]))
                     if "stuck" in d else "-",
                     "-" if r.get("refusal_to_reservation_s") is None else "%.1f" % r["refusal_to_reservation_s"],
                     "-" if r["makespan_s"] is None else "%.1f" % r["makespan_s"],
                     "-" if r["makespan_ratio"] is None else "%.2f" % r["makespan_ratio"], "%.1f" % r["total_s"],
                     per_ns, "%.1f / %d" % (r["peak_extra_vms_total"], r["peak_in_flight_total"]),
                     "%.1f" % max(list(r["longest_over_need_s_by_namespace"].values()) or [0.0]),
                     "yes" if r["restored"] else "NO"))
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    fmt = " | ".join("%%-%ds" % w for w in widths)
    return "\n".join([fmt % head, "-+-".join("-" * w for w in widths)] + [fmt % row for row in rows])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--approaches", default="nothing,harvester,window")
    ap.add_argument("--T", type=float, default=6, help="emulated migration time (knob migration_seconds)")
    ap.add_argument("--D", type=float, default=1, help="knob source_pod_delay_seconds")
    ap.add_argument("--stuck-after", type=float, default=300, help="nothing: seconds before counting what is stuck")
    ap.add_argument("--kubevirt", default="1.5.0", help="1.5.0 (scenario d) or 1.7.4 (MigrationPriorityQueue on)")
    ap.add_argument("--window-lead", type=float, default=8, help="window: seconds the role runs before the drain")
    ap.add_argument("--rulebook-idle", type=int, default=20,
                    help="rulebook: kvquota_window_idle_seconds (how long idle before its window ends)")
    ap.add_argument("--interval", type=float, default=0.5, help="sampling interval (s)")
    ap.add_argument("--settle", type=float, default=1.0, help="sampling after the run (s)")
    ap.add_argument("--json", help="write all figures here")
    ap.add_argument("--keep", action="store_true", help="keep the run dirs (logs)")
    args = ap.parse_args(argv)
    bm.kvqlab.find_bin_dir()
    results = []
    for approach in [a.strip() for a in args.approaches.split(",") if a.strip()]:
        results.append(one_run(approach, args))
        if args.json:   # write as we go: a partial run still leaves figures
            with open(args.json, "w") as fh:
                json.dump({"results": results, "args": vars(args)}, fh, indent=1, sort_keys=True)
    first = results[0]
    print("kubectl drain of %s, scenario d: %d VMs, T=%ss, source_pod_delay=%ss, parallelOutbound=%d, KubeVirt %s -> "
          "bound ceil(N/p) x T = %.0f s" % (NODE, first["vms"], args.T, args.D, first["parallel_outbound_per_node"],
                                            args.kubevirt, first["lower_bound_s"]))
    print(table(results))
    for r in results:
        if r["approach"] == "rulebook":
            wait = r.get("refusal_to_reservation_s")
            ok_wait = wait is not None and wait <= 10
            ok_time = r["makespan_ratio"] is not None and r["makespan_ratio"] <= 1.20
            over = over_need(r)
            print("target rulebook: the first refused migration reserved within 10 s: %s (%s); makespan <= 1.20 x "
                  "bound: %s (%s); measured: peak extra per namespace above its peak in-flight need in %s, longest "
                  "expansion above the in-flight need %.1f s"
                  % ("met" if ok_wait else "MISSED", "none refused" if wait is None else "%.1f s" % wait,
                     "met" if ok_time else "MISSED", "-" if r["makespan_ratio"] is None else "%.2f" % r["makespan_ratio"],
                     ", ".join(over) or "none", max(list(r["longest_over_need_s_by_namespace"].values()) or [0.0])))
        if r["approach"] == "window":
            ok_time = r["makespan_ratio"] is not None and r["makespan_ratio"] <= 1.15
            over = over_need(r)
            print("target window: makespan <= 1.15 x bound: %s (%s); peak extra per namespace <= its peak in-flight "
                  "need: %s%s" % ("met" if ok_time else "MISSED", "-" if r["makespan_ratio"] is None else
                                  "%.2f" % r["makespan_ratio"], "met" if not over else "MISSED",
                                  "" if not over else " (%s)" % ", ".join(over)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
