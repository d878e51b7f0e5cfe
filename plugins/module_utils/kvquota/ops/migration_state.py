# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the executor's parts share: the pure rules about batches and migrations, a batch's state (Batch) and
the record of one run (RunRecord: the batches, the progress lines, warnings, what was created, reused,
cancelled, the peak extra quota). Nothing here calls the API.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import math
import re
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import ref_uids, uid_of
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.plan.cluster_settings import kubevirt_migrations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError, KvquotaError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import add, format_resource_list

VMIMS = "virtualmachineinstancemigrations"
NOT_ADMITTED_PHASES = ("", "Pending")
MANAGED_BY = "kvquota.maintenance"
DEFAULT_PER_GIB = 150       # KubeVirt's completionTimeoutPerGiB default
DEFAULT_PROGRESS = 150      # KubeVirt's progressTimeout default
GIB = 1024 ** 3

PENDING, RUNNING, FINAL, RELEASED = "pending", "running", "final", "released"


# ---------------------------------------------------------------------------
# pure parts

def batch_vm_keys(batch):
    """[(namespace, name)] of one batch of kvquota_check: {"vms": [...]} or a list, entries "ns/name" or
    {namespace, name}."""
    entries = batch.get("vms") if isinstance(batch, dict) else batch
    keys = []
    for entry in entries or ():
        if isinstance(entry, str) and entry.count("/") == 1 and all(entry.split("/")):
            keys.append(tuple(entry.split("/")))
        elif isinstance(entry, dict) and entry.get("namespace") and entry.get("name"):
            keys.append((str(entry["namespace"]), str(entry["name"])))
        else:
            raise InputError("malformed VM %r in a batch" % (entry,),
                             "give the batches as kvquota_check returns them (namespace/name or {namespace, name})")
    return keys


def batch_timeout(memory_bytes, per_gib, progress, scheduling):
    """Seconds a batch may take: ceil(largest VM memory in GiB) x completionTimeoutPerGiB + progressTimeout +
    the time to schedule the target pods (the largest VM bounds the batch; 1 GiB when unknown)."""
    largest = max([m for m in memory_bytes if m] or [GIB])
    return int(math.ceil(Fraction(largest) / GIB)) * int(per_gib) + int(progress) + int(scheduling)


def our_migration_uids(ledgers, pattern):
    """{(namespace, name): uid} of the migrations recorded (with their UID) in the refs of the reservations whose
    id matches pattern, over ledgers ({(ns, quota): Ledger}): what a re-run may take for its own. A VMIM that
    only carries this collection's labels is not in it."""
    result = {}
    for _target, ledger in sorted(ledgers.items()):
        for rid, entry in ledger.reservations.items():
            if pattern.match(rid):
                result.update(ref_uids(getattr(entry, "refs", None), "migrations"))
    return result


def ours(vmims, uids):
    """The VMIMs of vmims whose namespace, name and UID are in uids ({(namespace, name): uid})."""
    return [v for v in vmims if uids.get(((v.get("metadata") or {}).get("namespace"),
                                          (v.get("metadata") or {}).get("name"))) == uid_of(v) and uid_of(v)]


def cap_text(cap):
    """A top_up_cap as the user wrote it: '25%' or 'limits.memory=1Gi,requests.memory=50%'."""
    if isinstance(cap, dict):
        return ",".join("%s=%s" % (name, cap[name]) for name in sorted(cap))
    return str(cap)


def migration_phase(vmim):
    return (vmim.get("status") or {}).get("phase") or ""


def never_admitted(vmim):
    """A migration that has no target pod yet (Pending, for example refused by quota admission): cancelling it
    loses nothing."""
    status = vmim.get("status") or {}
    return migration_phase(vmim) in NOT_ADMITTED_PHASES and not (status.get("migrationState") or {}).get("targetPod")


def namespace_extra(deltas):
    """{namespace: ResourceList} summed from [(namespace, ResourceList)]."""
    extra = {}
    for namespace, delta in deltas:
        extra[namespace] = add(extra.get(namespace, {}), delta)
    return extra


