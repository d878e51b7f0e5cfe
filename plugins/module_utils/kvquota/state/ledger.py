# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reservation ledger: base + active deltas, and the external-change rules.

The ledger of one ResourceQuota is kept in the cluster, in the operator's namespace
(store.py: one ConfigMap per quota, keyed by the quota's UID), never on an object a
tenant can write. It records, per resource name, the base (the value before any
reservation, or the value an administrator set since), the value last written (and,
while a write is under way, the value before it), the active reservations with their
deltas, and a short history of external changes.

load() validates everything it reads (types, format version, quantities, times): a
ledger that does not pass is refused with its namespace/quota named, never half-read.

    desired = base + sum(active deltas)           never relative to spec.hard

Every function here is pure: it takes a Ledger and returns a new one (inputs are never
mutated) plus what happened. Times are Unix seconds given by the caller; in the JSON
they are RFC 3339 UTC strings.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import json
import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import (
    format_quantity,
    parse_quantity,
    parse_quantity_format,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.timeutil import format_time, parse_time
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import (
    add,
    equals,
    format_resource_list,
    is_negative,
    parse_resource_list,
    remove_zeros,
)

# Where collection 0.1.0 kept ledgers (on the quota or its Namespace); read only to adopt them (store.py).
LEDGER_ANNOTATION = "kvquota.maintenance/ledger"
FORMAT_VERSION = 2
LEGACY_FORMAT_VERSION = 1
# No quota the apiserver can hold is larger (int64); a ledger amount beyond it is corrupt, not a request.
MAX_AMOUNT = 2 ** 63 - 1
MAX_QUANTITY_TEXT = 64
# the name of the quota owner that wrote a ledger (owners/registry.NAMES); any well-formed name is read, so a
# newer owner's ledgers are not "corrupt" to this reader
OWNER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")
HISTORY_LIMIT = 20
RELEASED_LIMIT = 20

# outcomes of observe()
REVERTED = "reverted"
ADMIN_CHANGE = "admin-change"
REMOVED = "removed"

# outcomes of reserve()
CREATED = "created"
UNCHANGED = "unchanged"
TOPPED_UP = "topped-up"
REPLACED = "replaced"
RENEWED = "renewed"
REFS_UPDATED = "refs-updated"
UNTRACKED = "untracked"

# outcomes of release()
RELEASED = "released"
# released down to the quota's usage only: the owner of the quota (Harvester's namespace webhook) refuses a value
# below status.used, so what usage still holds stays recorded as the reservation's remainder (hold_at_usage)
HELD_AT_USAGE = "held-at-usage"
ALREADY_RELEASED = "already-released"
UNKNOWN = "unknown"

_REF_LISTS = ("migrations", "sourcePods", "vms")
# follow mode: {migration UID: "namespace/name"}, each written whole (the migrations a group adopted, and those it
# gave back to the queue)
_REF_MAPS = ("adopted", "displaced")


# ---------------------------------------------------------------------------
# data

class Reservation(object):
    """One reservation on one quota: the delta it adds and who asked for it, until when."""

    def __init__(self, rid, delta, owner="", reason="", created=None, expires=None, refs=None, top_ups=None,
                 remainder=False):
        self.id = str(rid)
        self.delta = dict(delta)            # name -> canonical quantity string
        self.owner = owner or ""
        self.reason = reason or ""
        self.created = created              # RFC 3339 text
        self.expires = expires              # RFC 3339 text or None (no expiry)
        self.refs = copy.deepcopy(refs) if refs else {}
        self.top_ups = list(top_ups or [])  # keys of top-ups already applied
        # released, but the quota's owner refuses a value below usage: delta is only what usage still holds
        # (hold_at_usage); the reaper finishes the release once usage drops
        self.remainder = bool(remainder)

    def delta_values(self):
        """The delta as a ResourceList (exact values)."""
        return parse_resource_list(self.delta, "reservation %s delta" % self.id)

    def expires_at(self):
        """Expiry in Unix seconds, or None."""
        return parse_time(self.expires) if self.expires else None

    def to_json(self):
        data = {"delta": dict(sorted(self.delta.items())), "owner": self.owner, "reason": self.reason,
                "created": self.created, "expires": self.expires}
        if self.refs:
            data["refs"] = copy.deepcopy(self.refs)
        if self.top_ups:
            data["topUps"] = list(self.top_ups)
        if self.remainder:
            data["remainder"] = True
        return data

    @classmethod
    def from_json(cls, rid, data):
        if not isinstance(data, dict) or not isinstance(data.get("delta"), dict):
            raise InputError("reservation '%s' in the ledger has no delta" % rid,
                             "repair the ledger or delete it and restore spec.hard by hand")
        return cls(rid, data["delta"], data.get("owner"), data.get("reason"), data.get("created"),
                   data.get("expires"), data.get("refs"), data.get("topUps"), data.get("remainder") is True)

    def __eq__(self, other):
        return isinstance(other, Reservation) and self.id == other.id and self.to_json() == other.to_json()

    def __ne__(self, other):
        return not self == other

    def __repr__(self):
        return "Reservation(%r, %r, expires=%r)" % (self.id, self.delta, self.expires)


class Ledger(object):
    """What kvquota changed on one quota and why; see the module docstring."""

    def __init__(self, namespace, quota, backend="plain", base=None, written=None, reservations=None,
                 released=None, history=None, state=None, uid=None, previous=None):
        self.namespace = namespace
        self.quota = quota
        self.uid = uid                                  # the quota's metadata.uid: the ledger's identity
        self.backend = backend
        self.base = dict(base or {})                    # name -> quantity string as found (None: removed)
        self.written = dict(written or {})              # name -> quantity string last written
        self.reservations = dict(reservations or {})    # id -> Reservation
        self.released = list(released or [])            # [{"id", "at"}], newest last
        self.history = list(history or [])              # [{"at", "kind", "resource", ...}], newest last
        self.state = copy.deepcopy(state) if state else {}  # backend state remembered before the first change
        # written before the write now under way (the ledger is saved before the quota is written; see observe)
        self.previous = dict(previous) if previous else None

    def copy(self):
        return copy.deepcopy(self)

    def to_json(self):
        data = {
            "v": FORMAT_VERSION,
            "namespace": self.namespace,
            "quota": self.quota,
            "quotaUid": self.uid,
            "backend": self.backend,
            "base": dict(sorted(self.base.items())),
            "written": dict(sorted(self.written.items())),
            "reservations": dict((rid, self.reservations[rid].to_json()) for rid in sorted(self.reservations)),
        }
        if self.released:
            data["released"] = list(self.released)
        if self.history:
            data["history"] = list(self.history)
        if self.state:
            data["state"] = copy.deepcopy(self.state)
        if self.previous is not None:
            data["previous"] = dict(sorted(self.previous.items()))
        return data

    def __eq__(self, other):
        return isinstance(other, Ledger) and self.to_json() == other.to_json()

    def __ne__(self, other):
        return not self == other

    def __repr__(self):
        return "Ledger(%s/%s, base=%r, reservations=%r)" % (
            self.namespace, self.quota, self.base, sorted(self.reservations))


def new_ledger(namespace, quota, backend="plain", uid=None):
    """An empty ledger for a quota that kvquota has not touched yet."""
    return Ledger(namespace, quota, backend, uid=uid)


def dump(ledger):
    """The annotation value: compact JSON with sorted keys (stable, so unchanged ledgers compare equal)."""
    return json.dumps(ledger.to_json(), sort_keys=True, separators=(",", ":"))


def load(text, namespace=None, quota=None, version=FORMAT_VERSION):
    """A Ledger from its JSON text; None/'' gives None.

    Everything is validated (see validate()): anything else raises InputError naming namespace/quota and what is
    wrong, so a corrupt ledger is reported and skipped by readers, and refused by writers of that quota.
    version=LEGACY_FORMAT_VERSION reads a 0.1.0 annotation (for adoption only)."""
    if text is None or text == "":
        return None
    where = "%s/%s" % (namespace, quota) if namespace or quota else "the object"
    if not isinstance(text, str):
        raise _corrupt(where, "its text is a %s, not JSON text" % type(text).__name__)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise _corrupt(where, "it is not valid JSON (%s)" % err)
    return validate(data, where, version, namespace, quota)


def _corrupt(where, what):
    return InputError("the kvquota ledger of %s is corrupt: %s" % (where, what),
                      "nothing was written to that quota; the ledger's base (or the quota's QuotaReserved Events) "
                      "holds the values to put back: restore spec.hard by hand and delete the ledger "
                      "(kubectl -n <operator namespace> delete configmap -l kvquota.maintenance/ledger)")


def _check_amount(text, what, where, allow_none=False):
    """A quantity string of a ledger: a string the apiserver accepts, not negative, not absurdly large."""
    if text is None and allow_none:
        return
    if not isinstance(text, str) or not text.strip():
        raise _corrupt(where, "%s is %r, not a quantity string" % (what, text))
    if len(text) > MAX_QUANTITY_TEXT:
        raise _corrupt(where, "%s is %d characters long" % (what, len(text)))
    try:
        value = parse_quantity(text, what)
    except InputError as err:
        raise _corrupt(where, "%s: %s" % (what, err.message))
    if value < 0:
        raise _corrupt(where, "%s is negative (%s)" % (what, text))
    if value > MAX_AMOUNT:
        raise _corrupt(where, "%s is larger than any quota can be (%s)" % (what, text))


def _check_list(values, what, where, allow_none=False):
    if not isinstance(values, dict):
        raise _corrupt(where, "%s is a %s, not a mapping of resource names to quantities"
                       % (what, type(values).__name__))
    for name, text in values.items():
        if not isinstance(name, str) or not name:
            raise _corrupt(where, "%s has a resource name %r" % (what, name))
        _check_amount(text, "%s of %s" % (what, name), where, allow_none)


def _check_time(text, what, where, allow_none=True):
    if text is None and allow_none:
        return
    if not isinstance(text, str):
        raise _corrupt(where, "%s is %r, not an RFC 3339 time" % (what, text))
    try:
        parse_time(text)
    except InputError:
        raise _corrupt(where, "%s is %r, not an RFC 3339 time" % (what, text))


def _check_text(value, what, where):
    if value is not None and not isinstance(value, str):
        raise _corrupt(where, "%s is %r, not a string" % (what, value))


def _check_reservation(rid, entry, where):
    if not isinstance(rid, str) or not rid.strip() or len(rid) > 253:
        raise _corrupt(where, "a reservation id is %r" % (rid,))
    what = "reservation '%s'" % rid
    if not isinstance(entry, dict):
        raise _corrupt(where, "%s is %r, not a mapping" % (what, entry))
    _check_list(entry.get("delta"), "the delta of " + what, where)
    for key in ("owner", "reason"):
        _check_text(entry.get(key), "the %s of %s" % (key, what), where)
    _check_time(entry.get("created"), "the creation time of " + what, where)
    _check_time(entry.get("expires"), "the expiry of " + what, where)
    refs = entry.get("refs")
    if refs is not None:
        if not isinstance(refs, dict):
            raise _corrupt(where, "the refs of %s are %r, not a mapping" % (what, refs))
        for key in _REF_LISTS:
            if key in refs and not isinstance(refs[key], list):
                raise _corrupt(where, "refs.%s of %s is not a list" % (key, what))
        for key in _REF_MAPS:
            if key in refs and not (isinstance(refs[key], dict) and all(
                    isinstance(k, str) and isinstance(v, str) for k, v in refs[key].items())):
                raise _corrupt(where, "refs.%s of %s is not a mapping of migration UIDs to names" % (key, what))
    top_ups = entry.get("topUps")
    if top_ups is not None and (not isinstance(top_ups, list) or not all(isinstance(k, str) for k in top_ups)):
        raise _corrupt(where, "the top-up keys of %s are %r, not a list of strings" % (what, top_ups))
    if entry.get("remainder") not in (None, True, False):
        raise _corrupt(where, "the remainder flag of %s is %r, not a boolean" % (what, entry.get("remainder")))


def validate(data, where, version=FORMAT_VERSION, namespace=None, quota=None):
    """A Ledger from decoded JSON, every field checked; InputError (naming where) otherwise."""
    if not isinstance(data, dict):
        raise _corrupt(where, "it is a %s, not a mapping" % type(data).__name__)
    found = data.get("v")
    if isinstance(found, bool) or found != version:
        raise InputError("the kvquota ledger of %s has format version %r; this reader takes version %s"
                         % (where, found, version),
                         "use the kvquota.maintenance version that wrote it to release its reservations")
    for key in ("namespace", "quota", "quotaUid"):
        _check_text(data.get(key), key, where)
    if namespace is not None and data.get("namespace") not in (None, namespace):
        raise _corrupt(where, "it names namespace %r" % data.get("namespace"))
    if quota is not None and data.get("quota") not in (None, quota):
        raise _corrupt(where, "it names quota %r" % data.get("quota"))
    backend = data.get("backend", "plain")
    if not isinstance(backend, str) or not OWNER_NAME.match(backend):
        raise _corrupt(where, "its backend is %r, not the name of a quota owner" % (backend,))
    _check_list(data.get("base", {}), "base", where, allow_none=True)
    _check_list(data.get("written", {}), "written", where)
    if data.get("previous") is not None:
        _check_list(data["previous"], "previous", where)
    reservations = data.get("reservations") or {}
    if not isinstance(reservations, dict):
        raise _corrupt(where, "its reservations are a %s, not a mapping" % type(reservations).__name__)
    for rid, entry in reservations.items():
        _check_reservation(rid, entry, where)
        missing = sorted(name for name in entry["delta"] if (data.get("base") or {}).get(name) is None)
        if missing:
            raise _corrupt(where, "reservation '%s' adds %s, which has no base" % (rid, ", ".join(missing)))
    released = data.get("released") or []
    if not isinstance(released, list) or not all(isinstance(item, dict) and isinstance(item.get("id"), str)
                                                 for item in released):
        raise _corrupt(where, "its released list is %r" % (released,))
    for item in released:
        _check_time(item.get("at"), "the release time of '%s'" % item["id"], where)
    history = data.get("history") or []
    if not isinstance(history, list) or not all(isinstance(item, dict) for item in history):
        raise _corrupt(where, "its history is %r, not a list of entries" % (history,))
    state = data.get("state") or {}
    if not isinstance(state, dict) or not all(isinstance(value, dict) for value in state.values()):
        raise _corrupt(where, "its backend state is %r, not a mapping of records" % (state,))
    entries = dict((rid, Reservation.from_json(rid, entry)) for rid, entry in reservations.items())
    return Ledger(data.get("namespace", namespace), data.get("quota", quota), backend, data.get("base"),
                  data.get("written"), entries, released, history, state, data.get("quotaUid"), data.get("previous"))


# ---------------------------------------------------------------------------
# arithmetic

def _value(text, name):
    return parse_quantity(text, name)


def _same(a, b, name):
    """Whether two quantity strings are the same amount ('1Gi' == '1024Mi')."""
    return _value(a, name) == _value(b, name)


def managed_names(ledger):
    """Resource names whose value the ledger decides (sorted)."""
    return sorted(name for name, text in ledger.base.items() if text is not None)


def active_delta(ledger):
    """Sum of the deltas of every active reservation (expired ones count until released)."""
    result = {}
    for rid in sorted(ledger.reservations):
        result = add(result, ledger.reservations[rid].delta_values())
    return result


def desired(ledger):
    """base + sum of active deltas, per managed name, as exact values."""
    deltas = active_delta(ledger)
    return dict((name, _value(ledger.base[name], name) + deltas.get(name, 0)) for name in managed_names(ledger))


def desired_strings(ledger):
    """desired(ledger) as quantity strings: the base's own string wherever the value equals the base,
    else the canonical string in the base's format ('5000Mi' + 1Gi -> '6024Mi')."""
    result = {}
    values = desired(ledger)
    for name in managed_names(ledger):
        base_text = ledger.base[name]
        base_value, fmt = parse_quantity_format(base_text, name)
        value = values[name]
        result[name] = base_text if value == base_value else format_quantity(value, fmt)
    return result


def render_hard(ledger, hard):
    """A copy of the mapping hard (spec.hard or its Rancher equivalent) with every managed name set to
    its desired string (the exact base strings once no reservation is left)."""
    result = dict(hard or {})
    result.update(desired_strings(ledger))
    return result


def needs_write(ledger, current):
    """Whether the durable values in current differ from the desired ones (compared as amounts)."""
    for name, text in desired_strings(ledger).items():
        found = (current or {}).get(name)
        if found is None or not _same(found, text, name):
            return True
    return False


def mark_written(ledger, strings=None):
    """The ledger after writing strings (default: desired_strings) to the quota."""
    result = ledger.copy()
    result.written = dict(strings if strings is not None else desired_strings(ledger))
    return result


def is_idle(ledger):
    """True when no reservation is active: the quota goes back to its base and the ledger is removed."""
    return not ledger.reservations


def remember(ledger, key, value):
    """The ledger with backend state[key] = value recorded, unless something is recorded already."""
    if key in ledger.state:
        return ledger
    result = ledger.copy()
    result.state[key] = copy.deepcopy(value)
    return result


def _record(ledger, entry):
    ledger.history.append(entry)
    del ledger.history[:-HISTORY_LIMIT]


# ---------------------------------------------------------------------------
# external changes

def observe(ledger, current, now):
    """Compare the quota's durable values (current: name -> string) with what kvquota last wrote.

    The ledger is saved before the quota is written (intend()); a run interrupted between the two leaves
    previous set. Per name:
      - equal to the value last written: nothing happened;
      - equal to previous (the write under way never reached the quota): written goes back to it, silently,
        and the caller writes the desired value again;
      - equal to the base: REVERTED (someone, e.g. Rancher, put the base back): the desired value will be
        re-applied; the base is unchanged;
      - missing from current: REMOVED (an administrator dropped the limit): kvquota stops managing it;
      - anything else: ADMIN_CHANGE: that value becomes the new base, the active deltas stay on top.
    Returns (new ledger with previous cleared, [change dicts]); each change is also recorded in the history.
    """
    result = ledger.copy()
    changes = []
    stamp = format_time(now)
    for name in sorted(ledger.written):
        last = ledger.written[name]
        base = ledger.base.get(name)
        if base is None:
            continue
        found = (current or {}).get(name)
        if found is not None and _same(found, last, name):
            continue
        before = (ledger.previous or {}).get(name)
        if found is not None and before is not None and _same(found, before, name):
            result.written[name] = before
            continue
        change = {"at": stamp, "resource": name, "expected": last, "found": found, "base": base}
        if found is None:
            change["kind"] = REMOVED
            change["message"] = ("%s was removed from %s/%s by someone else (kvquota had written %s); kvquota no "
                                 "longer manages it" % (name, ledger.namespace, ledger.quota, last))
            result.base[name] = None
            result.written.pop(name, None)
        elif _same(found, base, name):
            change["kind"] = REVERTED
            change["message"] = ("%s on %s/%s was reverted to its base %s (kvquota had written %s); re-applying"
                                 % (name, ledger.namespace, ledger.quota, found, last))
        else:
            change["kind"] = ADMIN_CHANGE
            change["message"] = ("%s on %s/%s was changed to %s by someone else (kvquota had written %s, base %s); "
                                 "%s is the new base and the active reservations stay on top"
                                 % (name, ledger.namespace, ledger.quota, found, last, base, found))
            result.base[name] = found
        _record(result, change)
        changes.append(change)
    result.previous = None
    return result, changes


def intend(ledger):
    """The ledger to save BEFORE writing the quota: written = the desired values, previous = what was written
    until now. If the quota write then never happens, observe() sees previous on the quota and writes again;
    if it happens, observe() sees written. Either way nothing is taken for an external change."""
    result = mark_written(ledger)
    if result.written == ledger.written:
        result.previous = None
        return result
    previous = dict(ledger.written)
    for name in result.written:
        # a value kvquota has not written yet is still the base on the quota (recorded as found by this change):
        # a fresh ledger's first write, interrupted before the quota, is then rolled back silently instead of
        # being taken for someone reverting the quota to its base
        if name not in previous and ledger.base.get(name) is not None:
            previous[name] = ledger.base[name]
    result.previous = previous
    return result


def confirmed(ledger):
    """The ledger once its quota write has landed (previous dropped)."""
    result = ledger.copy()
    result.previous = None
    return result


# ---------------------------------------------------------------------------
# reservations

def _canonical_delta(delta, rid):
    """Delta parsed, checked (no negative amounts), zeros dropped, as canonical strings."""
    values = remove_zeros(parse_resource_list(delta, "reservation %s" % rid))
    negative = is_negative(values)
    if negative:
        raise InputError("reservation '%s' asks for a negative amount of %s" % (rid, ", ".join(negative)),
                         "give the headroom to add (positive amounts); releasing is done with release")
    return values


def _strings(values):
    return format_resource_list(values)


def top_up_key(amount):
    """The default idempotency key of a top-up: its amounts, canonical ('limits.cpu=500m,...')."""
    return "auto:" + ",".join("%s=%s" % item for item in sorted(_strings(amount).items()))


def _merge_refs(old, new):
    """Refs of old updated with new: list-valued refs are unions (order kept), others overwritten."""
    result = copy.deepcopy(old or {})
    for key, value in (new or {}).items():
        if key in _REF_LISTS or isinstance(value, list):
            items = list(result.get(key) or [])
            for item in value or []:
                if item not in items:
                    items.append(copy.deepcopy(item))
            result[key] = items
        else:
            result[key] = copy.deepcopy(value)
    return result


def _describe(values):
    return ", ".join("%s=%s" % item for item in sorted(_strings(values).items())) or "nothing"


def reserve(ledger, rid, delta, current, now, owner="", reason="", ttl_seconds=None, refs=None,
            top_up=None, replace=False):
    """Add reservation rid with delta to the ledger.

    current is the quota's durable values (name -> string); a name of delta that the quota does not track
    is left out (listed in the outcome's "untracked"); a managed name seen for the first time gets its
    current value as base. Rules:
      - new id: CREATED;
      - same id, same delta: UNCHANGED (refs not yet recorded are added: REFS_UPDATED);
      - same id, other delta: InputError, unless replace=True (REPLACED; or RENEWED when only the owner,
        reason or expiry changed) or top_up is given;
      - top_up=True or a key: delta is an amount added on top of the existing one (TOPPED_UP); the same key
        twice is UNCHANGED, so a re-run adds nothing; True uses top_up_key(delta).
    Returns (new ledger, outcome dict with "outcome", "delta" (strings), "untracked").
    """
    if not rid or not isinstance(rid, str):
        raise InputError("a reservation id must be a non-empty string, got %r" % (rid,),
                         "give an id such as the node name or the AWX job id")
    if ttl_seconds is not None and (isinstance(ttl_seconds, bool) or int(ttl_seconds) <= 0):
        raise InputError("ttl of reservation '%s' must be a positive number of seconds, got %r" % (rid, ttl_seconds),
                         "give a ttl such as 3600")
    if top_up and replace:
        raise InputError("reservation '%s': top_up and replace cannot be combined" % rid,
                         "use top_up to add an amount, or replace to set the whole delta")
    requested = _canonical_delta(delta, rid)
    tracked = set(name for name, text in (current or {}).items() if text is not None)
    untracked = sorted(name for name in requested if name not in tracked)
    values = dict((name, value) for name, value in requested.items() if name in tracked)
    result = ledger.copy()
    for name in sorted(values):
        if result.base.get(name) is None:
            result.base[name] = current[name]
    expires = format_time(int(now) + int(ttl_seconds)) if ttl_seconds is not None else None
    outcome = {"id": rid, "untracked": untracked}
    existing = ledger.reservations.get(rid)

    if existing is None:
        if not values:
            outcome.update(outcome=UNTRACKED, delta={})
            return ledger, outcome
        entry = Reservation(rid, _strings(values), owner, reason, format_time(now), expires, _merge_refs({}, refs))
        if top_up:
            entry.top_ups.append(top_up if isinstance(top_up, str) else top_up_key(values))
        result.reservations[rid] = entry
        result.released = [item for item in result.released if item.get("id") != rid]
        outcome.update(outcome=CREATED, delta=dict(entry.delta))
        return result, outcome

    entry = copy.deepcopy(existing)
    old_values = existing.delta_values()
    if top_up:
        key = top_up if isinstance(top_up, str) else top_up_key(values)
        if key in entry.top_ups or not values:
            kind = UNCHANGED
        else:
            entry.delta = _strings(add(old_values, values))
            entry.top_ups.append(key)
            kind = TOPPED_UP
    elif replace:
        if not values:
            raise InputError("reservation '%s' would be replaced by an empty delta on %s/%s"
                             % (rid, ledger.namespace, ledger.quota), "release it instead")
        before = entry.to_json()
        entry.delta = _strings(values)
        entry.owner = owner or entry.owner
        entry.reason = reason or entry.reason
        if expires is not None:
            entry.expires = expires
        if not equals(old_values, values):
            kind = REPLACED
        elif entry.to_json() != before:
            kind = RENEWED
        else:
            kind = UNCHANGED
    elif equals(old_values, values):
        kind = UNCHANGED
    else:
        raise InputError(
            "reservation '%s' already holds %s on %s/%s; this call asks for %s"
            % (rid, _describe(old_values), ledger.namespace, ledger.quota, _describe(values)),
            "re-run with the same headroom; for a different amount use a new reservation id or release '%s' "
            "first; to add what quota admission refused, top up from the rejected migrations (kvquota_reserve "
            "migrations:, or top_up/replace in the Python API)" % rid)
    merged = _merge_refs(entry.refs, refs)
    if merged != entry.refs:
        entry.refs = merged
        if kind == UNCHANGED:
            kind = REFS_UPDATED
    if kind == UNCHANGED:
        outcome.update(outcome=UNCHANGED, delta=dict(existing.delta))
        return ledger, outcome
    result.reservations[rid] = entry
    outcome.update(outcome=kind, delta=dict(entry.delta))
    return result, outcome


def record_refs(ledger, rid, refs):
    """ledger with refs merged into reservation rid's (list-valued refs are unions, as reserve merges them), or None
    when rid is not held here or already records them all. What a batch adds once its migrations exist: their
    UIDs, which bind the reservation to them (see reservations.record_migrations)."""
    entry = ledger.reservations.get(rid)
    if entry is None:
        return None
    merged = _merge_refs(entry.refs, refs)
    if merged == entry.refs:
        return None
    result = ledger.copy()
    result.reservations[rid].refs = merged
    return result


def release(ledger, rid, now):
    """Remove reservation rid. Returns (new ledger, outcome dict); releasing an id that is not active is a
    no-op whose outcome says so (ALREADY_RELEASED when this ledger remembers it, else UNKNOWN)."""
    if rid in ledger.reservations:
        result = ledger.copy()
        entry = result.reservations.pop(rid)
        result.released = [item for item in result.released if item.get("id") != rid]
        result.released.append({"id": rid, "at": format_time(now)})
        del result.released[:-RELEASED_LIMIT]
        return result, {"id": rid, "outcome": RELEASED, "delta": dict(entry.delta)}
    for item in ledger.released:
        if item.get("id") == rid:
            return ledger, {"id": rid, "outcome": ALREADY_RELEASED, "at": item.get("at"), "delta": {},
                            "message": "reservation '%s' on %s/%s was already released at %s"
                                       % (rid, ledger.namespace, ledger.quota, item.get("at"))}
    message = "no reservation '%s' on %s/%s: nothing to release" % (rid, ledger.namespace, ledger.quota)
    return ledger, {"id": rid, "outcome": UNKNOWN, "delta": {}, "message": message}


REMAINDER_SUFFIX = ".held"


def remainder_id(rid):
    """The id under which what usage still holds of reservation rid is kept (hold_at_usage): a new id, so that a
    re-run that reserves rid again never meets the remainder, and release(rid) says "already released"."""
    return rid if rid.endswith(REMAINDER_SUFFIX) else rid[:253 - len(REMAINDER_SUFFIX)] + REMAINDER_SUFFIX


def hold_at_usage(ledger, rid, remainder, now):
    """Release rid except remainder ({name: amount}, capped at its delta): for a quota whose owner refuses a value
    below its usage (Harvester's namespace webhook), the part of the reservation that usage still holds above
    base + the other reservations. rid is released (remembered as such), and that part is kept as the reservation
    remainder_id(rid), marked as a remainder, with rid's refs, expiring now: desired() stays base + deltas, and the
    reaper (release_expired) finishes the release once usage drops (a remainder released again with usage still
    above keeps its id, smaller). A remainder of nothing is a plain release. Returns (new ledger, outcome dict)."""
    entry = ledger.reservations.get(rid)
    if entry is None:
        return release(ledger, rid, now)
    held = entry.delta_values()
    kept = dict((name, min(held[name], value)) for name, value in (remainder or {}).items()
                if name in held and value > 0)
    if not kept:
        return release(ledger, rid, now)
    keep_as = remainder_id(rid)
    if keep_as == rid:
        result = ledger.copy()
    else:
        result, _outcome = release(ledger, rid, now)
    expires = format_time(now)
    if entry.expires is not None and parse_time(entry.expires) < int(now):
        expires = entry.expires
    other = result.reservations.get(keep_as)
    if other is not None and keep_as != rid:
        kept = add(other.delta_values(), kept)    # an earlier remainder of rid (re-reserved since, then released)
    result.reservations[keep_as] = Reservation(keep_as, _strings(kept), entry.owner, entry.reason, entry.created,
                                               expires, entry.refs, remainder=True)
    return result, {"id": rid, "outcome": HELD_AT_USAGE, "delta": dict(entry.delta), "held": _strings(kept),
                    "held_as": keep_as}


def expired(ledger, now):
    """Ids of the reservations whose expiry is at or before now (sorted). Nothing is released here: only an
    explicit reaper run releases them."""
    return sorted(rid for rid, entry in ledger.reservations.items()
                  if entry.expires_at() is not None and entry.expires_at() <= int(now))


def holding(ledger, rid):
    """Whether reservation rid is active in this ledger."""
    return rid in ledger.reservations


def summary(ledger):
    """A JSON-friendly view for module results and reports."""
    return {
        "namespace": ledger.namespace,
        "quota": ledger.quota,
        "backend": ledger.backend,
        "base": dict(ledger.base),
        "desired": desired_strings(ledger),
        "reservations": dict((rid, entry.to_json()) for rid, entry in sorted(ledger.reservations.items())),
        "history": list(ledger.history),
    }
