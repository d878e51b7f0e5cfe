# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the apiserver's 'exceeded quota' refusals and migrationRejectedByResourceQuota."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from fractions import Fraction

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import admission as a
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import format_quantity

Gi = 1024 ** 3

FIELD_REPORT = (
    'reenqueuing Migration tenant-a/vmim-x: failed to create vmi migration target pod: pods '
    '"virt-launcher-vm1-q8x2k" is forbidden: exceeded quota: default-xxxxx, requested: '
    'limits.cpu=4015m,limits.memory=8940039936, used: limits.cpu=28405m,limits.memory=62820279552, '
    'limited: limits.cpu=30,limits.memory=60Gi')


def test_field_report_message():
    (entry,) = a.parse_exceeded_quota(FIELD_REPORT)
    assert entry["quota"] == "default-xxxxx"
    assert entry["requested"] == {"limits.cpu": Fraction(4015, 1000), "limits.memory": 8940039936}
    assert entry["used"] == {"limits.cpu": Fraction(28405, 1000), "limits.memory": 62820279552}
    assert entry["limited"] == {"limits.cpu": 30, "limits.memory": 60 * Gi}
    assert entry["shortfall"] == {"limits.cpu": Fraction(2420, 1000),
                                  "limits.memory": 8940039936 + 62820279552 - 60 * Gi}


def test_comma_grouped_quantities_read_the_same():
    grouped = FIELD_REPORT.replace("8940039936", "8,940,039,936").replace("62820279552", "62,820,279,552") \
        .replace("4015m", "4,015m").replace("28405m", "28,405m")
    assert a.parse_exceeded_quota(grouped) == a.parse_exceeded_quota(FIELD_REPORT)


def test_several_refusals_and_trailing_punctuation():
    text = ('first: exceeded quota: q1, requested: pods=1, used: pods=10, limited: pods=10. '
            'then "exceeded quota: q2, requested: requests.memory=1Gi,requests.cpu=500m, used: '
            'requests.memory=3Gi,requests.cpu=3500m, limited: requests.memory=4Gi,requests.cpu=4"; retrying')
    entries = a.parse_exceeded_quota(text)
    assert [e["quota"] for e in entries] == ["q1", "q2"]
    assert entries[0]["shortfall"] == {"pods": 1}
    assert entries[1]["shortfall"] == {}  # exactly at the limit: nothing short (the refusal came from elsewhere)
    assert entries[1]["limited"] == {"requests.memory": 4 * Gi, "requests.cpu": 4}
    assert a.shortfall_by_quota(text) == {"q1": {"pods": 1}, "q2": {}}


def test_extended_and_count_names():
    text = ("exceeded quota: gpu, requested: count/pods=1,requests.nvidia.com/gpu=1, used: count/pods=20,"
            "requests.nvidia.com/gpu=2, limited: count/pods=20,requests.nvidia.com/gpu=2")
    (entry,) = a.parse_exceeded_quota(text)
    assert entry["shortfall"] == {"count/pods": 1, "requests.nvidia.com/gpu": 1}


def test_no_refusal_is_an_empty_list():
    assert a.parse_exceeded_quota('pods "x" is forbidden: failed quota: q: must specify limits.cpu') == []
    assert a.parse_exceeded_quota(None) == []
    assert a.parse_exceeded_quota("") == []


@pytest.mark.parametrize("text", [
    "exceeded quota: q1, requested limits.cpu=1",
    "exceeded quota: q1, requested: limits.cpu=abc, used: limits.cpu=1, limited: limits.cpu=1",
    "exceeded quota: q1, requested: limits.cpu=1, limited: limits.cpu=1",
    "exceeded quota: q1, requested: limits.cpu=1, used: limits.cpu=1",
])
def test_unreadable_refusal_is_an_input_error(text):
    with pytest.raises(InputError) as info:
        a.parse_exceeded_quota(text)
    assert "Fix:" in str(info.value)