def headroom_text(deltas):
    """"ns/quota +name=value,name=value; ..." of {(ns, quota): ResourceList}, or "none needed"."""
    return "; ".join("%s/%s +%s" % (t[0], t[1], ",".join("%s=%s" % kv for kv in sorted(format_resource_list(d).items())))
                     for t, d in sorted(deltas.items()) if d) or "none needed"


def timeouts_from_kubevirt(kubevirt_cr):
    """(completionTimeoutPerGiB, progressTimeout) of the KubeVirt CR, KubeVirt's defaults when unset."""
    migrations = kubevirt_migrations(kubevirt_cr)
    return (int(migrations.get("completionTimeoutPerGiB") or DEFAULT_PER_GIB),
            int(migrations.get("progressTimeout") or DEFAULT_PROGRESS))


CAPTURED_FIX = ("remove the objects named (they were created during the reservation and took the room it kept for "
                "the run's migrations), then re-run; install or extend the headroom fence (as an administrator, "
                "ansible-playbook kvquota.maintenance.install) so that only the run's own migrations may use a "
                "reservation")


def captured_pods(release_result):
    """The objects a release result (reservations.release) names as holding the reservation's headroom (pods,
    PVCs, migrations the run did not create), as text."""
    return [pod for item in release_result.get("captured") or () for pod in item["pods"]]


def overuse_of(release_result):
    """The quotas a release result restored below their usage (reservations.release's "overuse"), each with the
    reservation id."""
    rid = release_result.get("reservation_id")
    return [dict(item, reservation=rid) for item in release_result.get("overuse") or ()]


class Interrupted(KvquotaError):
    """The process that started the run ended: stop without touching anything more."""


class Batch(object):
    """One batch (drive mode) or one group of followed migrations (follow mode) and what became of it."""

    def __init__(self, position, count, keys, reservation_id, followed=False):
        self.followed = followed   # follow mode: its migrations were created by someone else, never by this run
        self.index = position
        self.count = count
        self.keys = keys
        self.vms = keys
        self.namespaces = sorted(set(ns for ns, _n in keys))
        self.reservation = reservation_id
        self.state = PENDING
        self.held = []
        self.targets = []
        self.deltas = {}
        self.migrations = []
        self.started = None
        self.final_at = None
        self.released_at = None
        self.timeout = None
        self.top_ups = []
        self.rounds = 0
        self.added = {}          # {(ns, quota): ResourceList} the top-ups of this batch added so far
        self.top_up_keys = []    # the refusals already topped up (refused_target_pods' key)
        self.refused_since = None
        self.skipped = []
        self.phases = {}
        self.order = None
        self.launched = None     # when its migrations were created; None while only reserved for (prepared)
        self.failed = []
        self.moved = False      # every migration of the batch Succeeded (or, after a stop, some did)
        self.release_waits = []  # why the last release attempt could not give the reservation back yet
        self.captured = []       # pods started during the reservation that hold its headroom (no fence)
        self.written = {}        # {(ns, quota): {name: Fraction}} the spec.hard its reservation and top-ups wrote
        self.lag_keys = []       # the refusals read as the quota controller lagging (no top-up for them)
        self.enforce_seconds = 0.0  # time spent waiting for status.hard to show what was written
        self.displaced = []      # follow mode: migrations given back to the queue (KubeVirt ran others in their room)

    # The batch's life, every change of state in one place: reserved for (RUNNING, its migrations created or
    # followed), FINAL once every migration is, RELEASED once its reservation is given back; a batch with nothing
    # to hold ends RELEASED from PENDING. Reserving again (a top-up, the UIDs recorded) keeps it RUNNING.
    TRANSITIONS = {PENDING: (RUNNING, RELEASED), RUNNING: (RUNNING, FINAL, RELEASED), FINAL: (RELEASED,),
                   RELEASED: ()}

    def _enter(self, state):
        if state not in self.TRANSITIONS[self.state]:
            raise KvquotaError("internal error: %s cannot go from %s to %s" % (self.label(), self.state, state),
                               "report this as a bug of kvquota.maintenance with the run's output")
        self.state = state

    def reserved(self, targets):
        """Its reservation is being written on targets [(ns, quota)]: from here on a stop releases it."""
        self._enter(RUNNING)
        self.targets = sorted(targets)

    def resumed(self, now, timeout):
        """A group of followed migrations found reserved by an earlier run: running since now."""
        self._enter(RUNNING)
        self.started = self.launched = now
        self.timeout = timeout

    def finished(self, now, moved):
        """Every migration is final (moved: whether they moved the VMs)."""
        self._enter(FINAL)
        self.final_at, self.moved = now, moved

    def released(self, now):
        """Its reservation is given back."""
        self._enter(RELEASED)
        self.released_at = now

    def ended_holding_nothing(self, now):
        """No VM left to move (or check mode): it ends here, nothing reserved."""
        self._enter(RELEASED)
        self.final_at = self.released_at = now

    def label(self):
        if self.followed:
            return "group %d" % (self.index + 1)
        return "batch %d/%d" % (self.index + 1, self.count)

    def report(self, started):
        return {
            "index": self.index,
            "order": self.order,
            "reservation": self.reservation,
            "vms": ["%s/%s" % k for k in self.vms],
            "skipped_vms": ["%s/%s" % k for k in self.skipped],
            "namespaces": sorted(set(ns for ns, _n in self.vms)),
            "headroom": dict(("%s/%s" % t, format_resource_list(d)) for t, d in sorted(self.deltas.items()) if d),
            "headroom_text": headroom_text(self.deltas),
            "top_ups": len(self.top_ups),
            "top_up_details": list(self.top_ups),
            "migrations": ["%s/%s" % (m["namespace"], m["name"]) for m in self.migrations],
            "state": self.state,
            "migrated": self.moved,
            "failed_migrations": list(self.failed),
            "displaced_migrations": ["%s/%s" % (m["namespace"], m["name"]) for m in self.displaced],
            "started": None if self.started is None else round(self.started - started, 2),
            "seconds": None if self.final_at is None or self.started is None else round(self.final_at - self.started, 2),
            "released_seconds": None if self.released_at is None or self.started is None
            else round(self.released_at - self.started, 2),
            "launch_seconds": None if self.launched is None or self.started is None
            else round(self.launched - self.started, 2),
            "timeout": self.timeout,
            "status_hard_wait_seconds": round(self.enforce_seconds, 2),
        }


