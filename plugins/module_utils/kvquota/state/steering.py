# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steering taint of a rolling upgrade: the nodes still to be upgraded softly repel migration targets, so that
VMs land on nodes upgraded already.

The taint is kvquota.io/upgrade-pending:PreferNoSchedule (its value the record's name when that is a valid label
value, else empty): the scheduler only prefers other nodes, so a VM still finds room on a tainted node when there is
no other. A run sets it and always removes it; so that an interrupted run's taints are found and removed by the next
run, every node is recorded, with its Node UID, in the ConfigMap kvq-steering-<record> of the operator namespace
(Role kvquota-state, like the ledgers) BEFORE it is tainted, and dropped from the record only after its taint is
gone. The record is deleted when it lists no node.

Only our taint is ever written: the key with the effect PreferNoSchedule (whatever its value). A node's taints are
written as a whole list (a merge patch of spec.taints, everyone else's taints kept as read) conditional on the
node's resourceVersion, so a taint another writer adds meanwhile (the node controller's not-ready taints) makes a
409, and the node is read again and the list computed again.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import (
    api_path,
    conditional_update,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    InputError,
    NotFoundError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta as _meta

TAINT_KEY = "kvquota.io/upgrade-pending"
TAINT_EFFECT = "PreferNoSchedule"
RECORD_PREFIX = "kvq-steering-"
RECORD_KEY = "nodes"
RECORD_ANNOTATION = "kvquota.maintenance/steering"
MERGE_PATCH = "application/merge-patch+json"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def record_name(record):
    """kvq-steering-<record> (store.record_name: a valid ConfigMap name for any record)."""
    return store.record_name(RECORD_PREFIX, record)


def taint_value(record):
    """The taint's value: the record when it is a valid label value (at most 63 characters), else empty."""
    record = str(record)
    return record if len(record) <= 63 and _LABEL_VALUE.match(record) else ""


def steering_taint(record):
    """Our taint as the API holds it (an empty value is left out)."""
    taint = {"key": TAINT_KEY, "effect": TAINT_EFFECT}
    if taint_value(record):
        taint["value"] = taint_value(record)
    return taint


def is_ours(taint):
    """Whether a taint of a node is the steering taint (key and effect; any value)."""
    return isinstance(taint, dict) and taint.get("key") == TAINT_KEY and taint.get("effect") == TAINT_EFFECT


def with_taint(taints, record):
    """taints with ours added, or None when one is there already. Pure."""
    if any(is_ours(taint) for taint in taints):
        return None
    return list(taints) + [steering_taint(record)]


def without_taint(taints):
    """taints without ours, or None when there is none. Pure."""
    kept = [taint for taint in taints if not is_ours(taint)]
    return kept if len(kept) != len(taints) else None


def parse_record(configmap):
    """{node: Node UID} of a kvq-steering ConfigMap ({} for None); InputError naming it when corrupt."""
    name = _meta(configmap).get("name")
    try:
        nodes = json.loads(((configmap or {}).get("data") or {}).get(RECORD_KEY) or "{}")
    except ValueError:
        nodes = None
    if not isinstance(nodes, dict) or not all(isinstance(uid, str) for uid in nodes.values()):
        raise InputError("the steering record %s is not a mapping of node names to Node UIDs" % name,
                         "remove the taint by hand (kubectl taint nodes --all %s:%s-), then delete the record "
                         "(kubectl delete configmap -n OPERATOR_NAMESPACE %s)" % (TAINT_KEY, TAINT_EFFECT, name))
    return nodes


def read(cluster, operator_namespace, record):
    """(the record ConfigMap or None, its {node: Node UID})."""
    configmap = store.record_configmap(cluster, operator_namespace, record_name(record))
    return configmap, parse_record(configmap)


def _taints(node_obj):
    return list(((node_obj or {}).get("spec") or {}).get("taints") or [])


def _node_path(name):
    return api_path("v1", "nodes", name=name)


def _read_node(cluster, name):
    return cluster.get(_node_path(name), "read node %s" % name)


def _check_args(operator_namespace, record, nodes, required):
    store.check_operator_namespace(operator_namespace)
    if not isinstance(record, str) or not record:
        raise InputError("record must name the steering record, got %r" % (record,),
                         "give record: the run's name, e.g. rolling-upgrade")
    if nodes is None and not required:
        return None
    if isinstance(nodes, str) or not isinstance(nodes, (list, tuple)) or \
            not all(isinstance(node, str) and node for node in nodes):
        raise InputError("nodes must be a list of node names, got %r" % (nodes,),
                         "give nodes: [worker-1, worker-2]")
    return list(dict.fromkeys(nodes))


def _rewrite_taints(cluster, node_obj, change, check_mode):
    """Write change(the node's taints) as its whole spec.taints (a merge patch conditional on its resourceVersion),
    reading the node again after a 409 and computing again; change returns None when nothing is to be written.
    Returns (whether this call made the change, the node's taints before, after): a patch whose answer was lost
    and that did apply (a 409 with details maybe_applied, then nothing left to change) counts as made. Raises
    NotFoundError when the node is gone."""
    name = _meta(node_obj).get("name")
    pending = [node_obj]
    lost = []

    def read_node():
        return pending.pop() if pending else _read_node(cluster, name)

    def compute(current):
        taints = change(_taints(current))
        if taints is None:
            return None
        return {"metadata": {"resourceVersion": _meta(current).get("resourceVersion")}, "spec": {"taints": taints}}

    def write(body):
        if check_mode:
            return body
        try:
            return cluster.request("PATCH", _node_path(name), body=body, content_type=MERGE_PATCH,
                                   what="write the taints of node %s" % name)
        except ConflictError as err:
            if (getattr(err, "details", None) or {}).get("maybe_applied"):
                lost.append(err)
            raise

    written, current = conditional_update(read_node, compute, write, what="write the taints of node %s" % name)
    if written is not None:
        return True, _taints(current), written["spec"]["taints"] if check_mode else _taints(written)
    return bool(lost), _taints(node_obj), _taints(current)


def _diff(changes):
    return {"before": dict((name, {"spec": {"taints": before}}) for name, before, _after in changes),
            "after": dict((name, {"spec": {"taints": after}}) for name, _before, after in changes)}


def taint(cluster, operator_namespace, record, nodes, check_mode=False):
    """Record nodes (with their Node UIDs) in kvq-steering-<record> of operator_namespace, then give each one the
    steering taint it lacks. An unknown node is one InputError naming it, before anything is written. Returns
    {changed, tainted: [the nodes this call tainted], record: the ConfigMap's name, warnings, diff}; check_mode
    writes nothing and says what would change."""
    nodes = _check_args(operator_namespace, record, nodes, True)
    name = record_name(record)
    found, unknown = {}, []
    for node in nodes:
        try:
            found[node] = _read_node(cluster, node)
        except NotFoundError:
            unknown.append(node)
    if unknown:
        raise InputError("no such node: %s" % ", ".join(unknown),
                         "give the names of existing nodes (kubectl get nodes); nothing was tainted or recorded")
    if not nodes:
        return {"changed": False, "tainted": [], "record": name, "warnings": [], "diff": _diff([])}
    uids = dict((node, _meta(obj).get("uid") or "") for node, obj in found.items())

    def updated(recorded):
        wanted = dict(recorded)
        wanted.update(uids)
        return {RECORD_KEY: json.dumps(wanted, sort_keys=True)} if wanted != recorded else None

    if check_mode:
        recorded_changes = updated(read(cluster, operator_namespace, record)[1]) is not None
    else:
        written, _current = store.save_record(
            cluster, operator_namespace, name, lambda: read(cluster, operator_namespace, record), updated,
            {RECORD_ANNOTATION: record},
            "record the nodes to taint in configmap %s in namespace %s" % (name, operator_namespace))
        recorded_changes = written is not None

    tainted, changes, warnings = [], [], []
    ours = steering_taint(record)
    for node in nodes:
        held = [item for item in _taints(found[node]) if is_ours(item)]
        if held and held[0].get("value", "") != ours.get("value", ""):
            warnings.append("node %s already carries the taint %s=%s:%s (another run's?): left as it is, and "
                            "removed by whichever run untaints the node first"
                            % (node, TAINT_KEY, held[0].get("value", ""), TAINT_EFFECT))
        try:
            made, before, after = _rewrite_taints(cluster, found[node], lambda taints: with_taint(taints, record),
                                                  check_mode)
        except NotFoundError:
            warnings.append("node %s was deleted while it was being tainted: nothing to taint (it stays in %s until "
                            "it is untainted)" % (node, name))
            continue
        if made:
            tainted.append(node)
            changes.append((node, before, after))
    return {"changed": bool(tainted) or recorded_changes, "tainted": tainted, "record": name, "warnings": warnings,
            "diff": _diff(changes)}


def _forget(cluster, operator_namespace, record, nodes):
    """Drop nodes from the record (a conditional update), deleting it when no node is left; whether it changed."""
    name = record_name(record)

    def compute(current):
        configmap, recorded = current
        remaining = dict((node, uid) for node, uid in recorded.items() if node not in nodes)
        if configmap is None or remaining == recorded:
            return None
        if not remaining:
            return ("delete", configmap)
        return ("update", dict(configmap, data={RECORD_KEY: json.dumps(remaining, sort_keys=True)}))

    def write(change):
        action, configmap = change
        if action == "delete":
            return store.delete_record(cluster, operator_namespace, configmap)
        return cluster.replace(configmap, "update configmap %s in namespace %s" % (name, operator_namespace))

    written, _current = conditional_update(lambda: read(cluster, operator_namespace, record), compute, write,
                                           what="drop untainted nodes from configmap %s in namespace %s"
                                           % (name, operator_namespace))
    return written is not None


def untaint(cluster, operator_namespace, record, nodes=None, check_mode=False):
    """Remove the steering taint (only it: the key with the effect PreferNoSchedule) from nodes, or from every node
    of the record when nodes is None, then drop them from the record (deleted once empty). A node that is gone is
    fine; a node the record does not list is untainted all the same (idempotent clean-up). Returns {changed,
    untainted: [the nodes this call untainted], record: the ConfigMap's name, warnings, diff}; check_mode writes
    nothing and says what would change."""
    nodes = _check_args(operator_namespace, record, nodes, False)
    name = record_name(record)
    configmap, recorded = read(cluster, operator_namespace, record)
    targets = sorted(recorded) if nodes is None else nodes
    untainted, changes, warnings = [], [], []
    for node in targets:
        try:
            current = _read_node(cluster, node)
            if node in recorded and _meta(current).get("uid") != recorded[node]:
                warnings.append("node %s was re-created since it was recorded in %s (Node UID %s, now %s): its "
                                "steering taint is removed all the same" % (node, name, recorded[node],
                                                                            _meta(current).get("uid")))
            made, before, after = _rewrite_taints(cluster, current, without_taint, check_mode)
        except NotFoundError:
            continue   # gone: no taint left to remove
        if made:
            untainted.append(node)
            changes.append((node, before, after))
    forgotten = set(targets) & set(recorded)
    if check_mode:
        record_changes = bool(forgotten)
    else:
        record_changes = configmap is not None and _forget(cluster, operator_namespace, record, set(targets))
    return {"changed": bool(untainted) or record_changes, "untainted": untainted, "record": name,
            "warnings": warnings, "diff": _diff(changes)}


__all__ = ["TAINT_KEY", "TAINT_EFFECT", "record_name", "taint_value", "steering_taint", "is_ours", "with_taint",
           "without_taint", "parse_record", "read", "taint", "untaint"]
