"""kvqlab.virtapi's decisions, without a lab: what KubeVirt's start/stop do to a VM's spec."""
from __future__ import annotations

import pytest

from kvqlab import virtapi

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)


@pytest.mark.parametrize("spec, action, has_vmi, expected", [
    ({"running": True}, "stop", True, (200, {"running": False})),
    ({"running": False}, "stop", False, (409, "VM is not running")),
    ({"running": False}, "start", False, (200, {"running": True})),
    ({"running": True}, "start", True, (409, "VM is already running")),
    ({"runStrategy": "Always"}, "stop", True, (200, {"runStrategy": "Halted"})),
    ({"runStrategy": "RerunOnFailure"}, "stop", True, (200, {"runStrategy": "Halted"})),
    ({"runStrategy": "Halted"}, "stop", False, (409, "VM is not running")),
    ({"runStrategy": "Halted"}, "start", False, (200, {"runStrategy": "Always"})),
    ({"runStrategy": "Always"}, "start", True, (409, "VM is already running")),
    ({"runStrategy": "Manual"}, "stop", True, (400, "runStrategy Manual is not emulated by the lab's virt-api")),
])
def test_power_change(spec, action, has_vmi, expected):
    assert virtapi.power_change({"spec": spec}, action, has_vmi) == expected


def test_api_service_routes_the_group_to_loopback():
    service, api_service = virtapi.api_service(12345)
    assert service["spec"] == {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": 12345}]}
    assert api_service["metadata"]["name"] == "v1.subresources.kubevirt.io"
    assert api_service["spec"]["service"] == {"namespace": "default", "name": "kvqlab-virt-api", "port": 12345}
