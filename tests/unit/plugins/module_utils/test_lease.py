# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lease locking: the pure parts (who holds it, until when, what an acquire writes)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

import pytest
from hypothesis import given, strategies as st

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import lease as LS
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError

T0 = 1735689600


def held_by(holder, renewed=T0, duration=60, transitions=0):
    lease = LS.new_lease("tenant-a", "kvquota-maintenance", holder, duration, renewed)
    lease["metadata"]["resourceVersion"] = "5"
    lease["spec"]["leaseTransitions"] = transitions
    return lease


def test_micro_time_format():
    assert LS.micro_time(T0) == "2025-01-01T00:00:00.000000Z"
    assert LS.micro_time(T0 + 1.25) == "2025-01-01T00:00:01.250000Z"
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$", LS.micro_time(T0 + 0.9999999))


def test_new_lease_body():
    lease = LS.new_lease("tenant-a", "kvquota-maintenance", "job-1", 300, T0)
    assert lease["apiVersion"] == "coordination.k8s.io/v1" and lease["kind"] == "Lease"
    assert lease["spec"] == {"holderIdentity": "job-1", "leaseDurationSeconds": 300,
                             "acquireTime": "2025-01-01T00:00:00.000000Z",
                             "renewTime": "2025-01-01T00:00:00.000000Z", "leaseTransitions": 0}


def test_status_and_expiry():
    lease = held_by("job-1")
    status = LS.lease_status(lease, T0 + 59)
    assert status["holder"] == "job-1" and not status["expired"]
    assert status["expires_at"] == T0 + 60 and status["expires"] == "2025-01-01T00:01:00Z"
    assert LS.lease_status(lease, T0 + 60)["expired"]
    assert LS.lease_status({"spec": {}}, T0)["expired"]


def test_can_take():
    lease = held_by("job-1")
    assert LS.can_take(lease, "job-1", T0 + 10)          # ours: renew
    assert not LS.can_take(lease, "job-2", T0 + 10)      # someone else's, alive
    assert LS.can_take(lease, "job-2", T0 + 61)          # crashed holder: expired
    free = held_by("job-1")
    free["spec"]["holderIdentity"] = None
    assert LS.can_take(free, "job-2", T0)


def test_acquire_body_counts_transitions_and_keeps_resource_version():
    lease = held_by("job-1", transitions=2)
    taken = LS.acquire_body(lease, "job-2", 120, T0 + 100)
    assert taken["metadata"]["resourceVersion"] == "5"
    assert taken["spec"]["holderIdentity"] == "job-2"
    assert taken["spec"]["leaseTransitions"] == 3
    assert taken["spec"]["acquireTime"] == taken["spec"]["renewTime"] == LS.micro_time(T0 + 100)
    assert taken["spec"]["leaseDurationSeconds"] == 120
    renewed = LS.acquire_body(taken, "job-2", 120, T0 + 130)
    assert renewed["spec"]["leaseTransitions"] == 3
    assert renewed["spec"]["acquireTime"] == LS.micro_time(T0 + 100)
    assert renewed["spec"]["renewTime"] == LS.micro_time(T0 + 130)
    assert lease["spec"]["holderIdentity"] == "job-1"  # input untouched


def test_held_message_names_holder_and_expiry():
    lease = held_by("awx-job-7@runner")
    text = LS.held_message("tenant-a", "kvquota-maintenance", LS.lease_status(lease, T0 + 20), T0 + 20)
    assert "awx-job-7@runner" in text and "2025-01-01T00:01:00Z" in text and "40 s" in text


def test_default_holder():
    assert LS.default_holder({"JOB_ID": "42"}).startswith("awx-job-42@")
    assert LS.default_holder({"USER": "ops"}).startswith("ops@")


@given(st.integers(min_value=1, max_value=3600), st.integers(min_value=0, max_value=7200))
def test_lease_is_free_exactly_after_its_duration(duration, elapsed):
    lease = held_by("job-1", duration=duration)
    assert LS.can_take(lease, "job-2", T0 + elapsed) == (elapsed >= duration)


@pytest.mark.parametrize("holder, duration, named", [("", 60, "holder identity"), ("job-1", 0, "positive")])
def test_acquire_refuses_bad_input_before_any_request(holder, duration, named):
    with pytest.raises(InputError) as err:
        LS.acquire(None, "kvquota-system", "kvq-lock-t", holder, duration)   # no cluster: nothing may be asked
    assert named in str(err.value)
