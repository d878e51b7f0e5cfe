# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start or stop the kvquota lab for a Molecule scenario (shared/create.yml and shared/destroy.yml call this).

    lab.py up   RUN_DIR SCENARIO [--vms-on NODE] [--overhead-ratio R] [--agent-restart-on-reservation NAMESPACE]
        control plane + KubeVirt emulator + lab scenario (tests/lab/scenarios); writes RUN_DIR/molecule.json:
        the node running most of the scenario's VMs, the base spec.hard of every quota, the VMs, kubeconfigs.
        --vms-on NODE: start every VM of the scenario on NODE (its first launcher pod only), so that the
            maintenance of NODE migrates all of them.
        --overhead-ratio R: then raise the KubeVirt CR's additionalGuestMemoryOverheadRatio to R while the VMs
            run (field report d: 1.5 -> 4.5); the running launcher pods keep their size, new ones are larger.
        --agent-restart-on-reservation NAMESPACE: start a watcher (stopped by `down`) that restarts Rancher's
            cattle-cluster-agent (emulator knob rancher_agent_restart) as soon as NAMESPACE's
            field.cattle.io/resourceQuota annotation leaves its base, i.e. while the first reservation is held,
            and records in RUN_DIR/agent-restart.json the annotation just before and just after the restart.
    lab.py down RUN_DIR
"""
import argparse
import json
import os
import sys
import time

import kvqlab   # installed from tests/lab by make deps (tests/lab/pyproject.toml)
from kvqlab import emulator, scenarios
from kvqlab.emulator import _rest_for

KV = "/apis/kubevirt.io/v1"
RANCHER_ANNOTATION = "field.cattle.io/resourceQuota"
WATCHER = "agent-restart-watcher"
WATCH_TIMEOUT = 900


def busiest_node(rest, vms):
    counts = {}
    for ns, vm in vms:
        vmi = rest.get(KV + "/namespaces/%s/virtualmachineinstances/%s" % (ns, vm))
        counts[vmi["status"]["nodeName"]] = counts.get(vmi["status"]["nodeName"], 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[0][0]


def raise_overhead_ratio(rest, ratio):
    """Patch the KubeVirt CR's ratio; {"before", "after"}."""
    kubevirt = rest.get(KV + "/kubevirts")["items"][0]
    before = ((kubevirt.get("spec") or {}).get("configuration") or {}).get("additionalGuestMemoryOverheadRatio")
    rest.patch(KV + "/namespaces/%s/kubevirts/%s" % (kubevirt["metadata"]["namespace"], kubevirt["metadata"]["name"]),
               {"spec": {"configuration": {"additionalGuestMemoryOverheadRatio": ratio}}},
               content_type="application/merge-patch+json")
    return {"before": before, "after": ratio}


def up(run_dir, name, vms_on=None, overhead_ratio=None, agent_restart_namespace=None):
    # the emulator's log times are compared with Events (UTC) by the verify helpers
    os.environ["TZ"] = "UTC"
    lab = kvqlab.up(run_dir=run_dir)
    emulator.start(lab)
    scenario = scenarios.load(name)
    for vm in scenario.data.get("vms", []) if vms_on else []:
        vm["node"] = vms_on
    result = scenarios.apply(lab, scenario, timeout=180)
    rest = _rest_for(lab)
    base = {}
    for namespace in result.namespaces:
        base[namespace] = dict((q["metadata"]["name"], q["spec"]["hard"]) for q in
                               rest.get("/api/v1/namespaces/%s/resourcequotas" % namespace)["items"])
    annotations = dict((ns, rest.get("/api/v1/namespaces/%s" % ns)["metadata"].get("annotations") or {})
                       for ns in result.namespaces)
    rancher = dict((ns, a[RANCHER_ANNOTATION]) for ns, a in annotations.items() if RANCHER_ANNOTATION in a)
    facts = {"scenario": name, "node": busiest_node(rest, result.vms), "base": base,
             "rancher_base": rancher,
             "vms": [list(v) for v in result.vms],
             "admin_kubeconfig": str(lab.admin_kubeconfig), "user_kubeconfig": str(lab.user_kubeconfig)}
    if overhead_ratio:
        facts["overhead_ratio"] = raise_overhead_ratio(rest, overhead_ratio)
    if agent_restart_namespace:
        watcher = [sys.executable, os.path.abspath(__file__), "watch", os.path.abspath(run_dir), agent_restart_namespace]
        lab.spawn(WATCHER, watcher)
        facts["agent_restart_namespace"] = agent_restart_namespace
    with open(os.path.join(run_dir, "molecule.json"), "w") as fh:
        json.dump(facts, fh, indent=1)
    print(json.dumps(facts))


def watch(run_dir, namespace):
    """Restart the Rancher agent once, while the first reservation of namespace is held (see up)."""
    lab = kvqlab.attach(run_dir)
    rest = _rest_for(lab)

    def annotation():
        return (rest.get("/api/v1/namespaces/%s" % namespace)["metadata"].get("annotations") or {}).get(RANCHER_ANNOTATION)

    base = annotation()
    deadline = time.monotonic() + WATCH_TIMEOUT
    while annotation() == base:
        if time.monotonic() > deadline:
            return
        time.sleep(0.2)
    reserved = annotation()
    emulator.rancher_agent_restart(lab)
    # read right after the knob write: both reads showing the reservation bracket the restart
    record = {"namespace": namespace, "base": base, "reserved": reserved, "after_restart": annotation(),
              "restarted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(os.path.join(run_dir, "agent-restart.json"), "w") as fh:
        json.dump(record, fh, indent=1)


def down(run_dir):
    if os.path.isdir(run_dir):
        try:
            emulator.attach(kvqlab.attach(run_dir)).stop()
        except Exception as exc:  # noqa: BLE001 - stopping is best effort; the control plane goes next
            print("emulator: %s" % exc)
        print(kvqlab.down(run_dir))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up")
    start.add_argument("run_dir")
    start.add_argument("scenario")
    start.add_argument("--vms-on", metavar="NODE")
    start.add_argument("--overhead-ratio")
    start.add_argument("--agent-restart-on-reservation", metavar="NAMESPACE")
    stop = sub.add_parser("down")
    stop.add_argument("run_dir")
    watcher = sub.add_parser("watch")
    watcher.add_argument("run_dir")
    watcher.add_argument("namespace")
    args = parser.parse_args(argv)
    if args.command == "up":
        up(args.run_dir, args.scenario, args.vms_on, args.overhead_ratio, args.agent_restart_on_reservation)
    elif args.command == "watch":
        watch(args.run_dir, args.namespace)
    else:
        down(args.run_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
