# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of kvquota_check over a whole cluster, against the lab, side by side with its floor.

For each scale (default 0.1 and 1 of tests/lab/scenarios/e.yaml: 5,000 VMIs with their virt-launcher pods,
500 namespaces, 1,000 quotas, 20 nodes) a FRESH lab is started, the scenario is loaded, and then measured in
the same run, interleaved, --repeat times each:

- floor: what any client must do to see the same objects, kubectl listing them as JSON
  (`kubectl get nodes,namespaces,resourcequotas,vmi,vmim -A -o json` and
  `kubectl get pods -A -l kubevirt.io=virt-launcher -o json`), timed; its requests counted from the -v=6
  "Response" log lines (discovery is cached beforehand, as it would be for kubectl on a workstation);
- core: check(cluster, {}) called directly (read + plan + report) in a fresh Python process of its own (imports
  and connection made before the clock starts), wall time, cluster.request_count and the process's peak RSS
  (VmHWM right after the check, before anything is serialised; its peak before the check is in the JSON);
- module: the kvquota_check module through ansible-playbook (wall time of the whole process, and the same
  minus the time of an identical playbook running ansible.builtin.ping, i.e. the module without Ansible's
  fixed start-up cost), its `requests` result; with its default compact result, and with `report: full`
  (every VM's entry: the result before the compact default) as the baseline of the same run. Peak RSS of the
  module's own process (the interpreter Ansible runs is a small wrapper that waits for the real one with
  wait4, which adds one Python start-up to every module run, the ping playbook's included) and of the whole
  ansible-playbook process tree (run under the same kind of wrapper: the largest of controller, workers,
  modules).

All reads use the lab's least-privilege user. Only one lab runs at a time (it is stopped before the next
scale starts). Not a test: it prints a table (and --json writes the figures). Targets: core time <= 1.5x the
floor, module (compact) <= 1.0x the floor; the number of list calls does not grow with the number of VMs (only
continue pages of 500 objects do, exactly as kubectl's).

    python3 tests/bench/bench_check.py [--scales 0.1,1] [--repeat 3] [--json out.json] [--profile]
    python3 tests/bench/bench_check.py --scales 4 --repeat 1   # 20,000 VMIs, 2,000 namespaces, 80 nodes
    python3 tests/bench/bench_check.py --attach RUN_DIR --scales 1   # a lab with the objects already loaded
"""

from __future__ import (absolute_import, division, print_function)

import argparse
import copy
import cProfile
import io
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

__import__("conftest")   # makes the work tree importable as ansible_collections.kvquota.maintenance
import kvqlab  # noqa: E402
from kvqlab import scenarios  # noqa: E402

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import check as check_mod  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import report as report_mod  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils import kvquota_module  # noqa: E402

COLLECTIONS = os.environ["KVQ_COLLECTIONS_PATH"]  # set by the repository root conftest.py
FLOOR_COMMANDS = (
    ["get", "nodes,namespaces,resourcequotas,vmi,vmim", "-A", "-o", "json"],
    ["get", "pods", "-A", "-l", "kubevirt.io=virt-launcher", "-o", "json"],
)


def log(msg):
    print("[bench] %s" % msg, file=sys.stderr, flush=True)


def scaled(scale):
    """Scenario e with its nodes, namespaces (and so quotas) and VMs scaled by `scale`."""
    data = copy.deepcopy(scenarios.load("e").data)
    data["name"] = "e-x%s" % scale
    for node in data["nodes"]:
        node["count"] = max(2, int(round(node["count"] * scale)))
    for ns in data["namespaces"]:
        ns["count"] = max(1, int(round(ns["count"] * scale)))
    nodes = data["nodes"][0]["count"]
    namespaces = data["namespaces"][0]["count"]
    for vm in data["vms"]:
        vm["count"] = max(1, int(round(vm["count"] * scale)))
        vm["spreadNamespaces"] = namespaces
        vm["spreadNodes"] = nodes
    return scenarios.from_dict(data)


def kubectl_floor(kubeconfig, cache_dir):
    """(seconds, (requests, of which continue pages), items) of listing the objects the check reads, with
    kubectl."""
    requests, pages, items = 0, 0, 0
    started = time.monotonic()
    for args in FLOOR_COMMANDS:
        proc = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "--cache-dir", cache_dir, "-v=6"] + args,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        if proc.returncode:
            raise RuntimeError("kubectl %s failed: %s" % (" ".join(args), proc.stderr.decode()[-500:]))
        urls = [line for line in proc.stderr.decode().splitlines() if '"Response" verb=' in line]
        requests += len(urls)
        pages += sum(1 for line in urls if "continue=" in line)
        items += len(json.loads(proc.stdout).get("items") or [])
    return time.monotonic() - started, (requests, pages), items


def _peak_kb():
    """This process's peak RSS in KiB: VmHWM, the high-water mark of its own address space. Not ru_maxrss: a process
    started from a larger one (vfork + exec) inherits that one's peak as the floor of its ru_maxrss."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # KiB on Linux


def core_child(kubeconfig, profile=False):
    """In the child process (--core-child): the figures of one check(cluster, {}) over the whole cluster, on a
    fresh connection, as the JSON-able dict core_check returns."""
    # as the module connects (kubernetes.core's client configuration), with this process's K8S_AUTH_* set aside
    for name in [name for name in os.environ if name.startswith("K8S_AUTH_")]:
        del os.environ[name]
    cluster = kvquota_module.connect({"kubeconfig": kubeconfig})
    urls = []
    rest = cluster.api_client.rest_client
    counted = rest.request

    def recorded(method, url, *args, **kwargs):
        urls.append(url)
        return counted(method, url, *args, **kwargs)
    rest.request = recorded
    read = []
    reader = check_mod.read_inventory

    def timed_read(*args, **kwargs):   # check.py's own name for inventory.read_inventory
        begun = time.monotonic()
        try:
            return reader(*args, **kwargs)
        finally:
            read.append(time.monotonic() - begun)
    check_mod.read_inventory = timed_read
    prof = cProfile.Profile() if profile else None
    before_kb = _peak_kb()
    started = time.monotonic()
    if prof is not None:
        prof.enable()
    report = check_mod.check(cluster, {})
    if prof is not None:
        prof.disable()
    seconds = time.monotonic() - started
    peak_kb = _peak_kb()
    assert len(urls) == cluster.request_count == report["requests"], (len(urls), cluster.request_count)
    figures = {
        "seconds": seconds,
        "read_seconds": read[0],
        "requests": [cluster.request_count, sum(1 for url in urls if "continue=" in url)],
        "peak_rss_kb": peak_kb,
        "rss_before_kb": before_kb,
        "vmis": sum(len(ns["vms"]) for ns in report["namespaces"].values()),
        "namespaces": report["summary"]["namespaces"],
        "quotas": sum(len(ns["quotas"]) for ns in report["namespaces"].values()),
        "summary": report["summary"],
        "verdict": report["verdict"],
        "result_bytes": len(json.dumps(report_mod.compact(report))),
        "full_result_bytes": len(json.dumps(report)),
    }
    if prof is not None:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(30)
        figures["profile"] = text.getvalue()
    return figures


def core_check(kubeconfig, tmp, profile=False):
    """The figures of check() over the whole cluster (core_child), measured in a fresh process: its own peak RSS,
    no memory of the lab loading or of earlier rounds."""
    out = os.path.join(tmp, "core.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--core-child", kubeconfig, "--json", out]
    proc = subprocess.run(cmd + (["--profile"] if profile else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          check=False)
    if proc.returncode:
        raise RuntimeError("the core check failed:\n%s" % proc.stderr.decode()[-3000:])
    with open(out) as fh:
        return json.load(fh)


def _playbook(task, out):
    return [{"hosts": "localhost", "gather_facts": False, "tasks": [
        dict(task, name="measured", register="kvq"),
        {"name": "save", "ansible.builtin.copy": {
            "dest": out, "content": "{{ {'requests': kvq.requests | default(None), 'summary': kvq.summary "
                                    "| default(None), 'verdict': kvq.verdict | default(None)} | to_json }}"}}]}]


RSS_RUN = """#!%(python)s
# runs %(prefix)r + its arguments, waits for it with wait4 and appends its peak RSS (ru_maxrss: the largest of it
# and its reaped descendants) to the log; started from this small process, the measured one does not inherit a
# larger parent's peak as the floor of its ru_maxrss (a vfork + exec keeps the parent's high-water mark)
import json, os, subprocess, sys
child = subprocess.Popen(%(prefix)r + sys.argv[1:])
_pid, status, usage = os.wait4(child.pid, 0)
with open(%(log)r, "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[1:], "peak_rss_kb": usage.ru_maxrss}) + "\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def rss_run(tmp, name, prefix):
    """(path, log): an executable that runs prefix + its arguments and logs the peak RSS of that process (and of
    its reaped descendants) to log, one JSON line per run."""
    path = os.path.join(tmp, name)
    log = os.path.join(tmp, name + ".jsonl")
    with open(path, "w") as fh:
        fh.write(RSS_RUN % {"python": sys.executable, "prefix": list(prefix), "log": log})
    os.chmod(path, 0o755)
    if os.path.exists(log):
        os.unlink(log)
    return path, log


def _logged(log, match=""):
    """The largest peak RSS (KiB) logged for a command line containing match, or None."""
    if not os.path.exists(log):
        return None
    with open(log) as fh:
        seen = [run["peak_rss_kb"] for run in (json.loads(line) for line in fh if line.strip())
                if any(match in arg for arg in run["argv"])]
    return max(seen) if seen else None


def ansible_run(task, kubeconfig, tmp, module=None):
    """(seconds, result, rss) of an ansible-playbook run of one task, authenticated by K8S_AUTH_KUBECONFIG. rss:
    {"tree_kb": peak RSS of the ansible-playbook process tree (the largest of controller, workers and modules),
    "module_kb": the peak RSS of the process of `module` (its AnsiballZ run; None when not given or not seen)}:
    ansible-playbook runs under an rss_run launcher, the modules under an rss_run interpreter."""
    out = os.path.join(tmp, "result.json")
    book = os.path.join(tmp, "play.yml")
    with open(book, "w") as fh:
        json.dump(_playbook(task, out), fh)
    interpreter, module_log = rss_run(tmp, "python-rss", [sys.executable])
    launcher, tree_log = rss_run(tmp, "run-rss", [])
    env = dict((k, v) for k, v in os.environ.items() if not k.startswith("K8S_AUTH_"))
    env.update({"ANSIBLE_COLLECTIONS_PATH": COLLECTIONS, "K8S_AUTH_KUBECONFIG": kubeconfig,
                "ANSIBLE_PYTHON_INTERPRETER": interpreter, "ANSIBLE_LOCALHOST_WARNING": "0",
                "ANSIBLE_PIPELINING": "False",   # the module's file name is on its command line (the wrapper's log)
                "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0", "ANSIBLE_DEPRECATION_WARNINGS": "0"})
    started = time.monotonic()
    proc = subprocess.run([launcher, shutil.which("ansible-playbook"), "-i", "localhost,", "-c", "local", book],
                          env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    seconds = time.monotonic() - started
    if proc.returncode:
        raise RuntimeError("ansible-playbook failed:\n%s\n%s" % (proc.stdout.decode()[-2000:],
                                                                 proc.stderr.decode()[-2000:]))
    rss = {"tree_kb": _logged(tree_log), "module_kb": _logged(module_log, "AnsiballZ_%s.py" % module) if module else None}
    with open(out) as fh:
        return seconds, json.load(fh), rss


def _mb(kb):
    return None if kb is None else round(kb / 1024.0, 1)


def measure(lab, repeat, profile=False):
    """The figures of one loaded lab."""
    kubeconfig = str(lab.user_kubeconfig)
    tmp = tempfile.mkdtemp(prefix="kvq-bench-check-")
    cache_dir = os.path.join(tmp, "kube-cache")
    check_task = {"kvquota.maintenance.kvquota_check": {}}
    full_task = {"kvquota.maintenance.kvquota_check": {"report": "full"}}
    try:
        kubectl_floor(kubeconfig, cache_dir)                                   # fills kubectl's discovery cache
        _s, floor_requests, items = kubectl_floor(kubeconfig, cache_dir)
        floor, core, module, module_full, ping, read = [], [], [], [], [], []
        core_rss, module_rss, module_tree, full_rss, full_tree, ping_tree = [], [], [], [], [], []
        core_requests, module_result, core_figures, profile_text = None, None, None, None
        for i in range(repeat):
            seconds, requests, listed = kubectl_floor(kubeconfig, cache_dir)
            floor.append(seconds)
            assert requests == floor_requests and listed == items, (requests, listed)
            core_figures = core_check(kubeconfig, tmp, profile and i == 0)
            profile_text = core_figures.pop("profile", profile_text)
            core.append(core_figures["seconds"])
            read.append(core_figures["read_seconds"])
            core_requests = tuple(core_figures["requests"])
            core_rss.append(core_figures["peak_rss_kb"])
            seconds, module_result, rss = ansible_run(check_task, kubeconfig, tmp, "kvquota_check")
            module.append(seconds)
            module_rss.append(rss["module_kb"])
            module_tree.append(rss["tree_kb"])
            seconds, full_result, rss = ansible_run(full_task, kubeconfig, tmp, "kvquota_check")
            module_full.append(seconds)
            full_rss.append(rss["module_kb"])
            full_tree.append(rss["tree_kb"])
            seconds, _ping, rss = ansible_run({"ansible.builtin.ping": {}}, kubeconfig, tmp)
            ping.append(seconds)
            ping_tree.append(rss["tree_kb"])
            log("round %d: floor %.2fs, core %.2fs (%s MB), module %.2fs (%s MB), module report=full %.2fs (%s MB) "
                "(ping playbook %.2fs)" % (i + 1, floor[-1], core[-1], _mb(core_rss[-1]), module[-1],
                                           _mb(module_rss[-1]), module_full[-1], _mb(full_rss[-1]), ping[-1]))
        figures = {
            "vmis": core_figures["vmis"],
            "namespaces": core_figures["namespaces"],
            "quotas": core_figures["quotas"],
            "listed_objects": items,
            "floor_seconds": statistics.median(floor),
            "floor_requests": floor_requests,
            "core_seconds": statistics.median(core),
            "core_read_seconds": statistics.median(read),
            "core_requests": core_requests,
            "core_peak_rss_mb": _mb(max(core_rss)),
            "core_rss_before_check_mb": _mb(core_figures["rss_before_kb"]),
            "module_seconds": statistics.median(module),
            "module_minus_ansible_seconds": statistics.median(m - p for m, p in zip(module, ping)),
            "module_requests": module_result["requests"],
            "module_peak_rss_mb": _mb(max(module_rss)) if None not in module_rss else None,
            "module_tree_peak_rss_mb": _mb(max(module_tree)),
            "module_full_seconds": statistics.median(module_full),
            "module_full_minus_ansible_seconds": statistics.median(m - p for m, p in zip(module_full, ping)),
            "module_full_peak_rss_mb": _mb(max(full_rss)) if None not in full_rss else None,
            "module_full_tree_peak_rss_mb": _mb(max(full_tree)),
            "ping_tree_peak_rss_mb": _mb(max(ping_tree)),
            "result_bytes": core_figures["result_bytes"],
            "full_result_bytes": core_figures["full_result_bytes"],
            "verdict": core_figures["verdict"],
            "runs": {"floor": floor, "core": core, "core_read": read, "module": module, "module_full": module_full,
                     "ping": ping, "core_peak_rss_kb": core_rss, "module_peak_rss_kb": module_rss,
                     "module_tree_peak_rss_kb": module_tree, "module_full_peak_rss_kb": full_rss,
                     "module_full_tree_peak_rss_kb": full_tree, "ping_tree_peak_rss_kb": ping_tree},
        }
        figures["ratio"] = figures["core_seconds"] / figures["floor_seconds"]
        figures["module_ratio"] = figures["module_seconds"] / figures["floor_seconds"]
        figures["module_full_ratio"] = figures["module_full_seconds"] / figures["floor_seconds"]
        for result in (module_result, full_result):
            assert result["summary"] == core_figures["summary"], (result["summary"], core_figures["summary"])
        if profile_text is not None:
            figures["profile"] = profile_text
        return figures
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_scale(scale, args):
    sc = scaled(scale)
    if args.attach:
        lab = kvqlab.attach(args.attach)
        return measure(lab, args.repeat, args.profile)
    run_dir = os.path.join(args.run_dir, "x%s" % scale)
    log("scale %s: starting a fresh lab in %s" % (scale, run_dir))
    lab = kvqlab.up(run_dir=run_dir)
    try:
        started = time.monotonic()
        result = scenarios.apply(lab, sc, timeout=3600, log=lambda m: log("  apply " + m))
        log("scale %s: loaded in %.0fs (%s)" % (scale, time.monotonic() - started, result.timings))
        figures = measure(lab, args.repeat, args.profile)
        figures["load_seconds"] = round(time.monotonic() - started, 1)
        return figures
    finally:
        kvqlab.down(run_dir)


def table(rows):
    head = ("scale", "VMIs", "ns", "quotas", "floor s (kubectl)", "floor req (lists+pages)", "check s (read + plan)",
            "check/floor", "check req (lists+pages)", "check peak RSS MB", "module s", "module/floor",
            "module - ansible s", "module req", "module peak RSS MB (process / ansible tree)", "result MB",
            "report=full s", "full/floor", "full - ansible s", "full peak RSS MB (process / ansible tree)",
            "full result MB")
    lines = [" | ".join(head), " | ".join("---" for _column in head)]

    def req(pair):
        return "%d (%d+%d)" % (pair[0], pair[0] - pair[1], pair[1])
    for scale, f in rows:
        lines.append(" | ".join(str(x) for x in (
            scale, f["vmis"], f["namespaces"], f["quotas"], "%.2f" % f["floor_seconds"], req(f["floor_requests"]),
            "%.2f (%.2f + %.2f)" % (f["core_seconds"], f["core_read_seconds"], f["core_seconds"] - f["core_read_seconds"]),
            "%.2fx" % f["ratio"], req(f["core_requests"]), f["core_peak_rss_mb"],
            "%.2f" % f["module_seconds"], "%.2fx" % f["module_ratio"], "%.2f" % f["module_minus_ansible_seconds"],
            f["module_requests"], "%s / %s" % (f["module_peak_rss_mb"], f["module_tree_peak_rss_mb"]),
            "%.2f" % (f["result_bytes"] / 1e6),
            "%.2f" % f["module_full_seconds"], "%.2fx" % f["module_full_ratio"],
            "%.2f" % f["module_full_minus_ansible_seconds"],
            "%s / %s" % (f["module_full_peak_rss_mb"], f["module_full_tree_peak_rss_mb"]),
            "%.2f" % (f["full_result_bytes"] / 1e6))))
    return "\n".join("| %s |" % line for line in lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--scales", default="0.1,1", help="comma-separated fractions of scenario e (default 0.1,1)")
    ap.add_argument("--repeat", type=int, default=3, help="measured rounds per scale (median shown)")
    ap.add_argument("--run-dir", default=os.path.join(tempfile.gettempdir(), "kvq-bench-check"),
                    help="where the labs are started (one at a time)")
    ap.add_argument("--attach", help="measure the lab already running in this run dir (objects loaded)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--profile", action="store_true", help="cProfile the first core check of each scale")
    ap.add_argument("--core-child", metavar="KUBECONFIG", help=argparse.SUPPRESS)   # core_check's own process
    args = ap.parse_args(argv)
    if args.core_child:
        figures = core_child(args.core_child, args.profile)
        with open(args.json, "w") as fh:
            json.dump(figures, fh)
        return 0
    rows = []
    for text in args.scales.split(","):
        scale = float(text) if "." in text else int(text)
        rows.append((scale, run_scale(scale, args)))
        if args.profile:
            print(rows[-1][1]["profile"])
    print(table(rows))
    target_time = all(f["ratio"] <= 1.5 for _s, f in rows)
    target_module = all(f["module_ratio"] <= 1.0 for _s, f in rows)
    lists = sorted(set(f["core_requests"][0] - f["core_requests"][1] for _s, f in rows))
    pages = all(f["core_requests"][1] == f["floor_requests"][1] for _s, f in rows)
    print("\ncheck <= 1.5x floor: %s; module <= 1.0x floor: %s; list calls at every scale: %s (%s); continue "
          "pages the same as kubectl's: %s" % ("yes" if target_time else "NO", "yes" if target_module else "NO",
                                               ", ".join(map(str, lists)), "equal" if len(lists) == 1 else "NOT equal",
                                               "yes" if pages else "NO"))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([{"scale": s, **f} for s, f in rows], fh, indent=1)
    return 0 if target_time else 1


if __name__ == "__main__":
    sys.exit(main())
