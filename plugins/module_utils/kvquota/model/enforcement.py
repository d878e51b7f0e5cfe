# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a reservation written to spec.hard is enforced yet. Pure.

Quota admission checks a pod against the quota's status.hard, not its spec.hard (the ResourceQuota admission
plugin masks and compares status.hard, and prints it after "limited:"); kube-controller-manager's quota
controller copies spec.hard to status.hard. Normally that takes well under a second, but after an API server
restart the controller can lag while its watches reconnect: a reservation written then is refused at the old
limit. So the executor waits until status.hard shows what it wrote before it starts migrations (unenforced),
and reads a refusal whose limit is below the written spec.hard as that lag, not as pods larger than planned
(lagging_refusals). The same lag holds after a release: until status.hard is back down, admission still grants
the headroom spec.hard no longer has, so a release waits for that too (restored_hard, unlowered) before it
lifts the fence and says the headroom is gone.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import format_resource_list


def _quantity(value, name):
    try:
        return parse_quantity(value, name)
    except InputError:
        return None


# How much longer than the API outage budget status.hard may take to show a reservation: client-go's informers,
# kube-controller-manager's included, retry an API server they lost at intervals that grow to [30, 60) s, so the
# quota controller's cache can lag up to a minute after the API server is back (measured in the lab: 46 s, and
# over 60 s, after a 20 s restart).
CONTROLLER_RELIST_SECONDS = 60
ENFORCE_POLL_SECONDS = 0.5


def enforce_timeout(outage_budget):
    """How long to wait for status.hard to show a written reservation: the outage the quota controller may lag
    behind (outage_budget seconds) plus CONTROLLER_RELIST_SECONDS."""
    return float(outage_budget or 0) + CONTROLLER_RELIST_SECONDS


def wait_enforced(read_quota, written, timeout, clock, sleep, poll=ENFORCE_POLL_SECONDS, on_read=None,
                  alive=None, behind=None):
    """Wait until admission enforces written ({(ns, quota): {name: Fraction}}): re-read (read_quota(ns, quota))
    only the quotas still behind, every poll seconds, up to timeout seconds. on_read(target, quota), if given,
    sees every read; alive(), if given, is called between polls (it raises to stop). behind(quota, values): the
    gaps of one quota (default unenforced: status.hard below what a reservation wrote; unlowered for a release).
    Returns (gaps, waited): gaps {(ns, quota): behind(...)} still behind at the deadline (empty once everything
    is enforced)."""
    behind = unenforced if behind is None else behind
    pending = dict((target, values) for target, values in written.items() if values)
    began = clock()
    while True:
        gaps = {}
        for target in sorted(pending):
            quota = read_quota(*target)
            if on_read is not None:
                on_read(target, quota)
            gap = behind(quota, pending[target])
            if gap:
                gaps[target] = gap
        waited = clock() - began
        if not gaps or waited >= timeout:
            return gaps, waited
        pending = dict((target, pending[target]) for target in gaps)
        if alive is not None:
            alive()
        sleep(poll)


def written_hard(reserve_result):
    """{(namespace, quota): {name: Fraction}}: the spec.hard a reserve (or top-up) result says it set, for the
    names the reservation expands (its delta) or the write changed (before differs from after). A quota whose
    item has no "after" (nothing written) is absent."""
    written = {}
    for item in (reserve_result or {}).get("quotas") or ():
        after = item.get("after") or {}
        before = item.get("before") or {}
        names = set(n for n, v in (item.get("delta") or {}).items() if _quantity(v, n))
        names |= set(n for n in after if _quantity(after[n], n) != _quantity(before.get(n), n))
        values = {}
        for name in sorted(names):
            value = _quantity(after.get(name), name) if name in after else None
            if value is not None:
                values[name] = value
        if values:
            written[(item["namespace"], item["quota"])] = values
    return written


def required_hard(quota, written):
    """{name: Fraction} admission must enforce of written ({name: Fraction}) for quota (the object read now): the
    written value, or the current spec.hard when that is lower (another job released its own reservation of the
    namespace since); a name spec.hard no longer has requires nothing."""
    spec = ((quota or {}).get("spec") or {}).get("hard") or {}
    required = {}
    for name, value in written.items():
        current = _quantity(spec.get(name), name) if name in spec else None
        if current is not None:
            required[name] = min(value, current)
    return required


