# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""headroom.refused_headroom: the shortfall of migrations refused by quota, from the condition's message or,
as virt-controller usually leaves the condition without one, from the migration's FailedCreate Event."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import headroom as h
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import InputError, NotFoundError

REFUSAL = ('pods "virt-launcher-vm-1-x" is forbidden: exceeded quota: compute, requested: limits.memory=4800765905, '
           'used: limits.memory=4800765905, limited: limits.memory=5000Mi')


class _Raw(object):
    def __init__(self, doc):
        self.data = json.dumps(doc).encode()


class FakeCluster(object):
    """cluster.Cluster's contract as refused_headroom uses it: call(fn, ...), custom.get_namespaced_custom_object,
    core.list_namespaced_event (raw pages)."""

    def __init__(self, vmims, events=()):
        self.vmims = dict(((m["metadata"]["namespace"], m["metadata"]["name"]), m) for m in vmims)
        self.events = list(events)
        self.calls = []
        self.custom = self
        self.core = self

    def call(self, fn, *args, **kwargs):
        self.calls.append(fn.__name__)
        kwargs.pop("what", None)
        return fn(*args, **kwargs)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, **_kwargs):
        try:
            return self.vmims[(namespace, name)]
        except KeyError:
            raise NotFoundError("cannot get VirtualMachineInstanceMigration %s/%s: not found" % (namespace, name))

    def list_namespaced_event(self, namespace, **kwargs):
        assert kwargs["field_selector"] == "involvedObject.kind=VirtualMachineInstanceMigration,reason=FailedCreate"
        return _Raw({"items": [e for e in self.events if e["metadata"]["namespace"] == namespace], "metadata": {}})


def vmim(name, message=None, since="2025-01-31T12:00:00Z", ns="t"):
    condition = {"type": "migrationRejectedByResourceQuota", "status": "True", "lastTransitionTime": since}
    if message is not None:
        condition["message"] = message
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"vmiName": "vm-1"},
            "status": {"phase": "Pending", "conditions": [condition]}}


def event(name, migration, message, stamp, ns="t"):
    return {"metadata": {"name": name, "namespace": ns}, "reason": "FailedCreate", "lastTimestamp": stamp,
            "involvedObject": {"kind": "VirtualMachineInstanceMigration", "name": migration, "namespace": ns},
            "message": message}


def test_shortfall_from_the_condition_message():
    cluster = FakeCluster([vmim("m1", REFUSAL)])
    headroom, key = h.refused_headroom(cluster, [{"namespace": "t", "name": "m1"}])
    assert headroom == {("t", "compute"): {"limits.memory": "4358651810"}}
    assert key == "t/m1@2025-01-31T12:00:00Z"
    assert "list_namespaced_event" not in cluster.calls


def test_shortfall_from_the_newest_failed_create_event_when_the_condition_has_no_message():
    older = REFUSAL.replace("used: limits.memory=4800765905", "used: limits.memory=4700765905")
    cluster = FakeCluster([vmim("m1"), vmim("m2")], [
        event("e1", "m1", "Error creating pod: " + older, "2025-01-31T12:00:00Z"),
        event("e2", "m1", "Error creating pod: " + REFUSAL, "2025-01-31T12:00:05Z"),
        event("e3", "other", "Error creating pod: " + REFUSAL.replace("compute", "other"), "2025-01-31T12:00:06Z")])
    headroom, key = h.refused_headroom(cluster, [{"namespace": "t", "name": "m1"}, {"namespace": "t", "name": "m2"}])
    assert headroom == {("t", "compute"): {"limits.memory": "4358651810"}}
    assert key.startswith("t/m1@2025-01-31T12:00:00Z#") and "m2" not in key   # m2 has no refusal to read
    assert cluster.calls.count("list_namespaced_event") == 1                   # one list per namespace


def test_a_different_refusal_gets_a_different_key():
    first = FakeCluster([vmim("m1")], [event("e1", "m1", "Error creating pod: " + REFUSAL, "2025-01-31T12:00:00Z")])
    later = REFUSAL.replace("limited: limits.memory=5000Mi", "limited: limits.memory=9000Mi").replace(
        "used: limits.memory=4800765905", "used: limits.memory=9601531810")
    second = FakeCluster([vmim("m1")], [event("e1", "m1", "Error creating pod: " + later, "2025-01-31T12:01:00Z")])
    (h1, k1), (h2, k2) = (h.refused_headroom(first, [{"namespace": "t", "name": "m1"}]),
                          h.refused_headroom(second, [{"namespace": "t", "name": "m1"}]))
    assert h1 != h2 and k1 != k2
    assert h2 == {("t", "compute"): {"limits.memory": "%d" % (4800765905 + 9601531810 - 9000 * 2 ** 20)}}


def test_nothing_to_add_without_a_readable_refusal():
    cluster = FakeCluster([vmim("m1"), {"metadata": {"name": "ok", "namespace": "t"}, "status": {"phase": "Running"}}],
                          [event("e1", "m1", "Error creating pod: the node was not ready", "2025-01-31T12:00:00Z")])
    assert h.refused_headroom(cluster, [{"namespace": "t", "name": "m1"}, {"namespace": "t", "name": "ok"}]) == ({}, "")


def test_unknown_migration_and_empty_input():
    with pytest.raises(NotFoundError):
        h.refused_headroom(FakeCluster([]), [{"namespace": "t", "name": "nope"}])
    with pytest.raises(InputError):
        h.refused_headroom(FakeCluster([]), [])
