# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The owner protocol: what every owner of a quota's spec.hard answers, and the helpers the owners share.

An owner is what an Evaluator is to Kubernetes' quota controller: the reservations service asks it only what is
below, never its name. Each owner lives in a module of its own (plain, rancher, harvester, aaq); registry.py is
the only place that knows them by name and picks the one that owns a quota.

The pure part takes objects as dicts (as read from the API) and returns new dicts. The three I/O steps
(guard, unguard, wait_applied) get `io`, the reservations service's view of one run:
    io.cluster            the API client
    io.clock, io.sleep    the run's clock
    io.sync_timeout       how long an owner that applies_later is waited for (seconds)
    io.attempts           conditional-write attempts on a 409
    io.stored_ledger(q)   the ledger stored for quota q now (None: none)
    io.adopt(target)      adopt someone else's change of the durable value under the namespace's lock
    io.report(state, reason, message)   warn once, with an Event on the quota and its namespace
They are called only when the run writes (never in check mode).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.kube_objects import meta as _meta


def ref(obj):
    """'namespace/name' of obj."""
    meta = _meta(obj)
    return "%s/%s" % (meta.get("namespace") or "-", meta.get("name"))


def with_annotations(obj, changes):
    """A deep copy of obj with annotation changes applied (None removes a key)."""
    result = copy.deepcopy(obj)
    meta = result.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    for key, value in changes.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    meta["annotations"] = annotations
    return result


def hard_of(quota):
    """spec.hard of a ResourceQuota (name -> string)."""
    return dict(((quota or {}).get("spec") or {}).get("hard") or {})


def used_of(quota):
    """status.used of a ResourceQuota (name -> string)."""
    return dict(((quota or {}).get("status") or {}).get("used") or {})


class QuotaOwner(object):
    """What every owner of a quota's spec.hard answers. A new owner (a Capsule tenant, AAQ's objects) is a
    module implementing this and a line in registry.py, not a branch in the callers."""

    name = None
    writable = False          # whether kvquota may change spec.hard through this owner at all
    written_on = None         # the object whose write changes spec.hard: "quota", "namespace" (None: none)
    refuses_below_usage = False   # the owner refuses a value below status.used (then: reservations' remainder)
    guards_the_quota = False  # guard/unguard write the quota itself (an opt-out), the owner's value elsewhere
    applies_later = False     # a controller of the owner copies the written value to spec.hard (wait_applied)
    project = None            # the Rancher project whose limit bounds an expansion, if any

    # render()'s writes are applied in this order: the quota, then the object the owner reads it from
    WRITE_ORDER = ("quota", "namespace")

    def __init__(self, notes=None):
        self.notes = list(notes or [])

    @classmethod
    def claims(cls, quota, facts):
        """Whether this owner owns spec.hard of quota (registry order decides between owners)."""
        return False

    @classmethod
    def for_quota(cls, quota, facts, notes):
        """The owner of quota that claims() found, with the notes gathered so far (it may add its own)."""
        return cls(notes)

    def describe(self):
        return {"backend": self.name, "written_on": self.written_on, "notes": list(self.notes)}

    def writable_names(self, quota):
        """The resource names a reservation may change on quota; None: every name it tracks."""
        return None

    def operator_key(self, name):
        """The key an operator raises resource name under where this owner keeps it (None: spec.hard itself)."""
        return None

    def read_only_reason(self, quota):
        """Why kvquota never writes quota (an owner that is not writable), as text; None: it may."""
        return None if self.writable else "its owner (%s) writes it, kvquota does not" % self.name

    def restate_fix(self, quota, fix):
        """A fix of quotas.make_fix as an operator makes it where this owner keeps the value (default: as made)."""
        return fix

    def durable_hard(self, quota, namespace):
        """The values that decide spec.hard (name -> string)."""
        return {}

    def effective_hard(self, quota):
        return hard_of(quota)

    def blockers(self, quota, namespace, ledger):
        """Reasons this quota cannot be expanded now (list of strings)."""
        return []

    def prepare(self, quota, namespace, ledger):
        """The ledger with any owner state recorded before the first change."""
        return ledger

    def render(self, quota, namespace, ledger):
        """{kind: new object} carrying ledger's desired values (kinds from WRITE_ORDER); {}: nothing to write."""
        return {}

    def followed(self, quota, ledger):
        """(whether spec.hard shows ledger's desired values, [names that do not])."""
        return True, []

    def before_expand(self, quota, ledger):
        """The quota as it must be before the first expansion (guards_the_quota), or None: nothing to write."""
        return None

    def after_release(self, quota, ledger):
        """The quota as it must be after the final release (guards_the_quota), or None: nothing to write."""
        return None

    # --- I/O, called by the reservations service with the run's io (see the module's docstring) ---

    def guard(self, io, target, ledger):
        """Before the owner's value for a non-idle ledger is written: what must hold first."""
        return None

    def unguard(self, io, target, idle_ledger):
        """Before the final release is written: put back what guard changed."""
        return None

    def wait_applied(self, io, state, ledger):
        """Return once spec.hard shows ledger's values (an owner whose write is spec.hard: at once)."""
        return None
