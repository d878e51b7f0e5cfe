# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The migration executor of one node: runs kvquota_check's batches, each with its own quota reservation.

Per batch: reserve just before it (headroom.batch_headroom, reservations.reserve), create its
VirtualMachineInstanceMigrations (or reuse one already under way for the VM), follow them until every one
is final, topping the reservation up when quota admission still refuses a target pod, and release the
reservation once the batch's source pods are gone (reservations.release, one non-blocking check per poll).

Pipelining (overlap=True, the default): one batch is in flight at a time (KubeVirt's parallel limits count
migrations in flight), and the next one starts as soon as the previous one's migrations are final. A batch
that would expand a namespace whose reservation from an earlier batch is not released yet waits, and a later
batch whose namespaces are all free goes first instead (see next_batch): so no namespace's quota is ever expanded
for more than one batch at once, and the release of one batch (its source pods ending) overlaps the next
batch's migrations. overlap=False is strict: batches in plan order, each after every earlier release.

Quota admission checks a quota's status.hard, which kube-controller-manager copies from spec.hard: after each
reservation or top-up write the executor waits (up to api_outage_budget + 60 s, see enforcement.py) until status.hard
shows what it wrote before it creates the batch's migrations, and a refusal whose limit is below what it wrote
(the controller lagging, typically after an API server restart) gets that wait instead of a top-up.

