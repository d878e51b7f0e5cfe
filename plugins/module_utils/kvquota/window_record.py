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
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib
import json

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.cluster import conditional_update
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import InputError, NotFoundError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ledger import format_time, parse_time

RECORD_PREFIX = "kvq-window-"
RECORD_KEY = "cordoned"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kvquota.maintenance"}


def record_name(prefix):
    """kvq-window-<prefix>, shortened with a hash when too long for a ConfigMap name (253)."""
    name = RECORD_PREFIX + str(prefix)
    if len(name) <= 253:
        return name
    return name[:242].rstrip("-.") + "-" + hashlib.sha256(str(prefix).encode("utf-8")).hexdigest()[:10]


def _path(operator_namespace, name=None):
    return "/api/v1/namespaces/%s/configmaps" % operator_namespace + ("/%s" % name if name else "")


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
    name = record_name(prefix)
    configmap = cluster.exists(_path(operator_namespace, name),
                               "get configmap %s in namespace %s" % (name, operator_namespace))
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
    name = record_name(prefix)
    what = "configmap %s in namespace %s" % (name, operator_namespace)

    def compute(current):
        configmap, nodes = current
        wanted = dict(nodes)
        for node, uid in seen.items():
            if (wanted.get(node) or {}).get("uid") != uid:
                wanted[node] = {"uid": uid, "seen": format_time(now)}
        if wanted == nodes and configmap is not None:
            return None
        data = {RECORD_KEY: json.dumps(wanted, sort_keys=True)}
        if configmap is None:
            return {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": operator_namespace, "labels": dict(MANAGED_BY),
                                 "annotations": {"kvquota.maintenance/window": str(prefix)}},
                    "data": data}
        return dict(configmap, data=data)

    def write(body):
        if body["metadata"].get("resourceVersion"):
            return cluster.replace(body, "update " + what)
        # created meanwhile by another run: 409 AlreadyExists, a ConflictError, so it is re-read and merged
        return cluster.create(_path(operator_namespace), body, "create " + what)

    return conditional_update(lambda: read(cluster, operator_namespace, prefix), compute, write,
                              what="record the cordoned nodes in " + what)


def remove(cluster, operator_namespace, prefix):
    """Delete the record (the window ended); nothing when there is none."""
    try:
        configmap = cluster.exists(_path(operator_namespace, record_name(prefix)), "get configmap %s in namespace %s"
                                   % (record_name(prefix), operator_namespace))
        if configmap is None:
            return False
        cluster.delete(_path(operator_namespace, configmap["metadata"]["name"]),
                       "delete configmap %s in namespace %s" % (configmap["metadata"]["name"], operator_namespace),
                       resource_version=configmap["metadata"].get("resourceVersion"))
    except NotFoundError:
        return False
    return True


__all__ = ["record_name", "parse_record", "read", "still_valid", "add", "remove"]
