# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scenario e at scale (5,000 VMIs in 506 namespaces): applying it, restarting the emulator over it, a migration at
that scale. About 10 minutes, so it has its own marker and make target (make lab-scale), not part of make test.
KVQ_LAB_SCALE_KEEP=1 leaves the scenario in the lab."""

import os
import time

import pytest

from kvqlab import scenarios
from test_emulator import KV, migrate, phase_of, wait

pytestmark = pytest.mark.lab_scale   # make lab-scale (conftest.py: every lab test has one such marker)


def test_scenario_e_scale_apply_time(lab, rest, emu):
    sc = scenarios.load("e")
    result = scenarios.apply(lab, sc, timeout=900, log=print)
    print("scenario e timings:", result.timings)
    t0 = time.monotonic()
    emu.restart()
    print("emulator restart with 5000 VMIs: %.1fs" % (time.monotonic() - t0))
    vmis = rest.get(KV + "/virtualmachineinstances", labelSelector="kubevirt.io/domain")["items"]
    assert sum(1 for v in vmis if v["metadata"]["namespace"].startswith("e-t")
               and v["status"]["phase"] == "Running") == 5000
    # a migration still works at that scale
    m = migrate(rest, "e-t001", "e-vm-0001")
    wait(lambda: phase_of(rest, "e-t001", m) == "Succeeded", 60, "migration at scale")
    if os.environ.get("KVQ_LAB_SCALE_KEEP") != "1":
        scenarios.delete(lab, sc, timeout=900)
