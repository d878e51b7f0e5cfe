# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the always-on event source (extensions/eda/plugins/event_source/migrations.py) tells a rulebook: typed
triggers from the objects it watches, each with the scope it concerns.

A trigger never carries an amount: the playbook it starts (maintenance_window, the reaper) reads the cluster
itself. Most of what is watched is the tenants' to write (a migration's status, a VMI's labels; on KubeVirt a
VMI's status too): a trigger only says where a window may be needed, and the rulebook throttles how often one
starts. Nodes and the operator namespace's ledgers are the control plane's and the operator's.

    migration_refused     a migration (not final) that quota admission refuses (migrationRejectedByResourceQuota),
                          once per migration until the condition clears          scope: its namespace
    evacuation_started    a VMI marked for evacuation (status.evacuationNodeName, its node being drained),
                          once per VMI and node                                 scope: that node
    updater_round         a VMI running an outdated launcher (label kubevirt.io/outdatedLauncherImage: KubeVirt's
                          workload updater will migrate it), once per VMI        scope: its namespace
    node_cordoned         a Node turned unschedulable, once per cordon          scope: that node
    reservation_expired   a reservation of a kvquota ledger past its TTL (the reaper releases it), once per
                          ledger and reservation                                scope: the quota's namespace
    window_wanted         a window asked for again (WindowGate): events came while the last one ran, or none
                          started after the last ask                            scope: the cluster
    window_not_started    no window started after WindowGate asked 1 + RETRIES times; it stops asking

WindowGate stands between the triggers and the rulebook: while a window runs (its kvq-running-<prefix> record, see
state/window_record.py) the window triggers are held back, for that window serves them; once it ends, one more
window is asked for when any came meanwhile. ansible-rulebook runs one action at a time, so without it a long
window had one window queued behind it per throttle period (and ansible-rulebook 1.3 spins a CPU once more than 10
are queued).

Pure: objects are plain dicts (API JSON), time is given. TriggerState remembers what it announced so that a status
update or a relist repeating the same fact announces nothing; what it remembers is bounded by the objects that
exist (a DELETED event, or a relist that no longer has an object, forgets it).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import FINAL_MIGRATION_PHASES
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.admission import rejected_condition
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger as ledger_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store as store_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import window_record

MIGRATION_REFUSED = "migration_refused"
EVACUATION_STARTED = "evacuation_started"
UPDATER_ROUND = "updater_round"
NODE_CORDONED = "node_cordoned"
RESERVATION_EXPIRED = "reservation_expired"
WINDOW_WANTED = "window_wanted"
WINDOW_NOT_STARTED = "window_not_started"
TYPES = (MIGRATION_REFUSED, EVACUATION_STARTED, UPDATER_ROUND, NODE_CORDONED, RESERVATION_EXPIRED, WINDOW_WANTED,
         WINDOW_NOT_STARTED)

OUTDATED_LABEL = "kubevirt.io/outdatedLauncherImage"
# a DNS-1123 subdomain, what a Node's name is
NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# the kinds of objects TriggerState.observe takes
MIGRATION, VMI, NODE, LEDGER = "migration", "vmi", "node", "ledger"
KINDS = (MIGRATION, VMI, NODE, LEDGER)


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _key(obj):
    meta = _meta(obj)
    return meta.get("uid") or "%s/%s" % (meta.get("namespace", ""), meta.get("name", ""))


# what a rulebook does about each type: start a maintenance window, run the reaper, or only say it
WINDOW, REAP, INFO = "window", "reap", "info"
ACTIONS = {MIGRATION_REFUSED: WINDOW, EVACUATION_STARTED: WINDOW, UPDATER_ROUND: WINDOW, WINDOW_WANTED: WINDOW,
           RESERVATION_EXPIRED: REAP}


def trigger(kind, scope_nodes=(), scope_namespaces=(), subject="", reason=""):
    """A trigger as the source emits it: {"kvquota": {type, action, scope: {nodes, namespaces}, scope_key, subject,
    reason}}; action (window, reap, info) is what protect_migrations.yml acts on and throttles by, scope_key
    ("node/<name>", "namespace/<name>", "cluster") where the trigger is (names a tenant chooses: no throttle key)."""
    nodes, namespaces = sorted(set(scope_nodes)), sorted(set(scope_namespaces))
    key = ",".join(["node/" + n for n in nodes] + ["namespace/" + n for n in namespaces]) or "cluster"
    return {"kvquota": {"type": kind, "action": ACTIONS.get(kind, INFO),
                        "scope": {"nodes": nodes, "namespaces": namespaces}, "scope_key": key,
                        "subject": subject, "reason": reason}}


