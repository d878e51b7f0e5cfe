# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start or stop the kvquota lab for a Molecule scenario (create.yml / destroy.yml call this).

    lab.py up   RUN_DIR SCENARIO   control plane + KubeVirt emulator + scenario; writes RUN_DIR/molecule.json
                                   (the node running most of the scenario's VMs, base spec.hard of every quota)
    lab.py down RUN_DIR
"""
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "lab"))

import kvqlab  # noqa: E402
from kvqlab import emulator, scenarios  # noqa: E402
from kvqlab.emulator import _rest_for  # noqa: E402


def up(run_dir, name):
    lab = kvqlab.up(run_dir=run_dir)
    emulator.start(lab)
    scenario = scenarios.load(name)
    result = scenarios.apply(lab, scenario, timeout=180)
    rest = _rest_for(lab)
    base = {}
    for namespace in result.namespaces:
        base[namespace] = dict((q["metadata"]["name"], q["spec"]["hard"]) for q in
                               rest.get("/api/v1/namespaces/%s/resourcequotas" % namespace)["items"])
    counts = {}
    for ns, vm in result.vms:
        vmi = rest.get("/apis/kubevirt.io/v1/namespaces/%s/virtualmachineinstances/%s" % (ns, vm))
        counts[vmi["status"]["nodeName"]] = counts.get(vmi["status"]["nodeName"], 0) + 1
    node = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[0][0]
    facts = {"node": node, "base": base, "vms": [list(v) for v in result.vms],
             "admin_kubeconfig": str(lab.admin_kubeconfig), "user_kubeconfig": str(lab.user_kubeconfig)}
    with open(os.path.join(run_dir, "molecule.json"), "w") as fh:
        json.dump(facts, fh, indent=1)
    print(json.dumps(facts))


def down(run_dir):
    if os.path.isdir(run_dir):
        try:
            emulator.attach(kvqlab.attach(run_dir)).stop()
        except Exception as exc:  # noqa: BLE001 - stopping is best effort; the control plane goes next
            print("emulator: %s" % exc)
        print(kvqlab.down(run_dir))


if __name__ == "__main__":
    if sys.argv[1] == "up":
        up(sys.argv[2], sys.argv[3])
    else:
        down(sys.argv[2])
