# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a follow-mode window that ends when its nodes are schedulable again has seen: the named nodes it saw
cordoned, recorded in the ConfigMap kvq-window-<reservation prefix> of the operator namespace (Role
kvquota-state, like the ledgers), so that a re-run after an interruption knows that the maintenance it waits
for has begun, even when the drain ended and the node was uncordoned while no run watched.

Only the operator can write there; a tenant can neither end a window early nor keep it open. A recorded node
counts only while it is the same Node (its UID) and the record is younger than the reservations' TTL: an old
window's record says nothing about a new one. The window deletes its record when it ends.

Every follow window also says that it runs, in the ConfigMap kvq-running-<reservation prefix> (since: when it
started; renewed: rewritten every RENEW_SECONDS), deleted when it ends. The event source reads it (the rulebook's
windows, prefix eda): while a window of its prefix runs, that window serves what happens, so no other is queued
behind it (plan/triggers.WindowGate). A window that fails says so before it deletes the record (another is asked
for). A window killed outright leaves it behind; it stops counting once it has not been renewed for STALE_SECONDS.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.timeutil import format_time, parse_time

RECORD_PREFIX = "kvq-window-"
RECORD_KEY = "cordoned"
RUNNING_PREFIX = "kvq-running-"
RENEW_SECONDS = 30
# a window renews between two polls; one poll may wait up to about 2 minutes (a namespace lock, quota enforcement)
STALE_SECONDS = 240


def record_name(prefix):
    """kvq-window-<prefix> (store.record_name: a valid ConfigMap name for any prefix)."""
    return store.record_name(RECORD_PREFIX, prefix)


def parse_record(configmap):
    """{node: {"uid": Node UID, "seen": time text}} of a kvq-window ConfigMap; InputError naming it when corrupt."""
    name = ((configmap or {}).get("metadata") or {}).get("name")
    try:
        nodes = json.loads(((configmap or {}).get("data") or {}).get(RECORD_KEY) or "{}")
        valid = isinstance(nodes, dict) and all(
            isinstance(entry, dict) and isinstance(entry.get("uid"), str) and isinstance(entry.get("seen"), str)
            and parse_time(entry["seen"]) is not None for entry in nodes.values())
    except (ValueError, InputError):
        valid = False
    if not valid:
        raise InputError("the window record %s is not a mapping of nodes to {uid, seen}" % name,
                         "delete it (kubectl delete configmap -n OPERATOR_NAMESPACE %s): the window then counts only "
                         "the cordons it sees itself" % name)
    return nodes


def read(cluster, operator_namespace, prefix):
    """(the ConfigMap or None, its nodes)."""
    configmap = store.record_configmap(cluster, operator_namespace, record_name(prefix))
    return configmap, parse_record(configmap)


def still_valid(nodes, current_uids, now, ttl_seconds):
    """The recorded nodes that still count: the same Node (current_uids: {node: UID}), seen within ttl_seconds.
    Returns (valid {node: seen}, stale [node])."""
    valid, stale = {}, []
    for node, entry in sorted(nodes.items()):
        seen = parse_time(entry["seen"])
        if current_uids.get(node) == entry["uid"] and now - seen <= ttl_seconds:
            valid[node] = entry["seen"]
        else:
            stale.append(node)
    return valid, stale


def add(cluster, operator_namespace, prefix, seen, now):
    """Record seen ({node: Node UID}) as cordoned at now: create the record or update it conditionally."""
    def updated(nodes):
        wanted = dict(nodes)
        for node, uid in seen.items():
            if (wanted.get(node) or {}).get("uid") != uid:
                wanted[node] = {"uid": uid, "seen": format_time(now)}
        return {RECORD_KEY: json.dumps(wanted, sort_keys=True)} if wanted != nodes else None

    name = record_name(prefix)
    return store.save_record(cluster, operator_namespace, name, lambda: read(cluster, operator_namespace, prefix),
                             updated, {"kvquota.maintenance/window": str(prefix)},
                             "record the cordoned nodes in configmap %s in namespace %s" % (name, operator_namespace))


def remove(cluster, operator_namespace, prefix):
    """Delete the record (the window ended); False when there is none."""
    configmap = store.record_configmap(cluster, operator_namespace, record_name(prefix))
    return configmap is not None and store.delete_record(cluster, operator_namespace, configmap)


def running_name(prefix):
    """kvq-running-<prefix>: the ConfigMap that says a window of that prefix runs."""
    return store.record_name(RUNNING_PREFIX, prefix)


def mark_running(cluster, operator_namespace, prefix, since, now, failed=False):
    """Say (create, or renew conditionally) that the window of prefix started at since runs, at now; failed: that
    it failed (written just before unmark_running, so that the event source asks for another window)."""
    name = running_name(prefix)

    def read():
        configmap = store.record_configmap(cluster, operator_namespace, name)
        return configmap, (configmap or {}).get("data") or {}

    def updated(_data):
        data = {"since": format_time(since), "renewed": format_time(now)}
        if failed:
            data["ended"] = "failed"
        return data

    return store.save_record(cluster, operator_namespace, name, read, updated, {"kvquota.maintenance/window": str(prefix)},
                             "say in configmap %s in namespace %s that the window runs" % (name, operator_namespace))


def unmark_running(cluster, operator_namespace, prefix, since):
    """Delete kvq-running-<prefix> (the window that started at since ended); False when there is none, or when
    it is another window's (a second window of the same prefix took it over: its record stays)."""
    configmap = store.record_configmap(cluster, operator_namespace, running_name(prefix))
    if configmap is None or ((configmap.get("data") or {}).get("since")) != format_time(since):
        return False
    return store.delete_record(cluster, operator_namespace, configmap)


__all__ = ["record_name", "parse_record", "read", "still_valid", "add", "remove", "running_name", "mark_running",
           "unmark_running", "RENEW_SECONDS", "STALE_SECONDS"]