A stop (failed migration, timeout, refusal past the top-up limits, API error) cancels the migrations of this
run that were never admitted, releases every reservation whose migrations are final (a VM that never left is
no reason to wait, see reservations._is_active_launcher), leaves the others held (TTL, reaper or a re-run),
and raises a core error carrying the partial result. resume() is what a re-run does first: it cancels this
node's kvquota migrations that were never admitted and releases the reservations "<prefix>-b<n>" an
interrupted run left, once their migrations are final.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import math
import re
import time
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import admission
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import enforcement
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import headroom as headroom_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.headroom import (
    DEFAULT_TOP_UP_CAP,
    over_cap,
    parse_top_up_cap,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import reservations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.cluster import (
    DEFAULT_OUTAGE_BUDGET,
    one_attempt_after_outage,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ownership import FINAL_MIGRATION_PHASES, KUBEVIRT, ref_uids, uid_of
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.store import DEFAULT_OPERATOR_NAMESPACE
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.cluster_settings import kubevirt_migrations
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import (
    ConflictError,
    InputError,
    KvquotaError,
    NotFoundError,
    WaitTimeoutError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.quantity import parse_quantity
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.resources import (
    add,
    format_resource_list,
    parse_resource_list,
    remove_zeros,
)

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


def next_batch(batches, overlap=True):
    """The batch that may start now, or None. batches: objects with state, index, namespaces (of its VMs) and
    held (the namespaces its reservation expanded), in plan order.

    Nothing starts while a batch is in flight. overlap=True: of the pending batches none of whose namespaces is
    held by an unreleased reservation of this run, the one whose namespaces have the most pending batches
    left (then plan order): a namespace with many batches is not left for the end, where its batches could
    only follow each other, each waiting for the previous one's release. overlap=False: the first pending
    batch, once every started batch is released."""
    if any(b.state == RUNNING for b in batches):
        return None
    held = set()
    pending = {}
    for b in batches:
        if b.state == FINAL:
            held |= set(b.held)
        elif b.state == PENDING:
            for namespace in b.namespaces:
                pending[namespace] = pending.get(namespace, 0) + 1
    best = None
    for b in batches:
        if b.state != PENDING:
            continue
        if not overlap:
            return None if held else b
        if set(b.namespaces) & held:
            continue
        left = max([pending[ns] for ns in b.namespaces] or [0])
        if best is None or left > best[0]:
            best = (left, b)
    return best[1] if best else None


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


# ---------------------------------------------------------------------------
# the executor

_CAPTURED_FIX = ("stop or delete those pods (the quota's base did not allow them), then re-run; install the headroom "
                 "fence (playbooks/install.yml, rbac/fence.yml) so that only the reserved VMs' migrations may use a "
                 "reservation")


def _captured_pods(release_result):
    """The pods a release result (reservations.release) names as holding the reservation's headroom."""
    return [pod for item in release_result.get("captured") or () for pod in item["pods"]]


class Interrupted(KvquotaError):
    """The process that started the run ended: stop without touching anything more."""


class _Batch(object):
    def __init__(self, position, count, keys, reservation_id):
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
        self.launched = None
        self.failed = []
        self.moved = False      # every migration of the batch Succeeded (or, after a stop, some did)
        self.release_waits = []  # why the last release attempt could not give the reservation back yet
        self.captured = []       # pods started during the reservation that hold its headroom (no fence)
        self.written = {}        # {(ns, quota): {name: Fraction}} the spec.hard its reservation and top-ups wrote
        self.lag_keys = []       # the refusals read as the quota controller lagging (no top-up for them)
        self.enforce_seconds = 0.0  # time spent waiting for status.hard to show what was written

    def label(self):
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
            "started": None if self.started is None else round(self.started - started, 2),
            "seconds": None if self.final_at is None or self.started is None else round(self.final_at - self.started, 2),
            "released_seconds": None if self.released_at is None or self.started is None
            else round(self.released_at - self.started, 2),
            "launch_seconds": None if self.launched is None or self.started is None
            else round(self.launched - self.started, 2),
            "timeout": self.timeout,
            "status_hard_wait_seconds": round(self.enforce_seconds, 2),
        }


class Executor(object):
    """Runs the batches of one node; see the module docstring. run() returns the result dict."""

    def __init__(self, cluster, node, batches, reservation_prefix=None, owner=None, reason=None, ttl_seconds=7200,
                 safety_margin=None, top_up_cap=None, top_up_max_rounds=2, top_up_settle_seconds=10,
                 completion_timeout_per_gib=None, progress_timeout=None, scheduling_timeout=300,
                 release_timeout=600, stop_release_timeout=120, poll_interval=1.0, overlap=True, lock=None,
                 kubevirt_version=None, overhead_ratio=None, token=None, check_mode=False, clock=time.time,
                 sleep=time.sleep, on_progress=None, alive=None, operator_namespace=DEFAULT_OPERATOR_NAMESPACE):
        if not node:
            raise InputError("node is empty", "name the node whose VMs migrate")
        self.cluster = cluster
        self.node = node
        self.prefix = reservation_prefix or node
        self.owner = owner or "kvquota.maintenance"
        self.reason = reason or "live migration off node %s for maintenance" % node
        self.ttl = int(ttl_seconds)
        self.margin = safety_margin
        self.cap = top_up_cap or DEFAULT_TOP_UP_CAP
        parse_top_up_cap(self.cap)
        self.max_rounds = int(top_up_max_rounds)
        self.settle = float(top_up_settle_seconds)
        self.per_gib = completion_timeout_per_gib
        self.progress = progress_timeout
        self.scheduling = int(scheduling_timeout)
        self.release_timeout = float(release_timeout)
        self.stop_release_timeout = float(stop_release_timeout)
        self.poll = max(0.05, float(poll_interval))
        self.overlap = bool(overlap)
        self.lock = lock
        self.operator_namespace = operator_namespace
        sizing = (("kubevirt_version", kubevirt_version), ("overhead_ratio", overhead_ratio))
        self.sizing = dict((k, v) for k, v in sizing if v)
        self.check_mode = check_mode
        self.clock = clock
        self.sleep = sleep
        self.on_progress = on_progress
        self.alive = alive
        self.token = token or time.strftime("%y%m%d%H%M%S", time.gmtime(clock()))
        given = list(batches or [])
        self.batches = [_Batch(i, len(given), batch_vm_keys(b), "%s-b%d" % (self.prefix, i))
                        for i, b in enumerate(given)]
        self.started = None
        self.log = []
        self.created, self.reused, self.cancelled = [], [], []
        self.peak = {}
        self.resumed = {"reservations": [], "cancelled": [], "released": []}
        self.warnings = []

    # -- small helpers ---------------------------------------------------

    def say(self, line):
        self.log.append(line)
        if self.on_progress:
            self.on_progress(line)

    def _warn(self, items):
        for text in items or ():
            if text not in self.warnings:
                self.warnings.append(text)

    def _timeouts(self):
        if self.per_gib and self.progress:
            return int(self.per_gib), int(self.progress)
        try:
            crs = self.cluster.list_custom(KUBEVIRT[0], KUBEVIRT[1], "kubevirts")
        except KvquotaError:
            crs = []
        per_gib, progress = timeouts_from_kubevirt(crs[0] if crs else None)
        return int(self.per_gib or per_gib), int(self.progress or progress)

    def _check_alive(self):
        # the caller (the Ansible controller) is gone: stop at once, as a killed run would; a re-run resumes
        if self.alive is not None and not self.alive():
            raise Interrupted("the process that started this run has ended", "re-run the playbook: it resumes")

    def _vmims(self, namespace):
        return self.cluster.list_custom(KUBEVIRT[0], KUBEVIRT[1], VMIMS, namespace=namespace)

    # -- resume ----------------------------------------------------------

    def resume(self):
        """Converge after an interrupted run: cancel this node's kvquota migrations that were never admitted,
        wait (up to release_timeout) for the others to be final, release the leftover reservations
        "<prefix>-b<n>" once their source pods are gone. Returns {reservations, cancelled, released}."""
        pattern = re.compile("^%s-b[0-9]+$" % re.escape(self.prefix))
        ledgers = reservations.find_ledgers(self.cluster, self.warnings, self.operator_namespace)
        leftovers = {}
        for target, entry in sorted(ledgers.items()):
            for rid in entry.reservations:
                if pattern.match(rid):
                    leftovers.setdefault(rid, []).append(list(target))
        # ours = the migrations whose UID this node's reservations recorded; labels are anyone's to set
        uids = our_migration_uids(ledgers, pattern)
        own = []
        for namespace in sorted(set(ns for ns, _name in uids)):
            own.extend(ours(self._vmims(namespace), uids))
        self.resumed["reservations"] = sorted(leftovers, key=_natural)
        if not leftovers and not [m for m in own if migration_phase(m) not in FINAL_MIGRATION_PHASES]:
            return self.resumed
        for vmim in own:
            if never_admitted(vmim):
                meta = vmim["metadata"]
                self.resumed["cancelled"].append("%s/%s" % (meta["namespace"], meta["name"]))
                if not self.check_mode:
                    self._delete_vmim(meta["namespace"], meta["name"])
        if self.check_mode:
            return self.resumed
        self.say("resuming: reservations %s of an earlier run are released once their migrations are over; "
                 "migrations that were never admitted are cancelled (%s)"
                 % (", ".join(self.resumed["reservations"]) or "none", ", ".join(self.resumed["cancelled"]) or "none"))
        deadline = self.clock() + self.release_timeout
        live = [m for m in own if migration_phase(m) not in FINAL_MIGRATION_PHASES and not never_admitted(m)]
        while live and self.clock() < deadline:
            self._check_alive()
            self.sleep(self.poll)
            live = [m for m in self._refresh(live) if migration_phase(m) not in FINAL_MIGRATION_PHASES]
        if live:
            raise WaitTimeoutError(
                "migrations %s of an interrupted run of node %s are still not over after %ss"
                % (", ".join("%s/%s" % (m["metadata"]["namespace"], m["metadata"]["name"]) for m in live),
                   self.node, int(self.release_timeout)),
                "wait for them (or delete them) and re-run the playbook: it releases reservations %s and continues"
                % ", ".join(self.resumed["reservations"]), {"result": self.result("failed")})
        for rid in self.resumed["reservations"]:
            remaining = max(1.0, deadline - self.clock())
            outcome = reservations.release(self.cluster, rid, wait_for_pods=True, timeout=remaining,
                                           quotas=leftovers[rid], poll_interval=self.poll, clock=self.clock,
                                           sleep=self.sleep, lock=self.lock, operator_namespace=self.operator_namespace)
            self._warn(outcome.get("warnings"))
            self.resumed["released"].append(rid)
        return self.resumed

    def _refresh(self, vmims):
        fresh = []
        for vmim in vmims:
            meta = vmim["metadata"]
            try:
                fresh.append(self.cluster.get_custom(KUBEVIRT[0], KUBEVIRT[1], VMIMS, meta["name"],
                                                     namespace=meta["namespace"]))
            except NotFoundError:
                continue
            if (fresh[-1].get("metadata") or {}).get("deletionTimestamp") and never_admitted(fresh[-1]):
                fresh.pop()   # cancelled, only a finalizer left
        return fresh

    def _delete_vmim(self, namespace, name):
        try:
            self.cluster.delete("/apis/%s/%s/namespaces/%s/%s/%s" % (KUBEVIRT[0], KUBEVIRT[1], namespace, VMIMS, name),
                                "delete (cancel) migration %s/%s" % (namespace, name))
        except NotFoundError:
            pass

    # -- one batch -------------------------------------------------------

    def _on_node(self, batch):
        """Keep the VMs of the batch that still run on the node (a resumed migration may have moved one)."""
        keep = []
        for namespace in batch.namespaces:
            vmis = dict((v["metadata"]["name"], v) for v in
                        self.cluster.list_custom(KUBEVIRT[0], KUBEVIRT[1], "virtualmachineinstances",
                                                 namespace=namespace))
            for ns, name in batch.keys:
                if ns != namespace:
                    continue
                vmi = vmis.get(name)
                if vmi is not None and (vmi.get("status") or {}).get("nodeName") == self.node:
                    keep.append((ns, name))
                else:
                    batch.skipped.append((ns, name))
        batch.vms = [k for k in batch.keys if k in keep]

    def _start(self, batch):
        batch.started = self.clock()
        batch.order = len([b for b in self.batches if b.started is not None]) - 1
        self._on_node(batch)
        if batch.skipped:
            gone = ", ".join("%s/%s" % k for k in batch.skipped)
            self.say("%s: %s no longer on %s, left out" % (batch.label(), gone, self.node))
        if not batch.vms:
            batch.state, batch.final_at, batch.released_at = RELEASED, self.clock(), self.clock()
            return
        vms = [{"namespace": ns, "name": name} for ns, name in batch.vms]
        needs, refs, report = headroom_mod.batch_headroom(
            self.cluster, vms, dict(self.sizing, operator_namespace=self.operator_namespace))
        memory = []
        for ns, name in batch.vms:
            for vm in ((report.get("namespaces") or {}).get(ns) or {}).get("vms") or []:
                if vm.get("name") == name:
                    memory.append(parse_quantity((vm.get("charge") or {}).get("requests.memory") or "0"))
        batch.timeout = batch_timeout(memory, self.per_gib_now, self.progress_now, self.scheduling)
        # a live migration already under way for a VM is followed, not doubled
        existing = {}
        for namespace in batch.namespaces:
            for vmim in self._vmims(namespace):
                vmi = (vmim.get("spec") or {}).get("vmiName")
                if migration_phase(vmim) not in FINAL_MIGRATION_PHASES and (namespace, vmi) in batch.vms:
                    existing.setdefault((namespace, vmi), (vmim["metadata"]["name"], uid_of(vmim)))
        for ns, name in batch.vms:
            reused = (ns, name) in existing
            batch.migrations.append({"namespace": ns, "vm": name, "reused": reused,
                                     "name": existing[(ns, name)][0] if reused else "%s-kvq-%s" % (name, self.token),
                                     "uid": existing[(ns, name)][1] if reused else None})
        # the migrations this run follows but did not create are recorded now; those it creates, with their UID,
        # once created (see _record_created)
        refs = dict(refs, migrations=[{"namespace": m["namespace"], "name": m["name"], "uid": m["uid"]}
                                      for m in batch.migrations if m["reused"]])
        if not self.check_mode:
            # from here on a stop releases what this batch may hold (a reserve that failed half way included)
            batch.state, batch.targets = RUNNING, sorted(needs)
        # in check mode resume() released nothing: a leftover with this batch's id would be gone by now
        leftover = self.check_mode and batch.reservation in self.resumed["reservations"]
        result = reservations.reserve(self.cluster, batch.reservation, needs, self.owner,
                                      "%s (batch %d/%d)" % (self.reason, batch.index + 1, batch.count), self.ttl,
                                      margin=self.margin, check_mode=self.check_mode, refs=refs, replace=leftover,
                                      lock=None if self.check_mode else self.lock,
                                      clock=self.clock, sleep=self.sleep, operator_namespace=self.operator_namespace,
                                      enforce_timeout=0)
        self._warn(result.get("warnings"))
        self._record_reservation(batch, result)
        if self.check_mode:
            batch.state, batch.final_at, batch.released_at = RELEASED, self.clock(), self.clock()
            return
        self._wait_enforced(batch, self._note_written(batch, result), "reservation %s" % batch.reservation)
        for migration in batch.migrations:
            if migration["reused"]:
                self.reused.append("%s/%s" % (migration["namespace"], migration["name"]))
                continue
            self._create(batch, migration)
        batch.launched = self.clock()
        self._record_created(batch, needs, refs)

    def _record_created(self, batch, needs, refs):
        """Record the UIDs of the migrations just created in the reservation's refs (the same headroom again:
        only the refs change), so that a re-run knows them for its own by UID."""
        created = [{"namespace": m["namespace"], "name": m["name"], "uid": m["uid"]}
                   for m in batch.migrations if m["uid"] and not m["reused"]]
        if not created or not batch.targets:
            return
        result = reservations.reserve(self.cluster, batch.reservation, needs, self.owner,
                                      "%s (batch %d/%d)" % (self.reason, batch.index + 1, batch.count), self.ttl,
                                      margin=self.margin, refs=dict(refs, migrations=refs["migrations"] + created),
                                      lock=self.lock, clock=self.clock, sleep=self.sleep,
                                      operator_namespace=self.operator_namespace, enforce_timeout=0)
        self._warn(result.get("warnings"))

    def _note_written(self, batch, result):
        """Record what a reserve or top-up result wrote to spec.hard in batch.written; returns that part."""
        written = enforcement.written_hard(result)
        for target, values in written.items():
            batch.written.setdefault(target, {}).update(values)
        return written

    def _wait_enforced(self, batch, written, what):
        """Wait until quota admission enforces what was written ({(ns, quota): {name: Fraction}}; see
        enforcement.wait_enforced): a migration started before kube-controller-manager copied spec.hard to
        status.hard is refused at the old limit. (reservations.reserve would wait too; the executor passes it
        enforce_timeout=0 and waits here, between liveness checks, with the batch's progress line.)
        WaitTimeoutError naming the quotas, spec.hard against status.hard, past enforcement.enforce_timeout."""
        if not any(written.values()):
            return

        def remember(target, quota):
            # what can be enforced now is what a later refusal's limit is compared with (lagging_refusals)
            batch.written.setdefault(target, {}).update(enforcement.required_hard(quota, written[target]))

        gaps, waited = enforcement.wait_enforced(
            self.cluster.get_quota, written,
            enforcement.enforce_timeout(getattr(self.cluster, "outage_budget", DEFAULT_OUTAGE_BUDGET)),
            self.clock, self.sleep, poll=min(self.poll, enforcement.ENFORCE_POLL_SECONDS), on_read=remember,
            alive=self._check_alive)
        batch.enforce_seconds += waited
        if not gaps:
            if waited >= 1.0:
                self.say("%s: quota admission enforces %s after %.1fs (status.hard caught up with spec.hard)"
                         % (batch.label(), what, waited))
            return
        raise WaitTimeoutError(
            "%s: quota admission does not enforce %s %ds after it was written: %s (admission checks "
            "status.hard, which kube-controller-manager's quota controller copies from spec.hard)"
            % (batch.label(), what, int(waited),
               "; ".join(enforcement.gaps_text(t, g) for t, g in sorted(gaps.items()))),
            "check that kube-controller-manager runs and syncs ResourceQuotas (its resourcequota controller; "
            "`kubectl get resourcequota -n NAMESPACE -o yaml` shows status.hard equal to spec.hard once it "
            "does), then re-run: the re-run releases %s and continues; raise api_outage_budget if the "
            "controller needs longer after an API server restart" % batch.reservation)

    def _record_reservation(self, batch, result):
        for item in result.get("quotas") or []:
            target = (item["namespace"], item["quota"])
            if target not in batch.targets:
                batch.targets.append(target)
            delta = parse_resource_list(item.get("delta") or {}, "delta")
            batch.deltas[target] = remove_zeros(delta)
        batch.held = sorted(set(t[0] for t, d in batch.deltas.items() if d))
        self._note_peak()

    def _note_peak(self):
        active = [(t[0], d) for b in self.batches if b.state in (RUNNING, FINAL) or (b.state == PENDING and b.deltas)
                  for t, d in b.deltas.items()]
        for namespace, extra in namespace_extra(active).items():
            peak = self.peak.get(namespace, {})
            for name, value in extra.items():
                if value > peak.get(name, 0):
                    peak[name] = value
            self.peak[namespace] = peak

    def _create(self, batch, migration):
        ns, name = migration["namespace"], migration["name"]
        body = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"name": name, "namespace": ns, "labels": {
                    "kubevirt.io/vmi-name": migration["vm"],
                    "app.kubernetes.io/managed-by": MANAGED_BY,
                    "kvquota.io/node": self.node,
                    "kvquota.io/reservation": batch.reservation}},
                "spec": {"vmiName": migration["vm"]}}
        try:
            made = self.cluster.create("/apis/%s/%s/namespaces/%s/%s" % (KUBEVIRT[0], KUBEVIRT[1], ns, VMIMS), body,
                                       "create migration %s/%s of VM %s" % (ns, name, migration["vm"]))
        except ConflictError:
            # an earlier attempt of this very request may have created it, or anyone else may have taken the name:
            # either way it is not known to be ours; followed (it migrates this VM) but never recorded as created
            made = self.cluster.get_custom(KUBEVIRT[0], KUBEVIRT[1], VMIMS, name, namespace=ns)
            if (made.get("spec") or {}).get("vmiName") != migration["vm"]:
                raise KvquotaError("migration %s/%s exists and migrates VM %s, not %s"
                                   % (ns, name, (made.get("spec") or {}).get("vmiName"), migration["vm"]),
                                   "delete it (kubectl delete vmim -n %s %s) and re-run" % (ns, name))
            migration["reused"], migration["uid"] = True, uid_of(made)
            self.reused.append("%s/%s" % (ns, name))
            return
        migration["uid"] = uid_of(made if isinstance(made, dict) else {})
        self.created.append("%s/%s" % (ns, name))

    def _follow(self, batch):
        """One look at the batch's migrations: marks it final, tops its reservation up, or raises."""
        now = self.clock()
        mine = dict(((m["namespace"], m["name"]), m) for m in batch.migrations)
        seen = {}
        for namespace in batch.namespaces:
            for vmim in self._vmims(namespace):
                key = (namespace, vmim["metadata"]["name"])
                if key in mine:
                    seen[key] = vmim
        batch.phases = dict(("%s/%s" % k, migration_phase(v) or "Pending") for k, v in seen.items())
        missing = [k for k in mine if k not in seen]
        if missing:
            raise KvquotaError("%s: migration(s) %s disappeared (deleted by someone else?)"
                               % (batch.label(), ", ".join("%s/%s" % k for k in missing)),
                               "find out who cancelled them")
        failed = [v for v in seen.values() if migration_phase(v) == "Failed"]
        batch.failed = ["%s/%s" % (v["metadata"]["namespace"], v["metadata"]["name"]) for v in failed]
        if failed:
            reasons = ["%s/%s of VM %s (%s)" % (
                v["metadata"]["namespace"], v["metadata"]["name"], v["spec"].get("vmiName"),
                ((v.get("status") or {}).get("migrationState") or {}).get("failureReason") or "no reason given")
                for v in failed]
            raise KvquotaError("%s: migration(s) failed: %s" % (batch.label(), "; ".join(reasons)),
                               "see the migration's events (kubectl describe vmim)")
        if all(migration_phase(v) in FINAL_MIGRATION_PHASES for v in seen.values()):
            batch.state, batch.final_at, batch.moved = FINAL, now, True
            return
        if now - batch.started > batch.timeout:
            raise WaitTimeoutError(
                "%s: migrations not finished after %ss (completionTimeoutPerGiB %s x GiB + progressTimeout %s + "
                "scheduling %s): %s" % (batch.label(), batch.timeout, self.per_gib_now, self.progress_now,
                                        self.scheduling, ", ".join("%s %s" % kv for kv in sorted(batch.phases.items()))),
                "find out why they do not progress (kubectl describe vmim), or raise the timeouts")
        refused = [v for v in seen.values() if migration_phase(v) not in FINAL_MIGRATION_PHASES
                   and admission.rejected_condition(v) is not None]
        if not refused:
            batch.refused_since = None
            return
        if batch.refused_since is None:
            batch.refused_since = now
        if now - batch.refused_since < self.settle:
            return
        self._top_up(batch, refused)

    def _top_up(self, batch, refused):
        """Add to the batch's reservation what the refused target pods lack, from trusted state only (see
        headroom.refused_target_pods and top_up_amounts): the quotas' status, the computed charge, KubeVirt's
        condition; Events at most name the quota."""
        keys = [{"namespace": v["metadata"]["namespace"], "name": v["metadata"]["name"]} for v in refused]
        found = headroom_mod.refused_target_pods(self.cluster, keys,
                                                 dict(self.sizing, operator_namespace=self.operator_namespace))
        batch.refused_since = None   # wait a settle time again before looking at the refusal anew
        names = ", ".join("%s/%s" % (k["namespace"], k["name"]) for k in keys)
        # without a verified Event a later refusal looks like this one: each settle time then counts as new
        key = found["key"] if found["evidence"] else "%s#round%d" % (found["key"], batch.rounds + 1)
        # with a verified Event a refusal already read as lag is the same refusal: KubeVirt has not retried yet
        seen = batch.top_up_keys + (batch.lag_keys if found["evidence"] else [])
        if not found["refused"] or key in seen:
            self.say("%s: admission refused %s, and nothing shows a refusal since the last top-up (a stale "
                     "condition): nothing to add, waiting for KubeVirt to retry" % (batch.label(), names))
            return
        # a refusal at a limit below what this batch wrote was checked against a status.hard the quota controller
        # had not updated: it says nothing about the pods' size. Read so once per key: without a verified Event a
        # later refusal cannot be told from this one, and status.hard is known to be current after the wait.
        lagging = {} if key in batch.lag_keys else enforcement.lagging_refusals(found.get("limited"), batch.written)
        if lagging:
            batch.lag_keys.append(key)
            self.say("%s: admission refused %s at %s: kube-controller-manager had not copied the reservation to "
                     "status.hard (what admission checks), so no top-up; waiting until status.hard shows it, then "
                     "for KubeVirt to retry" % (batch.label(), names, enforcement.lagging_text(lagging)))
            self._wait_enforced(batch, dict((t, batch.written[t]) for t in lagging),
                                "reservation %s" % batch.reservation)
            return
        amounts, problems, how = headroom_mod.top_up_amounts(found["exact"], found["charge"], self.cap,
                                                             found["pointed"], batch.added)
        if problems or batch.rounds >= self.max_rounds:
            self._raise_if_captured(batch, "quota admission refuses %s" % names)
        if problems:
            raise InputError("%s: quota admission refuses %s and the shortfall exceeds top_up_cap: %s"
                             % (batch.label(), names, "; ".join(problems)),
                             "raise top_up_cap (node_maintenance_top_up_cap) if that much is expected, or find out "
                             "why the target pods are larger than planned (overhead ratio, sidecars, a mutating "
                             "webhook)")
        shown = headroom_text(amounts)
        if batch.rounds >= self.max_rounds:
            missing = (shown if how == "exact" else
                       "an amount the sizing does not show: the target pods are larger than computed, and only the "
                       "apiserver's refusal says by how much, which reaches this run only through Events tenants "
                       "can write; each top-up added top_up_cap's share (top_up_cap %s), now %s" % (cap_text(self.cap), shown))
            raise KvquotaError("%s: quota admission still refuses %s after %d top-up(s) of reservation %s; still "
                               "missing: %s" % (batch.label(), names, batch.rounds, batch.reservation, missing),
                               "raise top_up_max_rounds or top_up_cap, or find out why the target pods are larger "
                               "than planned (overhead ratio, sidecars, a mutating webhook)")
        result = reservations.reserve(self.cluster, batch.reservation,
                                      dict((t, format_resource_list(rl)) for t, rl in amounts.items()), self.owner,
                                      "top-up: admission refused migration target pods off node %s" % self.node,
                                      self.ttl, top_up=key, lock=self.lock, clock=self.clock, sleep=self.sleep,
                                      operator_namespace=self.operator_namespace, enforce_timeout=0)
        self._warn(result.get("warnings"))
        written = self._note_written(batch, result)
        batch.rounds += 1
        batch.top_up_keys.append(key)
        for target, amount in amounts.items():
            batch.added[target] = add(batch.added.get(target, {}), amount)
        self._record_reservation(batch, result)
        batch.top_ups.append({"round": batch.rounds, "refused": names.split(", "), "how": how,
                              "added": dict(("%s/%s" % t, format_resource_list(rl)) for t, rl in amounts.items())})
        self.say("%s: admission refused %d target pod(s); reservation %s topped up by %s (%s)"
                 % (batch.label(), len(keys), batch.reservation, shown,
                    "what the quota lacks for pods of the computed size" if how == "exact"
                    else "the pods are larger than computed: top_up_cap's share of their computed charge"))
        self._wait_enforced(batch, written, "the top-up of reservation %s" % batch.reservation)

    def _try_release(self, batch, timeout=0.0):
        """Release the batch's reservation if its source pods are gone (one check, or wait up to timeout)."""
        try:
            outcome = reservations.release(self.cluster, batch.reservation, wait_for_pods=timeout > 0,
                                           timeout=timeout, quotas=[list(t) for t in batch.targets],
                                           poll_interval=self.poll, clock=self.clock, sleep=self.sleep,
                                           lock=self.lock, operator_namespace=self.operator_namespace)
        except WaitTimeoutError as err:
            waited = err.details.get("result") or {}
            batch.release_waits = ["%s/%s: %s" % (p["namespace"], p["quota"], "; ".join(p["reasons"]))
                                   for p in waited.get("pending") or ()]
            batch.captured = _captured_pods(waited)
            return False
        self._warn(outcome.get("warnings"))
        batch.state, batch.released_at = RELEASED, self.clock()
        self._note_peak()
        return True

    def _progress_line(self, batch):
        done = [b for b in self.batches if b.state in (FINAL, RELEASED) and b.final_at is not None]
        elapsed = self.clock() - self.started
        left = len([b for b in self.batches if b.state in (PENDING, RUNNING)])
        remaining = int(round(elapsed / len(done) * left)) if done else 0
        headroom = headroom_text(batch.deltas)
        tops = " (topped up %d time(s))" % len(batch.top_ups) if batch.top_ups else ""
        vms = ", ".join("%s/%s" % k for k in batch.vms)
        namespaces = ", ".join(sorted(set(ns for ns, _n in batch.vms)))
        return ("%s done: %d VM(s) %s | namespaces %s | headroom %s%s | batch %.1fs, elapsed %ds, remaining ~%ds "
                "(%d batch(es) left)" % (batch.label(), len(batch.vms), vms, namespaces, headroom, tops,
                                         batch.final_at - batch.started, int(elapsed), remaining, left))

    # -- the loop --------------------------------------------------------

    def run(self, resume=True):
        self.started = self.clock()
        if self.cluster.exists("/api/v1/nodes/%s" % self.node, "read node %s" % self.node) is None:
            raise NotFoundError("node '%s' not found" % self.node,
                                "check the name with `kubectl get nodes`; nothing was changed")
        if resume:
            self.resume()
        self.per_gib_now, self.progress_now = self._timeouts() if self.batches else (self.per_gib, self.progress)
        try:
            if self.check_mode:
                for batch in self.batches:
                    self._start(batch)
                return self.result("planned")
            self._loop()
        except Interrupted:
            raise
        except KvquotaError as err:
            self._stop(err)
        return self.result("succeeded")

    def _loop(self):
        last_full = None
        while True:
            now = self.clock()
            full = last_full is None or now - last_full >= self.poll * 0.95
            for batch in self.batches:
                if batch.state == RUNNING:
                    self._follow(batch)
                    if batch.state == FINAL:
                        self.say(self._progress_line(batch))
            if full:
                last_full = now
                for batch in self.batches:
                    if batch.state == FINAL:
                        self._try_release(batch)
            batch = next_batch(self.batches, self.overlap)
            if batch is not None:
                self._start(batch)
                continue
            if all(b.state == RELEASED for b in self.batches):
                return
            waiting = [b for b in self.batches if b.state == FINAL]
            if waiting and not [b for b in self.batches if b.state == RUNNING]:
                # nothing in flight: only releases are awaited (by the next batch, or at the end)
                oldest = min(b.final_at for b in waiting)
                if self.clock() - oldest > self.release_timeout:
                    self._raise_release_timeout(waiting)
            self._check_alive()
            self.sleep(self._nap())

    def _raise_if_captured(self, batch, what):
        """Without the headroom fence a tenant's pod may take the room reserved for the migrations: name it
        (release's check, in check mode: owner, creation time) rather than blame the sizing or top_up_cap."""
        outcome = reservations.release(self.cluster, batch.reservation, wait_for_pods=False, check_mode=True,
                                       quotas=[list(t) for t in batch.targets], clock=self.clock, sleep=self.sleep,
                                       lock=self.lock, operator_namespace=self.operator_namespace)
        captured = _captured_pods(outcome)
        if captured:
            raise KvquotaError("%s: %s because pods started during reservation %s took its headroom: %s"
                               % (batch.label(), what, batch.reservation, ", ".join(captured)), _CAPTURED_FIX)

    def _raise_release_timeout(self, waiting):
        reservations_text = ", ".join(b.reservation for b in waiting)
        captured = [pod for b in waiting for pod in b.captured]
        if captured:
            raise WaitTimeoutError("reservation(s) %s not released %ss after their migrations ended: pods started "
                                   "during the reservation hold its headroom: %s"
                                   % (reservations_text, int(self.release_timeout), ", ".join(captured)),
                                   _CAPTURED_FIX)
        reasons = "; ".join(r for b in waiting for r in b.release_waits) or "source pods still count"
        raise WaitTimeoutError("reservation(s) %s not released %ss after their migrations ended: %s"
                               % (reservations_text, int(self.release_timeout), reasons),
                               "wait for those pods to finish (or delete them)")

    def _nap(self):
        """poll_interval, but a fifth of it around the time the batch in flight should end (the shortest batch so
        far): the next batch starts within a fraction of a poll, without polling fast all the time."""
        took = [b.final_at - b.launched for b in self.batches if b.final_at is not None and b.launched is not None
                and b.state in (FINAL, RELEASED)]
        flying = [b for b in self.batches if b.state == RUNNING and b.launched is not None]
        if not took or not flying:
            return self.poll
        expected = flying[0].launched + min(took)
        now = self.clock()
        if expected - self.poll <= now <= expected + 3 * self.poll:
            return max(0.05, self.poll / 5.0)
        return self.poll

    def _stop(self, err):
        """Leave a consistent state and raise err's type with the numbers and how to resume. What could not be
        read is reported as unknown, never as done or not done."""
        with one_attempt_after_outage(self.cluster, err):
            unread = self._clean_up()
        result = self.result("failed")
        migrated = [b for b in self.batches if b.moved]
        held = result["reservations_held"]
        why_held = " (a re-run releases them once they can be, the reaper after the TTL)" if held else ""
        unknown = ("; migrations of %s could not be read (state unknown: they may have moved more VMs)"
                   % ", ".join(b.label() for b in unread)) if unread else ""
        message = ("%s. The run stopped with %d of %d batch(es) migrated%s; migrations cancelled: %s; reservations "
                   "released: %s; still held: %s%s"
                   % (err.message, len(migrated), len(self.batches), unknown, ", ".join(self.cancelled) or "none",
                      ", ".join(result["reservations_released"]) or "none", ", ".join(held) or "none", why_held))
        fix = ("%s; then re-run the playbook: it releases the reservations still held once their migrations are over, "
               "cancels migrations never admitted, and continues with the VMs still on %s"
               % (err.fix or "fix the cause", self.node))
        raise type(err)(message, fix, {"result": result})

    def _clean_up(self):
        """Cancel this run's migrations never admitted, mark the batches whose migrations are over and release
        what can be. Returns the running batches whose migrations could not be read."""
        unread = []
        for batch in self.batches:
            if batch.state != RUNNING:
                continue
            mine = dict(((m["namespace"], m["name"]), m["uid"]) for m in batch.migrations if not m["reused"])
            for namespace in batch.namespaces:
                try:
                    vmims = self._vmims(namespace)
                except KvquotaError:
                    continue
                for vmim in vmims:
                    key = (namespace, vmim["metadata"]["name"])
                    if key in mine and mine[key] == uid_of(vmim) and never_admitted(vmim):
                        try:
                            self._delete_vmim(*key)
                            self.cancelled.append("%s/%s" % key)
                        except KvquotaError:
                            continue
            try:
                vmims = self._refresh([{"metadata": {"namespace": m["namespace"], "name": m["name"]}}
                                       for m in batch.migrations])
            except KvquotaError:
                unread.append(batch)
                continue
            if all(migration_phase(v) in FINAL_MIGRATION_PHASES for v in vmims):
                batch.state = FINAL
                batch.failed = sorted(set(batch.failed) | set(
                    "%s/%s" % (v["metadata"]["namespace"], v["metadata"]["name"]) for v in vmims
                    if migration_phase(v) == "Failed"))
                batch.moved = any(migration_phase(v) == "Succeeded" for v in vmims)
        for batch in self.batches:
            if batch.state == FINAL:
                try:
                    self._try_release(batch, self.stop_release_timeout)
                except KvquotaError:
                    continue
        return unread

    def result(self, outcome):
        made = [b.reservation for b in self.batches if b.started is not None and b.targets]
        released = [b.reservation for b in self.batches if b.state == RELEASED and b.targets and not self.check_mode]
        held = [b.reservation for b in self.batches if b.state in (RUNNING, FINAL) and b.targets]
        changed = bool(self.created or self.resumed["released"] or self.resumed["cancelled"] or self.cancelled
                       or made) and not self.check_mode
        started = self.started if self.started is not None else self.clock()
        return {
            "changed": changed or (self.check_mode and bool(made or self.resumed["reservations"])),
            "outcome": outcome,
            "node": self.node,
            "overlap": self.overlap,
            "batches": [b.report(started) for b in self.batches],
            "migrations_created": list(self.created),
            "migrations_reused": list(self.reused),
            "migrations_cancelled": list(self.cancelled),
            "reservations_made": made,
            "reservations_released": released,
            "reservations_held": held,
            "resumed": dict(self.resumed),
            "peak_extra": dict((ns, format_resource_list(rl)) for ns, rl in sorted(self.peak.items())),
            "timeouts": {"completion_timeout_per_gib": getattr(self, "per_gib_now", None),
                         "progress_timeout": getattr(self, "progress_now", None),
                         "scheduling_timeout": self.scheduling},
            "seconds": round(self.clock() - started, 2),
            "progress": list(self.log),
            "warnings": list(self.warnings),
            "check_mode": self.check_mode,
        }


def _natural(text):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def migrate(cluster, node, batches, **options):
    """Run the batches of node (resume first); see Executor for the options. Returns the result dict, or raises
    a KvquotaError whose details["result"] is the partial result."""
    return Executor(cluster, node, batches, **options).run()


__all__ = ["migrate", "Executor", "next_batch", "batch_timeout", "our_migration_uids", "ours", "over_cap",
           "batch_vm_keys", "never_admitted", "timeouts_from_kubevirt"]