class RunRecord(object):
    """The state one run's parts share: its batches (or followed groups), progress lines, warnings, the
    migrations created, reused (followed) and cancelled, what an interrupted run left (resumed), the peak
    extra quota per namespace."""

    def __init__(self, config, batches, plan=None):
        self.config = config
        self.batches = batches
        self.plan = plan         # drive mode: kvquota_check's versioned plan (plan.Plan) the batches come from, or None
        self.started = None
        self.log = []
        self.created, self.reused, self.cancelled = [], [], []
        self.peak = {}
        self.resumed = {"reservations": [], "cancelled": [], "released": []}
        self.warnings = []
        self.per_gib_now = None
        self.progress_now = None
        self.ended_by = None     # follow mode: the stop condition that ended the run
        self.cordon = "untouched"  # drive mode with cordon: cordoned (by this run) or was_cordoned (before it)
        self.cordons = {}          # per drained node: cordoned or was_cordoned (cordon: cordoned if any was by this run)
        self.overuse = []        # quotas released below their usage (a tenant's over-use: reported, never kept)

    def say(self, line):
        self.log.append(line)
        if self.config.on_progress:
            self.config.on_progress(line)

    def note_overuse(self, release_result):
        """Record the over-use a release reported (its warnings name it too)."""
        for item in overuse_of(release_result or {}):
            if item not in self.overuse:
                self.overuse.append(item)

    def warn(self, items):
        for text in items or ():
            if text not in self.warnings:
                self.warnings.append(text)

    def note_peak(self):
        active = [(t[0], d) for b in self.batches if b.state in (RUNNING, FINAL) or (b.state == PENDING and b.deltas)
                  for t, d in b.deltas.items()]
        for namespace, extra in namespace_extra(active).items():
            peak = self.peak.get(namespace, {})
            for name, value in extra.items():
                if value > peak.get(name, 0):
                    peak[name] = value
            self.peak[namespace] = peak


def natural(text):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]
