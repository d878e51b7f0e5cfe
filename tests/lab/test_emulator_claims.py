# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The emulated virt-controller copies a VMI's spec.resourceClaims into its launcher pods (a migration target's
too), as KubeVirt v1.9 does: the resourceclaim controller then creates the pod's own claims (issue 27). Pure: no
lab is started."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from kvqlab import scenarios
from kvqlab.emulator import knobs as knobs_mod
from kvqlab.emulator import render

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)


def test_launcher_and_target_pods_carry_the_vmis_resource_claims():
    vmi = scenarios.vmi_object({"name": "v", "namespace": "n", "cpu": 1, "memory": "256Mi"})
    vmi["metadata"]["uid"] = "uid-1"
    vmi["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "nic"},
                                     {"name": "gpu", "resourceClaimName": "gpu-claim", "unknown": 1}]
    config = render.cluster_config(scenarios.kubevirt_cr({"kubevirt": {"version": "1.9.0"}}))
    migration = {"metadata": {"name": "m", "uid": "mig-1"}}
    for pod in (render.launcher_pod(vmi, config, knobs_mod.Knobs()),
                render.launcher_pod(vmi, config, knobs_mod.Knobs(), migration=migration)):
        assert pod["spec"]["resourceClaims"] == [{"name": "nic", "resourceClaimTemplateName": "nic"},
                                                 {"name": "gpu", "resourceClaimName": "gpu-claim"}]
    del vmi["spec"]["resourceClaims"]
    assert "resourceClaims" not in render.launcher_pod(vmi, config, knobs_mod.Knobs())["spec"]
