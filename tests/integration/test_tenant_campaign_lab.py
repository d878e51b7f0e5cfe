# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The quick tenant campaign (tests/chaos/tenant.py --quick) as a test: it starts its own lab, drains with
playbooks/node_maintenance.yml as the least-privilege user while tenants attack, and writes its results as JSON;
every attack must be contained, no quota above its base without a reservation, no run blocked, and the fence
must have refused the tenants' pods."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import subprocess
import sys
from pathlib import Path

from modlab import require_lab_build

REPO = Path(__file__).resolve().parents[2]
QUICK = ("forged-event", "forged-ledger", "lock-squat", "headroom-capture-fenced")


def test_quick_tenant_campaign_contains_every_attack(tmp_path):
    require_lab_build()
    out = tmp_path / "tenant-quick.json"
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "chaos" / "tenant.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=900, check=False)
    print(proc.stdout)
    assert out.exists(), "the campaign wrote no results (rc %s):\n%s" % (proc.returncode, proc.stderr[-4000:])
    result = json.loads(out.read_text())
    by_name = dict((a["attack"], a) for a in result["attacks"])
    assert sorted(by_name) == sorted(QUICK), sorted(by_name)
    for name, attack in sorted(by_name.items()):
        assert attack["contained"], "%s not contained: %s" % (name, attack["failures"])
        assert attack["runs"] and all(run["rc"] == 0 for run in attack["runs"]), (name, attack["runs"])
    assert result["quota_above_base"] == 0 and result["runs_blocked"] == 0, result["line"]
    # the headroom attack is refused by the fence: edit, admin, and a pod naming a reserved VMI as owner
    assert by_name["headroom-capture-fenced"]["fence_refusals"] == 3
    # every reach into the operator namespace was a 403
    assert len(by_name["forged-ledger"]["forbidden"]) >= 9
    assert result["contained"] == result["total"] == len(QUICK)
    assert result["line"] == ("tenant: 4/4 attacks contained (0 quota above base, 0 runs blocked, 3 refused by "
                              "the fence)")
    assert proc.returncode == 0 and result["line"] in proc.stdout
