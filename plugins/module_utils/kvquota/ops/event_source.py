# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The always-on event source's core (extensions/eda/plugins/event_source/migrations.py is its thin EDA shell):
four watches (client/watch.py) of the cluster's VirtualMachineInstanceMigrations, VMIs and Nodes and of the
operator namespace's ConfigMaps (kvquota's ledgers), each on a thread of its own, their events turned into typed
triggers (plan/triggers.py) under one lock, and every TICK_SECONDS the ledgers as last seen looked at again for
reservations whose TTL ran out (an expiry is a time, not a change: no watch event says so).

emit(event) gets each trigger ({"kvquota": {...}}) of the actions asked for (window, reap, info: a rulebook runs
one source per ruleset, so that its reaper is not queued behind a long window; a source that serves only the
reaper watches only the ledgers), and {"kvquota": {"type": "source_outage", ...}} once per watch whose API server
has not answered for the outage budget (the watch keeps trying), and {"kvquota": {"type": "source_ready", ...}}
once every watch has listed. Window triggers pass triggers.WindowGate: none while a window of window_prefix runs,
one after it when any came meanwhile. Only reads: the source needs list and watch on those four resources (the
ClusterRole kvquota-eda of roles/install/files/eda-source.yml).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import threading
import time

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import KUBEVIRT
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client import watch as watch_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import api_path, custom_path
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan import triggers as triggers_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.store import (
    DEFAULT_OPERATOR_NAMESPACE,
    check_operator_namespace,
)

TICK_SECONDS = 15
SOURCE_OUTAGE = "source_outage"
SOURCE_READY = "source_ready"
ACTIONS = (triggers_mod.WINDOW, triggers_mod.REAP, triggers_mod.INFO)


def check_actions(actions):
    """The actions a source serves, as a tuple; InputError naming the fix for anything else."""
    if isinstance(actions, str) or not isinstance(actions, (list, tuple)) or not actions \
            or not all(a in ACTIONS for a in actions):
        raise InputError("actions must be a non-empty list of %s, not %r" % (", ".join(ACTIONS), actions),
                         "give e.g. actions: [window, info] (and a second source with actions: [reap])")
    return tuple(a for a in ACTIONS if a in actions)


DEFAULT_WINDOW_PREFIX = "eda"     # the reservation prefix protect_migrations.yml gives its windows


def watched_kinds(actions):
    """The kinds a source serving actions watches: only the ledgers for the reaper alone."""
    if set(actions) <= {triggers_mod.REAP}:
        return (triggers_mod.LEDGER,)
    return triggers_mod.KINDS


def watched_paths(operator_namespace):
    """{kind: (path, what)} of what the source can watch."""
    return {
        triggers_mod.MIGRATION: (custom_path(KUBEVIRT[0], KUBEVIRT[1], "virtualmachineinstancemigrations"),
                                 "list virtualmachineinstancemigrations"),
        triggers_mod.VMI: (custom_path(KUBEVIRT[0], KUBEVIRT[1], "virtualmachineinstances"),
                           "list virtualmachineinstances"),
        triggers_mod.NODE: (api_path("v1", "nodes"), "list nodes"),
        triggers_mod.LEDGER: (api_path("v1", "configmaps", operator_namespace),
                              "list configmaps in namespace %s" % operator_namespace),
    }