class TriggerState(object):
    """What was announced, per watched kind: {object key: the fact announced}."""

    def __init__(self):
        self.announced = dict((kind, {}) for kind in KINDS)

    def observe(self, kind, event_type, obj, now):
        """The triggers one watch event (ADDED, MODIFIED, DELETED) of an object of kind gives: [] when it repeats
        what was announced, or announces nothing."""
        if kind not in KINDS:
            raise InputError("unknown kind %r" % (kind,), "one of %s" % ", ".join(KINDS))
        known = self.announced[kind]
        key = _key(obj)
        if event_type == "DELETED":
            for fact in [f for f in known if f[0] == key]:
                del known[fact]
            return []
        try:
            facts = dict(getattr(self, "_" + kind)(obj, now))
        except Exception:  # pylint: disable=broad-except
            # an object of a shape nothing here expects (a tenant's, where a schema lets it): it says nothing,
            # and the watch goes on for every other object
            facts = {}
        # a fact no longer true is forgotten (a refusal cleared, an uncordon): it is announced again when it returns
        for fact in [f for f in known if f[0] == key and f not in facts]:
            del known[fact]
        out = []
        for fact, made in sorted(facts.items()):
            if fact not in known:
                known[fact] = True
                out.append(made)
        return out

    def resync(self, kind, objects, now):
        """After a relist: forget what no listed object says any more, and the triggers of what changed meanwhile
        (as observe(ADDED) of each)."""
        keys = set(_key(obj) for obj in objects)
        known = self.announced[kind]
        for fact in [f for f in known if f[0] not in keys]:
            del known[fact]
        out = []
        for obj in objects:
            out.extend(self.observe(kind, "ADDED", obj, now))
        return out

    def tick(self, ledgers, now):
        """The reservations that expired since the ledgers (the ledger ConfigMaps as last seen) were read."""
        out = []
        for configmap in ledgers:
            out.extend(self.observe(LEDGER, "MODIFIED", configmap, now))
        return out

    # -- facts per kind: [((key, what), trigger)] --------------------------------------------------------

    @staticmethod
    def _migration(vmim, _now):
        meta, status = _meta(vmim), vmim.get("status") or {}
        if status.get("phase") in FINAL_MIGRATION_PHASES or rejected_condition(vmim) is None:
            return []
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        vmi = (vmim.get("spec") or {}).get("vmiName") or ""
        return [((_key(vmim), "refused"), trigger(
            MIGRATION_REFUSED, scope_namespaces=[ns], subject="%s/%s" % (ns, name),
            reason="migration %s/%s of VMI %s is refused by ResourceQuota (migrationRejectedByResourceQuota)"
                   % (ns, name, vmi)))]

    @staticmethod
    def _vmi(vmi, _now):
        meta, status = _meta(vmi), vmi.get("status") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        facts = []
        node = status.get("evacuationNodeName")
        # a tenant can write the VMI's status: only a name a Node can have is taken (and a window it starts counts
        # the mark only while that node is cordoned: follow.MoveMarks)
        if isinstance(node, str) and NODE_NAME.match(node) and len(node) <= 253:
            facts.append(((_key(vmi), "evacuation/" + node), trigger(
                EVACUATION_STARTED, scope_nodes=[node], subject="%s/%s" % (ns, name),
                reason="VMI %s/%s is marked for evacuation from node %s" % (ns, name, node))))
        if OUTDATED_LABEL in (meta.get("labels") or {}):
            facts.append(((_key(vmi), "outdated"), trigger(
                UPDATER_ROUND, scope_namespaces=[ns], subject="%s/%s" % (ns, name),
                reason="VMI %s/%s runs an outdated launcher: KubeVirt's workload updater migrates it" % (ns, name))))
        return facts

    @staticmethod
    def _node(node, _now):
        if not (node.get("spec") or {}).get("unschedulable"):
            return []
        name = _meta(node).get("name", "")
        return [((_key(node), "cordoned"), trigger(NODE_CORDONED, scope_nodes=[name], subject=name,
                                                   reason="node %s is cordoned" % name))]

    @staticmethod
    def _ledger(configmap, now):
        if not _meta(configmap).get("name", "").startswith(store_mod.LEDGER_PREFIX):
            return []
        try:
            ledger = store_mod.ledger_of(configmap)
        except InputError:
            return []     # a corrupt ledger is the reaper's and the check's to name, not a trigger's
        out = []
        for rid in ledger_mod.expired(ledger, now):
            out.append(((_key(configmap), "expired/" + rid), trigger(
                RESERVATION_EXPIRED, scope_namespaces=[ledger.namespace],
                subject="%s/%s" % (ledger.namespace, ledger.quota),
                reason="reservation %s of quota %s/%s expired (the reaper releases it)"
                       % (rid, ledger.namespace, ledger.quota))))
        return out