def test_top_up_adds_exactly_the_shortfall():
    (entry,) = a.parse_exceeded_quota(FIELD_REPORT)
    estimate = {"limits.cpu": Fraction(2), "limits.memory": Fraction(6 * Gi), "pods": Fraction(1)}
    topped = a.top_up(estimate, entry)
    assert topped["pods"] == 1
    assert topped["limits.cpu"] == 2 + Fraction(242, 100)
    assert topped["limits.memory"] == 6 * Gi + entry["shortfall"]["limits.memory"]
    assert estimate["limits.cpu"] == 2  # not mutated


def vmim(conditions, phase="Pending"):
    return {"metadata": {"name": "vmim-x", "namespace": "tenant-a"}, "spec": {"vmiName": "vm1"},
            "status": {"phase": phase, "conditions": conditions}}


def test_rejected_condition():
    rejected = {"type": "migrationRejectedByResourceQuota", "status": "True", "reason": "QuotaExceeded",
                "message": FIELD_REPORT, "lastTransitionTime": "2025-01-31T12:00:00Z"}
    found = a.migration_rejection(vmim([{"type": "Other", "status": "True"}, rejected]))
    assert found["migration"] == "vmim-x" and found["vmi"] == "vm1" and found["phase"] == "Pending"
    assert found["refusals"][0]["quota"] == "default-xxxxx"
    assert found["since"] == "2025-01-31T12:00:00Z"
    assert a.migration_rejection(vmim([dict(rejected, status="False")])) is None
    assert a.migration_rejection(vmim([])) is None
    assert a.migration_rejection({"metadata": {}}) is None
    vague = a.migration_rejection(vmim([dict(rejected, message="quota blocks the target pod")]))
    assert vague["refusals"] == [] and vague["unreadable"] is None
    broken = a.migration_rejection(vmim([dict(rejected, message="exceeded quota: q, requested: x")]))
    assert broken["refusals"] == [] and "cannot read" in broken["unreadable"]


# ---------------------------------------------------------------------------
# properties: what the apiserver prints, we read back exactly

NAMES = ["limits.cpu", "limits.memory", "requests.cpu", "requests.memory", "pods", "count/pods",
         "requests.storage", "requests.devices.kubevirt.io/kvm", "hugepages-2Mi", "requests.ephemeral-storage"]
quantities = st.one_of(
    st.integers(min_value=0, max_value=10 ** 13).map(Fraction),
    st.integers(min_value=1, max_value=10 ** 7).map(lambda m: Fraction(m, 1000)),
    st.integers(min_value=1, max_value=1024 ** 2).map(lambda m: Fraction(m * 1024 ** 2)),
)


def _group(text):
    """Thousands separators on the integer part, as some log pipelines print numbers."""
    digits = ""
    while text and text[0].isdigit():
        digits, text = digits + text[0], text[1:]
    groups = []
    while len(digits) > 3:
        groups.insert(0, digits[-3:])
        digits = digits[:-3]
    return ",".join([digits] + groups) + text


def _print(rl, fmts, grouped):
    parts = []
    for name in sorted(rl):
        text = format_quantity(rl[name], fmts[name])
        parts.append("%s=%s" % (name, _group(text) if grouped else text))
    return ",".join(parts)


@settings(max_examples=300, deadline=None)
@given(names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True), data=st.data(),
       grouped=st.booleans(), fmt=st.sampled_from(["BinarySI", "DecimalSI"]))
def test_printed_refusals_read_back_exactly(names, data, grouped, fmt):
    requested = dict((n, data.draw(quantities)) for n in names)
    used = dict((n, data.draw(quantities)) for n in names)
    limited = dict((n, data.draw(quantities)) for n in names)
    fmts = dict((n, fmt if "memory" in n or "storage" in n or "hugepages" in n else "DecimalSI") for n in names)
    message = ('pods "virt-launcher-a" is forbidden: exceeded quota: compute, requested: %s, used: %s, limited: %s'
               % (_print(requested, fmts, grouped), _print(used, fmts, grouped), _print(limited, fmts, grouped)))
    (entry,) = a.parse_exceeded_quota(message)
    assert entry["requested"] == requested
    assert entry["used"] == used
    assert entry["limited"] == limited
    # topping a reservation up by the shortfall makes the refused request fit
    for name in names:
        assert requested[name] + used[name] <= limited[name] + entry["shortfall"].get(name, 0)
        assert entry["shortfall"].get(name, 0) >= 0