class EventSource(object):
    """Runs the watches until stop() (see the module's docstring)."""

    def __init__(self, cluster, emit, operator_namespace=DEFAULT_OPERATOR_NAMESPACE, outage_budget=60,
                 clock=time.time, monotonic=time.monotonic, sleep=time.sleep, tick_seconds=TICK_SECONDS,
                 actions=ACTIONS, window_prefix=DEFAULT_WINDOW_PREFIX):
        check_operator_namespace(operator_namespace)
        self.actions = check_actions(actions)
        self.kinds = watched_kinds(self.actions)
        self.gate = triggers_mod.WindowGate(window_prefix)
        self.cluster, self.emit = cluster, emit
        self.operator_namespace = operator_namespace
        self.outage_budget = outage_budget
        self.clock, self.monotonic, self.sleep = clock, monotonic, sleep
        self.tick_seconds = tick_seconds
        self.state = triggers_mod.TriggerState()
        self.lock = threading.Lock()
        self.ledgers = {}         # {ConfigMap name: ConfigMap} of the operator namespace, as last seen
        self.listed = set()       # the kinds whose first list is done
        self.ready = False
        self._stop = threading.Event()
        self.errors = []          # (kind, exception) of a watch that stopped on an error that is not transient
        self.loops = {}

    def stop(self):
        self._stop.set()

    def stopped(self):
        return self._stop.is_set()

    # -- what the watches call -------------------------------------------------------------------------

    def _send(self, events):
        for event in events:
            action = event["kvquota"]["action"]
            if action not in self.actions:
                continue
            if action == triggers_mod.INFO and self.gate.runs(self.monotonic()):
                # the rulebook would queue its debug action behind the running window (a rolling drain cordons
                # many nodes during one window): said only while no window runs
                continue
            for passed in self.gate.gate(event, self.monotonic()) if action == triggers_mod.WINDOW else [event]:
                self.emit(passed)

    def on_event(self, kind, event_type, obj):
        with self.lock:
            if kind == triggers_mod.LEDGER:
                self._remember_ledger(event_type, obj)
                self.gate.observe(event_type, obj, self.monotonic())
            self._send(self.state.observe(kind, event_type, obj, self.clock()))

    def on_resync(self, kind, items):
        with self.lock:
            if kind == triggers_mod.LEDGER:
                self.ledgers = {}
                for obj in items:
                    self._remember_ledger("ADDED", obj)
                self.gate.resync(items, self.monotonic())
            self._send(self.state.resync(kind, items, self.clock()))
            self.listed.add(kind)
            if not self.ready and self.listed == set(self.kinds):
                self.ready = True
                self.emit(triggers_mod.trigger(SOURCE_READY, reason="watching %s of %s for %s" % (
                    "migrations, VMIs, nodes and the ledgers" if len(self.kinds) > 1 else "the ledgers",
                    self.operator_namespace, ", ".join(self.actions))))

    def on_outage(self, kind, seconds, message):
        self.emit(triggers_mod.trigger(SOURCE_OUTAGE, subject=kind, reason=(
            "the API server has not answered the %s watch for %.0f s (%s); it keeps trying"
            % (kind, seconds, message))))

    def tick(self):
        """Reservations whose TTL ran out since the ledgers were last seen."""
        with self.lock:
            self._send(self.state.tick(list(self.ledgers.values()), self.clock()))
            if triggers_mod.WINDOW in self.actions:
                for event in self.gate.tick(self.monotonic()):
                    self.emit(event)

    def _remember_ledger(self, event_type, obj):
        name = (obj.get("metadata") or {}).get("name", "")
        if event_type == "DELETED":
            self.ledgers.pop(name, None)
        else:
            self.ledgers[name] = obj

    # -- running ---------------------------------------------------------------------------------------

    def make_loops(self):
        """{kind: WatchLoop} for the four watches."""
        loops = {}
        for kind, (path, what) in watched_paths(self.operator_namespace).items():
            if kind not in self.kinds:
                continue
            loops[kind] = watch_mod.WatchLoop(
                lister=lambda path=path, what=what: watch_mod.list_page(self.cluster, path, what),
                streamer=lambda version, path=path: watch_mod.watch_events(self.cluster, path, version),
                on_event=lambda event_type, obj, kind=kind: self.on_event(kind, event_type, obj),
                on_resync=lambda items, kind=kind: self.on_resync(kind, items),
                on_outage=lambda seconds, message, kind=kind: self.on_outage(kind, seconds, message),
                outage_budget=self.outage_budget, stopped=self.stopped, clock=self.monotonic, sleep=self.sleep)
        self.loops = loops
        return loops

    def run(self):
        """Run every watch on a thread of its own and tick until stop(); an error that is not transient (RBAC, a
        resource not served) stops everything and is raised."""
        threads = []
        for kind, loop in sorted(self.make_loops().items()):
            thread = threading.Thread(target=self._guard, args=(kind, loop), name="kvquota-watch-" + kind,
                                      daemon=True)
            thread.start()
            threads.append(thread)
        try:
            while not self._stop.wait(self.tick_seconds):
                self.tick()
        finally:
            self.stop()
        if self.errors:
            kind, exc = self.errors[0]
            raise exc

    def _guard(self, kind, loop):
        try:
            loop.run()
        except Exception as exc:  # pylint: disable=broad-except
            self.errors.append((kind, exc))
            self.stop()