class WindowGate(object):
    """Queues no window behind a running one (see the module's docstring). Times are the source's monotonic clock
    (seconds): a step of the wall clock neither holds events back nor ends a window.

    observe(event_type, configmap, now, listed=False) takes each ConfigMap of the operator namespace as watched
    (listed ones from resync); only kvq-running-<prefix> counts, written by the operator's windows alone. A window
    runs while its record exists and was last rewritten (a new resourceVersion) less than stale_seconds ago: a
    killed window's record stops counting, and is not taken for a new window when a relist shows it again. A record
    seen being written (a watch event) proves a live window; one only listed (at the source's start, after an
    outage) proves nothing until it is rewritten. A window seen starting serves everything that came before it:
    nothing is wanted any more; one that says it failed (its record's "ended": "failed" before it goes) served
    nothing, and another is asked for at once, up to max_failures windows in a row.

    gate(trigger, now) -> the triggers to send for a window trigger: none while a window runs (one is wanted once
    it ends), else the trigger (wanted until a window is seen starting). tick(now) -> window_wanted once no window
    runs and one is wanted, at once after a window that held events back or failed, else retry_seconds after the
    last ask (the rulebook's throttle may have dropped it, or the window failed before it started); after
    1 + retries asks without a window starting, or max_failures failed windows in a row, window_not_started once,
    and nothing is wanted any more."""

    def __init__(self, prefix, retry_seconds=60, retries=3, stale_seconds=window_record.STALE_SECONDS,
                 max_failures=3):
        self.name = window_record.running_name(prefix)
        self.retry_seconds, self.retries, self.stale_seconds = retry_seconds, retries, stale_seconds
        self.max_failures = max_failures
        self.window = None        # (UID, start time) of the running window's record
        self.version = None       # its resourceVersion as last seen
        self.renewed_at = None    # when a new resourceVersion of it was seen (None: only listed, not proven)
        self.dead = None          # (UID, start time, resourceVersion) of a record that went stale
        self.wanted = None        # when the first window trigger not yet served came
        self.held = 0             # window triggers held back while the window ran
        self.asks = 0             # times a window was asked for since wanted
        self.asked_at = None
        self.failures = 0         # windows in a row that said they failed

    def runs(self, now):
        return self.window is not None and self.renewed_at is not None and now - self.renewed_at < self.stale_seconds

    def observe(self, event_type, configmap, now, listed=False):
        meta = _meta(configmap)
        if meta.get("name") != self.name:
            return
        if event_type == "DELETED":
            self._ended()
            return
        data = (configmap or {}).get("data") or {}
        window, version = (meta.get("uid"), data.get("since")), meta.get("resourceVersion")
        if self.dead == window + (version,):
            return                                  # the stale record of a killed window, listed again
        if data.get("ended") == "failed":
            self._failed(now)
            return
        if window != self.window:
            self.window, self.version, self.renewed_at = window, version, None if listed else now
            if not listed:
                self._started()
            return
        if version != self.version:
            if self.renewed_at is None:
                self._started()                     # a listed record rewritten: a live window after all
            self.version, self.renewed_at = version, now

    def _started(self):
        self.wanted, self.held, self.asks, self.asked_at = None, 0, 0, None

    def resync(self, configmaps, now):
        """After a relist of the operator namespace's ConfigMaps."""
        mine = [c for c in configmaps if _meta(c).get("name") == self.name]
        if mine:
            self.observe("ADDED", mine[0], now, listed=True)
        elif self.window is not None:
            self._ended()

    def _ended(self):
        if self.window is not None and self.renewed_at is not None:
            self.failures = 0                        # a window that ended without saying it failed
        self.window = self.version = self.renewed_at = None
        if self.held:
            self.asks, self.asked_at = 0, None     # ask at once for what came while it ran

    def _failed(self, now):
        self.window = self.version = self.renewed_at = None
        self.failures += 1
        if self.wanted is None:
            self.wanted = now
        self.asks, self.asked_at = 0, None

    def gate(self, event, now):
        if self.wanted is None:
            self.wanted = now
        if self.runs(now):
            self.held += 1
            return []
        if self.asked_at is None or now - self.asked_at >= self.retry_seconds:
            self.asks += 1                           # a burst of events is one ask
            self.asked_at = now
        return [event]

    def tick(self, now):
        if self.window is not None and self.renewed_at is not None and not self.runs(now):
            self.dead = self.window + (self.version,)
            self._ended()     # a killed window: its record was not renewed
        if self.wanted is None:
            return []
        if self.runs(now) or self.asked_at is not None and now - self.asked_at < self.retry_seconds:
            return []
        if self.asks > self.retries or self.failures >= self.max_failures:
            asks, since, failures = self.asks, self.wanted, self.failures
            self.wanted, self.held, self.asks, self.asked_at, self.failures = None, 0, 0, None, 0
            return [trigger(WINDOW_NOT_STARTED, reason=(
                "%d window(s) in a row failed; not asking again (read their output); the next event asks again"
                % failures if failures >= self.max_failures else
                "no window started in %.0f s after %d asks (is the rulebook's window playbook failing?); the next "
                "event asks again" % (now - since, asks)))]
        held, self.held = self.held, 0
        self.asks += 1
        self.asked_at = now
        return [trigger(WINDOW_WANTED, reason=(
            "%d event(s) came while the last window ran" % held if held else
            "the last window failed" if self.failures else
            "no window started in the %.0f s since one was first asked for" % (now - self.wanted)))]