def unenforced(quota, written):
    """{name: (required, enforced)} of the names of written ({name: Fraction}) that status.hard of quota (the
    object read now) does not enforce yet: enforced (status.hard, None when absent) below required_hard. Empty
    when admission enforces every written name."""
    status = ((quota or {}).get("status") or {}).get("hard") or {}
    gaps = {}
    for name, required in sorted(required_hard(quota, written).items()):
        enforced = _quantity(status.get(name), name) if name in status else None
        if enforced is None or enforced < required:
            gaps[name] = (required, enforced)
    return gaps


def restored_hard(release_items):
    """{(namespace, quota): {name: Fraction}}: the spec.hard release results (kvquota_release's "quotas") lowered,
    for the names whose "after" is below "before" on a quota the release changed. A name the release removed
    from spec.hard (no limit) needs no waiting: absent."""
    restored = {}
    for item in release_items or ():
        if not item.get("changed"):
            continue
        after = item.get("after") or {}
        before = item.get("before") or {}
        values = {}
        for name in sorted(after):
            value = _quantity(after[name], name)
            was = _quantity(before.get(name), name) if name in before else None
            if value is not None and was is not None and value < was:
                values[name] = value
        if values:
            restored[(item["namespace"], item["quota"])] = values
    return restored


def unlowered(quota, restored):
    """{name: (ceiling, enforced)} of the names of restored ({name: Fraction}) whose status.hard in quota (the
    object read now) is still above the ceiling: the restored value, or the current spec.hard when that is higher
    (another job reserved in the namespace since), or absent from status.hard. Empty once admission no longer
    grants the released headroom. A name spec.hard no longer has limits nothing, so it needs nothing."""
    spec = ((quota or {}).get("spec") or {}).get("hard") or {}
    status = ((quota or {}).get("status") or {}).get("hard") or {}
    gaps = {}
    for name, value in sorted(restored.items()):
        current = _quantity(spec.get(name), name) if name in spec else None
        if current is None:
            continue
        ceiling = max(value, current)
        enforced = _quantity(status.get(name), name) if name in status else None
        if enforced is None or enforced > ceiling:   # absent: admission limits nothing of it yet
            gaps[name] = (ceiling, enforced)
    return gaps


def gaps_text(target, gaps):
    """'ns/quota: spec.hard limits.cpu=4175m, status.hard limits.cpu=3175m' for unenforced's gaps of a quota."""
    required = format_resource_list(dict((n, g[0]) for n, g in gaps.items()))
    enforced = format_resource_list(dict((n, g[1]) for n, g in gaps.items() if g[1] is not None))
    return "%s/%s: spec.hard %s, status.hard %s" % (
        target[0], target[1], ",".join("%s=%s" % kv for kv in sorted(required.items())),
        ",".join("%s=%s" % (n, enforced.get(n, "(none)")) for n in sorted(required)))


def lagging_refusals(limited, written):
    """{(namespace, quota): {name: (limit, written)}} of the refusals whose limit is below the spec.hard this run
    wrote: admission refused at a status.hard the controller had not updated yet, so the refusal says nothing
    about the pods' size. limited: {(namespace, quota): {name: Fraction}}, the "limited:" part of the refusals
    (the lowest per name); written: as written_hard gives it. Only names both know are compared."""
    result = {}
    for target, limits in sorted((limited or {}).items()):
        wrote = (written or {}).get(target) or {}
        below = dict((name, (limit, wrote[name])) for name, limit in sorted(limits.items())
                     if name in wrote and limit < wrote[name])
        if below:
            result[target] = below
    return result


def lagging_text(lagging):
    """'ns/quota limits.cpu=3175m (written 4175m)' for lagging_refusals' result."""
    parts = []
    for target, below in sorted(lagging.items()):
        limits = format_resource_list(dict((n, v[0]) for n, v in below.items()))
        wrote = format_resource_list(dict((n, v[1]) for n, v in below.items()))
        parts.append("%s/%s %s" % (target[0], target[1], ",".join(
            "%s=%s (written %s)" % (n, limits[n], wrote[n]) for n in sorted(below))))
    return "; ".join(parts)
