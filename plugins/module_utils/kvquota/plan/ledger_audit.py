# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ledger audit: the reservations recorded for a namespace's quotas, as the check sees them.

Which ledger belongs to a quota (the operator namespace's ConfigMap by the quota's UID, else a verified 0.1.0
annotation), which reservations are expired, orphaned or active, and the quota as it is without the active
reservations' deltas (the plan counts reserved headroom as taken).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import timeutil
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import registry
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.findings import finding
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import FINAL_MIGRATION_PHASES
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import format_quantity, quantity_format
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import parse_resource_list


def _ref_names(refs, key):
    """Names listed under refs[key] (entries may be 'name', 'ns/name' or {'name': ...})."""
    result = []
    for item in (refs or {}).get(key) or ():
        if isinstance(item, dict):
            item = item.get("name")
        if item:
            result.append(str(item).rsplit("/", maxsplit=1)[-1])
    return result


def _finished(entry, vmims, pods, now_seconds, grace_seconds):
    """Whether a reservation's work is visibly over: every migration it names is gone or final,
    no source pod it names is still running, and it was created more than grace_seconds ago."""
    migrations = _ref_names(entry.refs, "migrations")
    if not migrations:
        return False
    created = timeutil.parse_time(entry.created) if entry.created else None
    if created is None or now_seconds - created < grace_seconds:
        return False
    live = dict((meta(m).get("name"), (m.get("status") or {}).get("phase")) for m in vmims)
    if any(name in live and live[name] not in FINAL_MIGRATION_PHASES for name in migrations):
        return False
    running = set(meta(p).get("name") for p in pods if not q.pod_is_terminal(p))
    return not any(name in running for name in _ref_names(entry.refs, "sourcePods"))


def quota_ledger(quota, ns_obj, ledgers, cluster_facts=None):
    """(Ledger or None, problem text or None) of a quota: the operator namespace's ledger with its UID
    (ledgers: {uid: Ledger} from the snapshot), else a 0.1.0 annotation that verifies against the quota."""
    uid = meta(quota).get("uid")
    if uid and uid in (ledgers or {}):
        return ledgers[uid], None
    backend = registry.owner_of(quota, ns_obj or {}, cluster_facts)
    if not backend.writable:
        return None, None
    return store.legacy_ledger(quota, ns_obj or {}, backend)


def ledger_findings(namespace, ns_obj, quota_objs, now, vmims=(), pods=(), cluster_facts=None,
                    grace_seconds=3600, ledgers=None):
    """Blockers and warnings about reservations recorded for a namespace's quotas.

    ledgers: {quota uid: Ledger} read from the operator namespace (nothing a tenant can write is read as a
    ledger; a 0.1.0 annotation counts only if it verifies against its quota). expired: its expiry is past (only
    the reaper releases it). orphaned: every migration it was made for is over (gone or final), its source pods
    are gone, and it is older than grace_seconds: the job that made it did not release it. Active reservations
    are warnings: the plan counts their delta as taken (see without_reservations).
    """
    blockers = []
    warnings = []
    now_seconds = timeutil.parse_time(now)
    for quota in quota_objs:
        qname = meta(quota).get("name")
        book, problem = quota_ledger(quota, ns_obj, ledgers, cluster_facts)
        if problem:
            warnings.append(finding("untrusted_ledger", namespace, problem,
                                    "nothing to do: kvquota ignores it and removes it on its next write", quota=qname))
        if book is None:
            continue
        for item in _reservation_findings(namespace, qname, book, now_seconds, vmims, pods, grace_seconds):
            (blockers if item.pop("_blocker") else warnings).append(item)
    return blockers, warnings


def without_reservations(quota, book):
    """A copy of quota whose spec.hard and status.hard leave out the active reservations' deltas: the plan
    counts headroom reserved by any run (another job's, or an earlier batch of this one) as taken, never as
    free room. Only a value that is still what kvquota wrote (or the value before a write under way) holds the
    deltas; any other value is an administrator's new base or a revert to the base (ledger.observe keeps it as
    the base on the next write), so it is the room without reservations as it is.

    status.used likewise leaves out what the reservations' migrations already use: usage above the base (by at
    most the delta) is their target pods, charged against the headroom reserved for them (a run interrupted
    with migrations in flight, re-run before they finished). Counted, it would read as "usage above hard" that
    only a permanent raise fixes; left out, the reserved headroom is still taken (used at the base at most, so
    nothing is free), and usage above spec.hard itself stays above the base."""
    delta = ledger.active_delta(book) if book is not None else {}
    if not delta:
        return quota
    result = copy.deepcopy(quota)
    bases = {}
    for part in ("status", "spec"):
        hard = (result.get(part) or {}).get("hard")
        if not hard:
            continue
        for name, value in delta.items():
            if name in hard and _holds_our_write(hard[name], name, book):
                base = parse_resource_list({name: hard[name]})[name] - value
                hard[name] = format_quantity(base, quantity_format(hard[name]))
                bases[name] = base      # spec.hard's (read last) when both hold our write: the plan's hard
    used = (result.get("status") or {}).get("used") or {}
    for name, base in bases.items():
        if name in used:
            value = parse_resource_list({name: used[name]})[name]
            if value > base:
                used[name] = format_quantity(max(base, value - delta[name]), quantity_format(used[name]))
    return result


def _holds_our_write(text, name, book):
    """Whether a quota value equals what the ledger says kvquota wrote there (or held before its write)."""
    value = parse_resource_list({name: text})[name]
    for written in (book.written or {}, book.previous or {}):
        if written.get(name) is not None and parse_resource_list({name: written[name]})[name] == value:
            return True
    return False


def _reservation_findings(namespace, qname, book, now_seconds, vmims, pods, grace_seconds):
    expired = set(ledger.expired(book, now_seconds))
    where = "quota %s/%s" % (namespace, qname)
    for rid in sorted(book.reservations):
        entry = book.reservations[rid]
        owner = " (owner %s)" % entry.owner if entry.owner else ""
        data = dict(quota=qname, reservation=rid, owner=entry.owner or None, expires=entry.expires,
                    delta=dict(entry.delta))
        if rid in expired:
            yield finding("expired_reservation", namespace,
                          "reservation %s on %s expired at %s%s" % (rid, where, entry.expires, owner),
                          "run the reaper (kvquota_release expired=true) or kvquota_release id=%s" % rid,
                          _blocker=True, **data)
        elif _finished(entry, vmims, pods, now_seconds, grace_seconds):
            yield finding("orphaned_reservation", namespace,
                          "reservation %s on %s%s outlived its migrations (all finished, source pods gone)"
                          % (rid, where, owner),
                          "release it: kvquota_release id=%s" % rid, _blocker=True, **data)
        else:
            yield finding("active_reservation", namespace,
                          "reservation %s on %s is active%s%s: its headroom is counted as taken"
                          % (rid, where, " until %s" % entry.expires if entry.expires else " with no expiry",
                             owner), None, _blocker=False, **data)
