"""The main job end to end on the built-in lab: node maintenance of the node that runs scenario (a)'s VM.

Starts (or reuses) the lab in RUN_DIR with scenario (a), runs playbooks/node_maintenance.yml with
ansible-playbook as the least-privilege identity (K8S_AUTH_* variables, as AWX's Kubernetes
credential sets them), then shows the VMs, migrations and quotas. The lab stays up: `make lab-down`.

Usage: python3 tests/lab/demo.py RUN_DIR [SCENARIO]
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
__import__("conftest")  # the per-checkout ansible_collections farm, exported as KVQ_COLLECTIONS_PATH

import kvqlab  # noqa: E402
from kvqlab import emulator, scenarios  # noqa: E402


def main(run_dir, scenario="a"):
    lab = kvqlab.up(run_dir=run_dir)
    emulator.start(lab)
    scenarios.apply(lab, scenarios.load(scenario), timeout=180)
    vmis = lab.kubectl("get", "vmi", "-A", "-o", "jsonpath={range .items[*]}{.status.nodeName}{\"\\n\"}{end}")
    nodes = sorted(set(n for n in vmis.split() if n))
    if not nodes:
        sys.exit("demo: scenario %s has no running VM" % scenario)
    node = nodes[0]
    print("\n== before: the tenant's quota and VMs (node %s is about to be maintained)" % node)
    print(lab.kubectl("get", "vmi,resourcequota", "-A"))
    env = dict(os.environ, **lab.env(admin=False))
    env["ANSIBLE_COLLECTIONS_PATH"] = os.environ["KVQ_COLLECTIONS_PATH"]
    env.setdefault("ANSIBLE_STDOUT_CALLBACK", "default")
    env.setdefault("ANSIBLE_LOCALHOST_WARNING", "false")
    env.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "false")
    cmd = ["ansible-playbook", os.path.join(ROOT, "playbooks", "node_maintenance.yml"),
           "-e", "node_maintenance_node=%s" % node]
    print("\n== %s" % " ".join(cmd))
    rc = subprocess.call(cmd, env=env)
    print("\n== after: VMs moved, migrations done, quotas back at base")
    print(lab.kubectl("get", "vmi,vmim,resourcequota", "-A"))
    return rc


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
