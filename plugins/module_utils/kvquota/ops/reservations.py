# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The reservations service (Reservations): reserve, release, release_expired, settle_interrupted and reconcile,
taking requests as records (ReserveRequest, ReleaseRequest); and the reads beside it (list_reservations, find_ledgers).

The ledger of a quota lives in the operator namespace (store.py), never on an object a tenant can write.
A change is written as: the ledger with the intended value (ledger.intend), then the quota (or Rancher's
namespace annotation), then the ledger confirmed (or deleted once idle); every write is conditional and
recomputed from the ledger read afresh after a 409. Every write happens holding the Lease of the tenant
namespace (in the operator namespace), so two jobs never change one namespace's ledgers at once, and each
change is made against the current ledger, never a remembered one. An interruption anywhere, followed by a
re-run, converges to the same state.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import contextlib
import dataclasses
import time
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base import timeutil
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import enforcement
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import release_readiness as readiness
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import fence as fence_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import ledger as ledger_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import lease as lease_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import store as store_mod
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners import registry
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.protocol import hard_of, used_of
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.owners.rancher import is_rancher_managed, project_fit, project_ref
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import (
    DEFAULT_OUTAGE_BUDGET,
    retry_on_conflict,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
    KvquotaError,
    NotFoundError,
    WaitTimeoutError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state.ledger import (
    confirmed,
    desired,
    desired_strings,
    dump,
    intend,
    is_idle,
    needs_write,
    new_ledger,
    observe,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import ceil_to
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import (
    add,
    less_or_equal,
    mask,
    parse_resource_list,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.ownership import KUBEVIRT

DEFAULT_ATTEMPTS = 10
DEFAULT_LOCK_TIMEOUT = 120
DEFAULT_RANCHER_SYNC_TIMEOUT = 60


# ---------------------------------------------------------------------------
# inputs

def parse_targets(headroom_by_quota):
    """{(namespace, quota): ResourceList} from keys given as (ns, name) pairs or 'ns/name' strings."""
    if not isinstance(headroom_by_quota, dict):
        raise InputError("headroom must be a mapping of (namespace, quota) to a resource list",
                         "give e.g. {('tenant-a', 'compute'): {'limits.memory': '6000Mi'}}")
    result = {}
    for key, value in headroom_by_quota.items():
        if isinstance(key, (tuple, list)) and len(key) == 2:
            target = (str(key[0]), str(key[1]))
        elif isinstance(key, str) and key.count("/") == 1 and all(key.split("/")):
            target = tuple(key.split("/"))
        else:
            raise InputError("malformed quota key %r" % (key,), "use (namespace, quota) or 'namespace/quota'")
        if target in result:
            raise InputError("quota %s/%s is given twice" % target, "merge the two headroom entries")
        result[target] = parse_resource_list(value, "headroom of %s/%s" % target)
    return result


def apply_margin(headroom, margin):
    """headroom plus a safety margin: None/0 for none, a percentage ('10%') or fraction ('0.1') of each amount
    (rounded up to 1m for CPU names and to whole units otherwise), or a resource list added to the names the
    headroom already has."""
    if margin in (None, "", 0, "0", "0%"):
        return dict(headroom)
    if isinstance(margin, dict):
        extra = parse_resource_list(margin, "margin")
        return add(headroom, mask(extra, list(headroom)))
    text = str(margin).strip()
    try:
        factor = Fraction(text[:-1].strip()) / 100 if text.endswith("%") else Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise InputError("malformed margin %r" % (margin,), "give a percentage such as '10%', a fraction such as "
                         "0.1, or a resource list such as {limits.memory: 512Mi}")
    if factor < 0:
        raise InputError("margin %r is negative" % (margin,), "give a margin of 0 or more")
    result = {}
    for name, value in headroom.items():
        step = Fraction(1, 1000) if name == "cpu" or name.endswith(".cpu") else Fraction(1)
        result[name] = value + ceil_to(value * factor, step)
    return result


def _check_id(reservation_id):
    if not isinstance(reservation_id, str) or not reservation_id.strip():
        raise InputError("reservation_id must be a non-empty string, got %r" % (reservation_id,),
                         "give an id such as the node name or the AWX job id")
    if len(reservation_id) > 253:
        raise InputError("reservation_id is longer than 253 characters", "use a shorter id")


# ---------------------------------------------------------------------------
# reading one quota

class _Run(object):
    """One call of the reservations service: its settings (the cluster, its facts, the ledger store, lock settings,
    clock), its writer (a dry run in check mode), and what the call caches and warns about."""

    def __init__(self, service):
        cluster = service.cluster
        self.cluster = cluster
        self.store = store_mod.Store(cluster, service.operator_namespace)
        self.facts = service.facts if service.facts is not None else cluster.facts()
        self.clock = service.clock
        self.sleep = service.sleep
        self.writer = _DryRun(self) if service.check_mode else _Writer(self)
        self.sync_timeout = service.rancher_sync_timeout   # how long an owner's wait_applied waits (Rancher's agent)
        self.lock = dict(service.lock or {})
        self.fence_state = None   # None: not looked up yet; False: not installed (or not visible); True
        self.projects = {}
        self.namespaces = None
        self.warnings = []

    @property
    def check_mode(self):
        return self.writer.dry

    def locked(self, namespaces):
        """with run.locked([ns, ...]): hold the Lease of every tenant namespace (in the operator namespace), taken
        in sorted order; a dry run takes none."""
        return self.writer.hold(namespaces)

    def holder(self):
        return self.lock.get("holder") or lease_mod.default_holder()

    def lock_seconds(self):
        return self.lock.get("duration") or lock_duration(self.sync_timeout)

    def renew_lock(self, namespace):
        """Push the held Lease of a tenant namespace forward before a write that comes after a long wait (the
        lease lasts one write plus one Rancher wait); LeaseHeldError if another job took it over meanwhile, so
        nothing is written without the lock."""
        self.writer.renew(namespace)

    def warn(self, text):
        if text not in self.warnings:
            self.warnings.append(text)

    # --- what a quota owner's I/O steps use (owners/protocol.py), with sync_timeout and the clock above ---

    attempts = DEFAULT_ATTEMPTS

    def stored_ledger(self, quota):
        stored, _configmap = self.store.read(quota)
        return stored

    def report(self, state, reason, message):
        """Warn once, with an Event on the quota and its namespace."""
        if message not in self.warnings:
            self.warn(message)
            _emit(self, state, reason, "kvquota: " + message, "Warning")

    def adopt(self, target):
        """Adopt someone else's rewrite of the durable value found while waiting for its owner (a Rancher project
        member's annotation): with the lock renewed, from a fresh read of the stored ledger, observe takes the
        rewritten values (a value equal to the base is a revert, re-applied; any other one becomes the base, the
        deltas stay on top) and _transact writes it again. Warns and records Events like any external change."""
        def mutate(state, now):
            if state.stored is None:
                return None, {"outcome": "no-ledger"}
            return state.ledger, {"outcome": "adopted" if state.changes else "in-sync"}

        self.renew_lock(target[0])
        state, _final, _info, _changed = _transact(self, target, mutate)
        _report_changes(self, state)

    def fence_installed(self):
        """Whether the headroom fence is installed (looked up once per call). Without the fence, a pod a tenant
        starts during the window can take the headroom: say so once."""
        if self.fence_state is None:
            try:
                policy = fence_mod.installed_policy(self.cluster, self.store.namespace)
                self.fence_state = policy is not None
                lacking = fence_mod.outdated(policy) if policy is not None else None
                if lacking:
                    self.warn(lacking)
            except ForbiddenError:
                self.fence_state = False
                self.warn("the headroom fence could not be checked (bind the ClusterRole kvquota-maintenance-fence "
                          "the install playbook binds): namespaces are not fenced while they hold a reservation")
        return self.fence_state

    def controller(self):
        """KubeVirt's controller identity, from the namespace of the KubeVirt CR (fence.DEFAULT_CONTROLLER when
        it cannot be read)."""
        try:
            found = self.cluster.list_custom(*KUBEVIRT, "kubevirts")
        except (NotFoundError, ForbiddenError):
            found = []
        namespace = ((found[0].get("metadata") or {}).get("namespace")) if found else None
        return fence_mod.controller_identity(namespace) if namespace else fence_mod.DEFAULT_CONTROLLER

    def project_for(self, namespace):
        ref = project_ref(namespace)
        if not ref or not self.facts.get("rancher_projects"):
            return None
        if ref not in self.projects:
            try:
                self.projects[ref] = self.cluster.get_custom("management.cattle.io", "v3", "projects", ref[1],
                                                             namespace=ref[0])
            except (NotFoundError, ForbiddenError) as err:
                self.warn("Rancher project %s:%s not readable (%s): project limit not checked" % (ref[0], ref[1], err))
                self.projects[ref] = None
        return self.projects[ref]

    def all_namespaces(self):
        if self.namespaces is None:
            self.namespaces = self.cluster.list_namespaces()
        return self.namespaces


@contextlib.contextmanager
def _nothing_held():
    yield []


class _Writer(object):
    """Every write a run makes, and every wait for one to take effect: the Leases, a quota's change (the ledger,
    the owner's objects, the ledger confirmed), Events, the clean-ups. A dry run (_DryRun) makes none of them and
    answers as if it had, so the decisions around them are the same in check mode."""

    dry = False

    def __init__(self, run):
        self.run = run

    def hold(self, namespaces):
        run = self.run
        scopes = [(run.store.namespace, lease_mod.namespace_lock_name(ns)) for ns in set(namespaces)]
        return lease_mod.held_many(run.cluster, scopes, run.holder(), run.lock_seconds(),
                                   run.lock.get("wait_timeout", DEFAULT_LOCK_TIMEOUT), clock=run.clock,
                                   sleep=run.sleep, on_wait=_lease_wait_noter(run))

    def renew(self, namespace):
        run = self.run
        lease = {"metadata": {"namespace": run.store.namespace, "name": lease_mod.namespace_lock_name(namespace)}}
        lease_mod.renew(run.cluster, lease, run.holder(), run.lock_seconds(), clock=run.clock)

    def change(self, state, final, quota_write):
        """Save final and write the values it implies, in the order that survives an interruption: the ledger with
        the intended value, the quota (through its owner), then the ledger confirmed - or deleted once idle. Every
        write is conditional; a 409 raises ConflictError and _transact starts again from a fresh read."""
        run, backend = self.run, state.backend
        configmap = state.configmap
        if quota_write:
            if not (is_idle(final) and configmap is None):
                configmap = run.store.save(state.quota, final, configmap)
            writes = backend.render(state.quota, state.namespace, final)
            try:
                if not is_idle(final):
                    # before the owner's value: Harvester must not add its own deltas on top of ours, and a refusal
                    # (Rancher 2.14+'s lock-down of Rancher quotas) then leaves nothing changed
                    self.guard(state, final)
                for kind in backend.WRITE_ORDER:
                    if kind in writes:
                        what = ("update resourcequota %s in namespace %s" % (state.target[1], state.target[0])
                                if kind == "quota" else "update namespace %s (annotations)" % state.target[0])
                        run.cluster.replace(writes[kind], what)
            except ConflictError:
                raise   # _transact re-reads: the ledger's intent is resolved against the quota as it is then
            except KvquotaError:
                _take_back(run, state, configmap)   # refused (RBAC, a webhook): leave no intent behind
                raise
        if is_idle(final):
            if configmap is not None:
                if backend.guards_the_quota:
                    # the opt-out comes off only once the owner has put the base back, and the ledger that
                    # remembers its previous value goes only after that: Harvester never scales a quota that still
                    # holds a reservation, and an interrupted run finds the idle ledger and finishes both
                    self.applied(state, final)
                    self.unguard(state, final)
                self.delete_ledger(configmap)
        elif quota_write:
            _settle(run.store.save, state.quota, confirmed(final), configmap)
        else:
            run.store.save(state.quota, confirmed(final), configmap)

    def guard(self, state, final):
        """What the quota's owner must have in place before its value for final is written (Harvester's opt-out)."""
        state.backend.guard(self.run, state.target, final)

    def applied(self, state, final):
        """Wait until the quota's owner applied what was written (Rancher's agent: owners' wait_applied)."""
        state.backend.wait_applied(self.run, state, final)

    def unguard(self, state, idle_ledger):
        """Put back what the owner's guard changed, once the owner applied the final release (change)."""
        state.backend.unguard(self.run, state.target, idle_ledger)

    def event(self, involved, reason, message, event_type, action, namespace):
        self.run.cluster.create_event(involved, reason, message, event_type, action, namespace=namespace)

    def delete_expired_locks(self, now):
        return _delete_expired_locks(self.run, now)

    def delete_ledger(self, configmap):
        _settle(self.run.store.delete, configmap)

    def record(self, quota, ledger, configmap):
        """Save ledger over configmap (read with it: a 409 if another writer changed it since)."""
        self.run.store.save(quota, ledger, configmap)


class _DryRun(_Writer):
    """Check mode: nothing is written, taken or waited for."""

    dry = True

    def hold(self, namespaces):
        return _nothing_held()

    def renew(self, namespace):
        return None

    def change(self, state, final, quota_write):
        return None

    def guard(self, state, final):
        return None

    def applied(self, state, final):
        return None

    def unguard(self, state, idle_ledger):
        return None

    def event(self, involved, reason, message, event_type, action, namespace):
        return None

    def delete_expired_locks(self, now):
        return []

    def delete_ledger(self, configmap):
        return None

    def record(self, quota, ledger, configmap):
        return None


@dataclasses.dataclass
class _State:
    """One quota as read (_read): its objects, its owner, the observed ledger, the stored ledger and its ConfigMap,
    the durable values, external changes, and whether a 0.1.0 ledger annotation is still on the quota's object."""

    target: tuple
    namespace: dict
    quota: dict
    backend: object             # the quota's owner (owners.registry.owner_of)
    ledger: object              # the ledger as observed now (None: the owner is not writable)
    stored: object              # the ledger as stored, or None
    current: dict               # the durable values of spec.hard (owner.durable_hard)
    changes: list               # external changes ledger.observe found
    configmap: dict = None
    legacy: bool = False
    overuse: dict = None        # set by _release_blockers: usage above the value to restore that lasts (reported)
    captured: list = dataclasses.field(default_factory=list)   # objects holding its headroom (as text)
    running: list = dataclasses.field(default_factory=list)    # (namespace, name) of its migrations still under way


def _read(run, target, now):
    ns_name, quota_name = target
    try:
        namespace = run.cluster.get_namespace(ns_name)
    except NotFoundError:
        raise NotFoundError("namespace %s does not exist" % ns_name, "check the namespace name")
    try:
        quota = run.cluster.get_quota(ns_name, quota_name)
    except NotFoundError:
        raise NotFoundError("ResourceQuota %s/%s does not exist" % target,
                            "check the quota name (kubectl -n %s get resourcequota)" % ns_name)
    facts = dict(run.facts)
    if is_rancher_managed(quota):
        facts["project"] = run.project_for(namespace)
    backend = registry.owner_of(quota, namespace, facts)
    if not backend.writable:
        return _State(target, namespace, quota, backend, None, None, {}, [])
    current = backend.durable_hard(quota, namespace)
    stored, configmap = run.store.read(quota)   # a corrupt ledger refuses any write to this quota
    legacy = _legacy_ledger(run, quota, namespace, backend)
    if stored is None and legacy is not None:
        stored = legacy   # adopted: saved to the store by the first write, which also drops the annotation
    ledger = stored or new_ledger(ns_name, quota_name, backend.name, store_mod.quota_uid(quota))
    observed, changes = observe(ledger, current, now)
    return _State(target, namespace, quota, backend, observed, stored, current, changes, configmap,
                  legacy=store_mod.legacy_text(quota, namespace, backend) is not None)


def _legacy_ledger(run, quota, namespace, backend):
    """store.legacy_ledger, its complaint (a forged or broken 0.1.0 ledger is never trusted) made a warning."""
    legacy, problem = store_mod.legacy_ledger(quota, namespace, backend)
    if problem:
        run.warn(problem)
    return legacy


def _after_hard(state, ledger):
    hard = hard_of(state.quota)
    hard.update(desired_strings(ledger))
    return hard


def _changes_text(before, after):
    parts = []
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            parts.append("%s %s -> %s" % (name, before.get(name, "(none)"), after.get(name, "(none)")))
    return ", ".join(parts) or "no change"


def _ledger_changed(state, final):
    """Whether the stored ledger must change: saved while reservations are active, deleted once idle."""
    if is_idle(final):
        return state.configmap is not None
    if state.configmap is None:
        return True
    return dump(confirmed(final)) != dump(confirmed(state.stored))


def _commit(run, state, ledger):
    """Decide the change ledger implies and have the run's writer make it (a dry run: none). Returns the final
    ledger and whether anything was (or, in check mode, would be) written."""
    backend = state.backend
    if not is_idle(ledger):
        ledger = backend.prepare(state.quota, state.namespace, ledger)
    final = intend(ledger)
    quota_write = needs_write(final, state.current) or state.legacy
    if not quota_write and not _ledger_changed(state, final):
        return confirmed(final), False
    run.writer.change(state, final, quota_write)
    return confirmed(final), True


def _take_back(run, state, configmap):
    """Put the ledger back as it was before a quota write that was refused (best effort: if this fails too,
    the next read sees the quota at `previous` and resolves it)."""
    try:
        if state.configmap is None or state.stored is None:
            run.store.delete(configmap)
        else:
            run.store.save(state.quota, state.stored, configmap)
    except KvquotaError:
        pass


def _settle(write, *args):
    """The last step of a change (confirm or delete the ledger): the quota is already right, so a concurrent
    writer (409) only means the next read resolves it (ledger.observe)."""
    try:
        write(*args)
    except ConflictError:
        pass


def _transact(run, target, mutate, attempts=DEFAULT_ATTEMPTS, first=None):
    """read -> observe -> mutate -> conditional writes, retried from scratch on a 409 (cluster.retry_on_conflict).
    first: a state read just before, used for the first attempt (saves requests; the writes are conditional
    anyway). A mutation that changes nothing still writes the ledger's own values when the quota does not hold
    them (a run interrupted between its ledger and quota writes)."""
    def attempt(number):
        now = run.clock()
        state = first if (number == 0 and first is not None) else _read(run, target, now)
        if not state.backend.writable:
            return state, None, None, False
        new, info = mutate(state, now)
        final, changed = _commit(run, state, state.ledger if new is None else new)
        if new is None and not changed:
            return state, state.ledger, info, False
        return state, final, info, changed
    return retry_on_conflict(attempt, attempts, "write %s/%s" % target, run.sleep)


def _emit(run, state, reason, message, event_type="Normal", action="Update"):
    """Events on the quota and on its namespace; failures become warnings."""
    quota = dict(state.quota)
    quota.setdefault("apiVersion", "v1")
    quota.setdefault("kind", "ResourceQuota")
    namespace = dict(state.namespace)
    namespace.setdefault("apiVersion", "v1")
    namespace.setdefault("kind", "Namespace")
    for involved in (quota, namespace):
        try:
            run.writer.event(involved, reason, message, event_type, action, state.target[0])
        except KvquotaError as err:
            run.warn("could not record an Event on %s %s/%s: %s"
                     % (involved.get("kind"), state.target[0], state.target[1], err))


def _report_changes(run, state):
    for change in state.changes:
        run.warn(change["message"])
        reason = {ledger_mod.REVERTED: "QuotaReverted", ledger_mod.ADMIN_CHANGE: "QuotaBaseChanged",
                  ledger_mod.REMOVED: "QuotaLimitRemoved"}[change["kind"]]
        _emit(run, state, reason, "kvquota: " + change["message"], "Warning")


def _quota_result(state, final, info, changed):
    backend = state.backend
    result = {
        "namespace": state.target[0],
        "quota": state.target[1],
        "backend": backend.name,
        "written_on": backend.written_on,
        "notes": backend.describe().get("notes", []),
        "changed": changed,
        "external_changes": list(state.changes),
        "before": hard_of(state.quota),
    }
    if final is not None:
        result["after"] = _after_hard(state, final)
        result["reservations"] = sorted(final.reservations)
        result["base"] = dict((k, v) for k, v in final.base.items() if v is not None)
    else:
        result["after"] = hard_of(state.quota)
    if info:
        result.update(dict((k, v) for k, v in info.items() if k not in result))
    return result


def _diff(results):
    before, after = {}, {}
    for item in results:
        key = "%s/%s" % (item["namespace"], item["quota"])
        before[key] = {"spec": {"hard": item["before"]}}
        after[key] = {"spec": {"hard": item["after"]}}
    return {"before": before, "after": after}


# ---------------------------------------------------------------------------
# reserve

@dataclasses.dataclass(frozen=True)
class ReserveRequest:
    """One reservation to make: the headroom per quota and what its ledger entry records."""
    reservation_id: str
    headroom: dict              # {(ns, quota) or "ns/quota": ResourceList (strings or Fractions)}
    owner: str
    reason: str
    ttl_seconds: int
    margin: object = None       # added to each headroom: a ResourceList, a percentage or a factor
    top_up: object = False      # True or an idempotency key: add exactly this headroom to the existing reservation
    replace: bool = False       # replace the existing reservation's headroom with this one
    refs: dict = None           # {"batch", "migrations", "sourcePods", "vms"} recorded for the release


@dataclasses.dataclass(frozen=True)
class ReleaseRequest:
    """One reservation to give back."""
    reservation_id: str
    quotas: tuple = None        # only these [(ns, quota)]; None: every quota holding it
    wait_for_pods: bool = True  # wait until it can be released (False: check once)
    timeout: float = 600
    force: bool = False         # restore even while pods still count (cleaning up an abandoned maintenance)
    poll_interval: float = 5.0


@dataclasses.dataclass(frozen=True)
class Reservations:
    """The reservations service of one run: the cluster, where the ledgers live (operator_namespace), the run's
    lock settings (lock: {"holder", "duration", "wait_timeout"}) and clock. A check-mode service reads as a
    real one and writes nothing, takes no lock and waits for nothing. facts: the cluster facts the quota owners
    are chosen by (None: read from the cluster); rancher_sync_timeout: how long an owner that applies a written
    value later (Rancher's agent) is waited for."""

    cluster: object
    operator_namespace: str = store_mod.DEFAULT_OPERATOR_NAMESPACE
    lock: dict = None
    clock: object = time.time
    sleep: object = time.sleep
    check_mode: bool = False
    facts: dict = None
    rancher_sync_timeout: int = DEFAULT_RANCHER_SYNC_TIMEOUT

    def dry_run(self):
        """The same service in check mode."""
        return dataclasses.replace(self, check_mode=True)

    def _run(self):
        return _Run(self)

    def reserve(self, request, enforce_timeout=None):
        return _reserve_request(self, request, enforce_timeout)

    def record_migrations(self, reservation_id, targets, migrations):
        return _record_migrations(self, reservation_id, targets, migrations)

    def release(self, request):
        return _release_request(self, request)

    def release_expired(self, now=None, wait_for_pods=False, timeout=0, force=False, poll_interval=5.0):
        return _release_expired(self, now, wait_for_pods, timeout, force, poll_interval)

    def settle_interrupted(self, ledgers, namespaces=None):
        return _settle_interrupted(self, ledgers, namespaces)

    def reconcile(self, quotas=None):
        return _reconcile(self, quotas)


def _reserve_request(service, request, enforce_timeout):
    """Expand every quota of request.headroom ({(ns, quota): ResourceList}) by its headroom (+ margin) for
    reservation_id, through the quota's owner.

    Idempotent: the same id and headroom again changes nothing. A different headroom for an existing id is an
    error unless top_up (add exactly that amount; True or an idempotency key) or replace is given. Every quota
    is read and checked first (missing quota, Rancher project limit, Harvester already scaling): any problem
    fails the call before anything is written. refs (optional): {"batch": ..., "migrations": [{namespace,
    name}], "sourcePods": [{namespace, name, uid}], "vms": [...]} recorded with the reservation for release.
    The call holds the Lease of every namespace it touches (in operator_namespace, where the ledgers live too);
    lock (optional): {"holder": ..., "duration": seconds, "wait_timeout": 120} sets who holds it and how long
    to wait for another job; the duration defaults to lock_duration(rancher_sync_timeout).

    A reservation is usable only once quota admission enforces it: admission checks status.hard, which
    kube-controller-manager copies from spec.hard, and can lag after an API server restart. So after the writes
    (with the Leases let go) the call waits until status.hard of every quota it changed shows what it wrote,
    re-reading only those quotas, for up to enforce_timeout seconds (None: the cluster's outage budget +
    enforcement.CONTROLLER_RELIST_SECONDS; 0: do not wait), and raises WaitTimeoutError naming spec.hard against
    status.hard if it does not (the reservation stays written and held: re-run or release it).

    Returns {changed, reservation_id, quotas: [per quota: before/after spec.hard, outcome, delta, ...],
    skipped, warnings, diff, status_hard_wait_seconds}.
    """
    reservation_id, ttl_seconds = request.reservation_id, request.ttl_seconds
    _check_id(reservation_id)
    if ttl_seconds is None or isinstance(ttl_seconds, bool) or int(ttl_seconds) <= 0:
        raise InputError("ttl_seconds must be a positive number of seconds, got %r" % (ttl_seconds,),
                         "give a ttl longer than the maintenance step, e.g. 3600")
    plan = dict((target, apply_margin(headroom, request.margin))
                for target, headroom in parse_targets(request.headroom).items())
    run = service._run()
    with run.locked([ns for ns, _q in plan]):
        result = _reserve(run, request, plan)
    result["status_hard_wait_seconds"] = 0.0
    if service.check_mode:
        return result
    cluster = service.cluster
    if enforce_timeout is None:
        enforce_timeout = enforcement.enforce_timeout(getattr(cluster, "outage_budget", DEFAULT_OUTAGE_BUDGET))
    if enforce_timeout > 0:
        gaps, waited = enforcement.wait_enforced(cluster.get_quota, enforcement.written_hard(result), enforce_timeout,
                                                 service.clock, service.sleep)
        result["status_hard_wait_seconds"] = round(waited, 2)
        if gaps:
            raise WaitTimeoutError(
                "reservation '%s' is written but quota admission does not enforce it %ds later: %s (admission "
                "checks status.hard, which kube-controller-manager's quota controller copies from spec.hard)"
                % (reservation_id, int(waited), "; ".join(enforcement.gaps_text(t, g) for t, g in sorted(gaps.items()))),
                "check that kube-controller-manager runs and syncs ResourceQuotas (`kubectl get resourcequota -n "
                "NAMESPACE -o yaml` shows status.hard equal to spec.hard once it does); the reservation stays held: "
                "re-run once it does, or release '%s'" % reservation_id)
    return result


def _record_migrations(service, reservation_id, targets, migrations):
    """Add migrations ([{namespace, name, uid}]: those a batch created) to the refs of reservation_id in the ledger of
    every quota of targets ([(namespace, quota)]) that holds it. A batch's reservation is one transaction
    (reserve), made before its migrations because their target pods need its headroom; their UIDs exist only once
    they are created, and bind the reservation to them by UID (a re-run's own migrations: migrate.our_migration_uids;
    the release's readiness). So this changes only the ledgers' refs: one conditional write per ledger, re-read and
    retried on a conflict, under the namespaces' Leases as every ledger write; no quota or owner object is read for
    its values or written, nothing is fenced (the fence lists the UIDs itself: admit_migrations). A quota that is gone,
    a ledger that no longer holds the reservation (released meanwhile) or already records them: left as it is.
    Returns {"recorded": the (namespace, quota) whose ledger changed (would change, in check mode), "warnings"}."""
    _check_id(reservation_id)
    refs = {"migrations": [dict(m) for m in migrations]}
    run = service._run()
    recorded = []
    with run.locked(sorted(set(ns for ns, _q in targets))):
        for target in sorted(set(tuple(t) for t in targets)):
            if _record_refs(run, target, reservation_id, refs):
                recorded.append(target)
    return {"recorded": recorded, "warnings": list(run.warnings)}


def _record_refs(run, target, reservation_id, refs):
    """Whether reservation_id's refs in the ledger of the quota target were extended by refs (_record_migrations)."""
    def attempt(_number):
        try:
            quota = run.cluster.get_quota(*target)
        except NotFoundError:
            return False
        stored, configmap = run.store.read(quota)
        new = ledger_mod.record_refs(stored, reservation_id, refs) if stored is not None else None
        if new is None:
            return False
        run.writer.record(quota, new, configmap)
        return True
    return retry_on_conflict(attempt, DEFAULT_ATTEMPTS, "record the migrations of reservation '%s' on %s/%s"
                             % ((reservation_id,) + tuple(target)), run.sleep)


def lock_duration(rancher_sync_timeout=DEFAULT_RANCHER_SYNC_TIMEOUT):
    """Lease duration for one reservation write: longer than the write can take (reads, conditional writes,
    at most rancher_sync_timeout waiting for Rancher to follow) plus slack, and short, so that the lease of a
    job killed while writing frees soon and a re-run waits for it well within its lock_timeout (default 120 s)."""
    return int(rancher_sync_timeout) + 30


def _lease_wait_noter(run):
    """on_wait for lease.acquire: a warning naming the job we waited for (two runs sharing namespaces)."""
    def note(message):
        run.warn("waited for another job: %s; went on once it was free" % message)
    return note


def _reserve_mutation(request, delta, refs):
    def mutate(state, now):
        current = state.current
        names = state.backend.writable_names(state.quota)
        if names is not None:
            current = dict((k, v) for k, v in current.items() if k in names)
        new, outcome = ledger_mod.reserve(state.ledger, request.reservation_id, delta, current, now, request.owner,
                                          request.reason, request.ttl_seconds, refs, request.top_up, request.replace)
        if outcome["outcome"] in (ledger_mod.UNCHANGED, ledger_mod.UNTRACKED) and not state.changes:
            return None, outcome
        return new, outcome
    return mutate


def _with_vmi_uids(run, refs):
    """refs with the uid of every VM in refs["vms"] (looked up where missing): a VM is identified by its VMI's uid,
    which the fence admits and release unfences; a name alone could be another object's."""
    if not (refs or {}).get("vms") or all(isinstance(v, dict) and v.get("uid") for v in refs["vms"]):
        return refs
    result = dict(refs)
    result["vms"] = []
    for item in readiness.ref_items(refs, "vms", None):
        entry = dict(item)
        if not entry.get("uid") and entry.get("namespace"):
            try:
                vmi = run.cluster.get_custom(*KUBEVIRT, "virtualmachineinstances", entry["name"],
                                             namespace=entry["namespace"])
                entry["uid"] = (vmi.get("metadata") or {}).get("uid")
            except NotFoundError:
                pass
        result["vms"].append(entry)
    return result


def _reserve(run, request, plan):
    reservation_id = request.reservation_id
    refs = _with_vmi_uids(run, request.refs)
    results, skipped, problems, states = [], [], [], {}
    mutations = dict((target, _reserve_mutation(request, plan[target], refs)) for target in plan)
    # phase 1: read and check everything before writing anything
    for target in sorted(plan):
        now = run.clock()
        state = _read(run, target, now)
        if not state.backend.writable:
            skipped.append({"namespace": target[0], "quota": target[1], "backend": state.backend.name,
                            "reason": state.backend.read_only_reason(state.quota)})
            continue
        new, outcome = mutations[target](state, now)
        if outcome["outcome"] == ledger_mod.UNTRACKED:
            skipped.append({"namespace": target[0], "quota": target[1], "backend": state.backend.name,
                            "reason": "the quota tracks none of %s (or its owner cannot set them)"
                                      % ", ".join(sorted(plan[target]))})
            continue
        states[target] = state
        if new is None or outcome["outcome"] in (ledger_mod.UNCHANGED, ledger_mod.REFS_UPDATED):
            continue
        problems.extend(state.backend.blockers(state.quota, state.namespace, new))
        project = state.backend.project
        if project:
            ok, messages = project_fit(project, run.all_namespaces(), target[0], desired_strings(new))
            problems.extend(messages)
    if problems:
        raise InputError("cannot reserve '%s': %s" % (reservation_id, "; ".join(problems)),
                         "nothing was changed; for a limit named above, raise the limit named above or reserve "
                         "less (smaller batches); for annotations named above, wait for or remove them as the "
                         "problem says; then re-run")
    # the fence first: the headroom never exists while a tenant's new pod could take it
    fenced = _fence(run, request, states, refs)
    # phase 2: write, quota by quota, each one atomic and retried on conflicts
    done = []
    for target in sorted(states):
        try:
            state, final, info, changed = _transact(run, target, mutations[target], first=states[target])
            if final is not None and not is_idle(final):
                run.writer.applied(state, final)
        except KvquotaError as err:
            if done:
                raise type(err)("%s (reservation '%s' is already applied to %s; re-run to finish, or release it)"
                                % (err.message, reservation_id, ", ".join(done)), err.fix)
            raise
        _report_changes(run, state)
        item = _quota_result(state, final, info, changed)
        entry = final.reservations.get(reservation_id) if final is not None else None
        if entry is not None:
            item["expires"] = entry.expires
            item["delta"] = dict(entry.delta)
        if changed and entry is not None and (info or {}).get("outcome") not in (ledger_mod.UNCHANGED,
                                                                                 ledger_mod.REFS_UPDATED):
            _emit(run, state, "QuotaReserved", _reserve_message(reservation_id, final, state, item))
        for note in item.get("notes") or []:
            run.warn("%s/%s: %s" % (target[0], target[1], note))
        results.append(item)
        done.append("%s/%s" % target)
    changed = any(item["changed"] for item in results) or any(item["changed"] for item in fenced)
    return {"changed": changed, "reservation_id": reservation_id, "quotas": results, "skipped": skipped,
            "fence": fenced, "warnings": list(run.warnings), "diff": _diff(results), "check_mode": run.check_mode}


def _reserved_vmis(refs, namespace):
    """[{name, uid}] of the VMs in refs["vms"] (uids filled in by _with_vmi_uids) that live in namespace."""
    return [{"name": item["name"], "uid": item["uid"]} for item in readiness.ref_items(refs, "vms", namespace, True)
            if item.get("uid")]


def _reserved_migrations(run, refs, namespace, vmis):
    """[{name, uid, vmi_uid, size}] of the migrations in refs["migrations"] of namespace that migrate one of vmis (this
    reservation's VMIs there, [{name, uid}]): the run's own and those it follows, the only ones the fence admits;
    size (the most its target pod may charge: fence.size_value) as the entry gives it, else None (not checked).
    The VMI is the entry's vm when given, else the migration's spec.vmiName read now (a migration gone, or whose
    UID is not the recorded one, is left out: it is not the one the run recorded)."""
    by_name = dict((v["name"], v["uid"]) for v in vmis)
    found = []
    for item in readiness.ref_items(refs, "migrations", namespace, True):
        vm = item.get("vm")
        if not vm:
            try:
                vmim = run.cluster.get_custom(*KUBEVIRT, "virtualmachineinstancemigrations",
                                              item["name"], namespace=namespace)
            except NotFoundError:
                continue
            if item.get("uid") and (vmim.get("metadata") or {}).get("uid") != item["uid"]:
                continue
            vm = (vmim.get("spec") or {}).get("vmiName")
        if vm in by_name:
            found.append({"name": item["name"], "uid": item.get("uid") or "", "vmi_uid": by_name[vm],
                          "size": item.get("size"), "claims": item.get("claims")})
    return found


def _fence(run, request, states, refs):
    """Fence every namespace the reservation expands for its VMs (refs["vms"]) and their migrations the run created
    or follows (refs["migrations"]: only their target pods and backend-storage PVCs are admitted); [] when the
    fence is not installed or the reservation names no VM (explicit headroom: no pod can be told apart then)."""
    if not (refs or {}).get("vms") or not states or not run.fence_installed():
        return []
    now = run.clock()
    note = fence_mod.fence_note(timeutil.format_time(now), timeutil.format_time(now + int(request.ttl_seconds)),
                                request.owner or None)
    controller = run.controller()
    results = []
    for namespace in sorted(set(ns for ns, _q in states)):
        vmis = _reserved_vmis(refs, namespace)
        if vmis:
            outcome = fence_mod.fence(run.cluster, run.store.namespace, namespace, vmis, note, controller,
                                      run.check_mode, _reserved_migrations(run, refs, namespace, vmis))
            outcome["reservation"] = request.reservation_id
            results.append(outcome)
    return results


def admit_migrations(cluster, migrations, check_mode=False, operator_namespace=store_mod.DEFAULT_OPERATOR_NAMESPACE,
                     installed=None):
    """List migrations ([{namespace, name, uid (None before it is created), vm}]) in the fence of their namespaces,
    where a reservation fenced their VM: the run lists a migration it creates by name just before creating it
    (virt-controller may create the target pod within milliseconds of the create), then with its UID once created.
    Nothing where the fence is not installed or the namespace not fenced (installed: True when the caller knows
    it is, as from a reserve result's "fence", saving the look-up). Returns fence.admit_migrations' results."""
    return _per_fenced_namespace(cluster, migrations, check_mode, operator_namespace, installed,
                                 fence_mod.admit_migrations)


def admit_claim_pods(cluster, pods, check_mode=False, operator_namespace=store_mod.DEFAULT_OPERATOR_NAMESPACE,
                     installed=None):
    """List target pods ([{namespace, uid, migration}]: the pod KubeVirt created for a listed migration of the run)
    in the fence of their namespaces, so that their DRA ResourceClaims may be created there (each within its
    migration's claims pin). Nothing where the fence is not installed (installed as for admit_migrations).
    Returns fence.admit_claim_pods' results."""
    return _per_fenced_namespace(cluster, pods, check_mode, operator_namespace, installed,
                                 fence_mod.admit_claim_pods)


def end_migrations(cluster, migrations, check_mode=False, operator_namespace=store_mod.DEFAULT_OPERATOR_NAMESPACE,
                   installed=None):
    """Stop admitting anything for migrations ([{namespace, name, uid}]) that are final now: their VMIs' later
    migrations (a tenant's, KubeVirt's) get no target pod or PVC in the headroom; the namespace stays fenced until
    the reservation is released. Idempotent; nothing where the fence is not installed (installed as for
    admit_migrations)."""
    return _per_fenced_namespace(cluster, migrations, check_mode, operator_namespace, installed,
                                 fence_mod.end_migrations)


def _per_fenced_namespace(cluster, migrations, check_mode, operator_namespace, installed, change):
    """change(cluster, operator namespace, namespace, its migrations, check_mode) for each namespace of migrations;
    [] where the fence is not installed (installed: True when the caller knows it is)."""
    run = Reservations(cluster, operator_namespace, check_mode=check_mode, facts={})._run()
    run.fence_state = installed
    if not migrations or not run.fence_installed():
        return []
    return [change(cluster, run.store.namespace, namespace,
                   [dict(m) for m in migrations if m["namespace"] == namespace], check_mode)
            for namespace in sorted(set(m["namespace"] for m in migrations))]


def _unfence(run, released, reservation_id=None, held_now=None):
    """After quotas were restored: stop admitting the released reservations' VMs ({namespace: [{name, uid}]}, a
    namespace with no VM listed when only a remainder or a reservation without VMs was given back there) and their
    migrations; a namespace is unfenced with its last VMI, unless a remainder of a reservation is held there
    (ledger.hold_at_usage: Harvester keeps the quota at the namespace's usage, above its base). Then the namespace
    stays fenced with no VMI and no migration listed, so that nothing new is admitted (the tenant cannot replace
    pods that end, and usage drops to the base); the reaper unfences it once it restored the base (_unfence_idle).
    A VMI that another active reservation of the namespace still names stays listed. reservation_id: the one just
    given back (not counted from the ledgers, which check_mode leaves as they were); held_now: {namespace: [ids]}
    of the remainders this release kept."""
    results = []
    if not released or not run.fence_installed():
        return results
    holds = _fence_holds(run, set(released), reservation_id)
    for namespace, ids in (held_now or {}).items():
        if holds is not None and namespace in released:
            holds.setdefault(namespace, ([], set()))[0].extend(i for i in ids if i not in holds[namespace][0])
    for namespace, vmis in sorted(released.items()):
        if holds is None:
            # the ledgers could not be read: keep the fence (the reaper lifts it once it can tell)
            run.warn("namespace %s stays fenced: the ledgers could not be read to tell whether a reservation or a "
                     "remainder is still held there; the reaper (kvquota_release expired: true) unfences it once "
                     "nothing is" % namespace)
            continue
        held, named = holds.get(namespace, ([], set()))
        gone = [vmi for vmi in vmis if vmi["uid"] not in named]
        if held:
            results.append(_keep_fenced(run, namespace, gone, held))
        elif vmis or fence_mod.namespace_key(namespace) in _fence_data(run):
            results.append(fence_mod.unfence(run.cluster, run.store.namespace, namespace, gone, run.check_mode))
    return results


def _fence_data(run):
    """The fence ConfigMap's data as it is now ({} without one)."""
    return (fence_mod.read_fence(run.cluster, run.store.namespace) or {}).get("data") or {}


def _fence_holds(run, namespaces, leaving=None):
    """{namespace: ([ids of the remainders held there], {uids of the VMIs its active reservations name})} for
    namespaces, from the ledgers as they are now, the reservation leaving left out; None when they cannot be
    read."""
    try:
        found = find_ledgers(run.cluster, None, run.store.namespace)
    except KvquotaError:
        return None
    holds = {}
    for (namespace, _quota), entry in found.items():
        if namespace not in namespaces:
            continue
        held, named = holds.setdefault(namespace, ([], set()))
        for rid, item in sorted(entry.reservations.items()):
            if rid == leaving:
                continue
            if item.remainder:
                held.append(rid)
            else:
                named.update(v["uid"] for v in readiness.ref_items(item.refs, "vms", namespace, True) if v.get("uid"))
    return holds


def held_fence_note(held):
    """The text a refusal shows in a namespace kept fenced for the remainders held there."""
    return ("no maintenance window now: kvquota keeps this namespace's quota at its usage, above its base, as "
            "'%s' (what it used of a released reservation); nothing new is admitted until usage is back within the "
            "base, then the reaper restores the base and lifts this" % "', '".join(sorted(held)))


def _keep_fenced(run, namespace, vmis, held):
    """vmis (and their migrations) unlisted, the namespace kept fenced (with the note of held when nothing else
    keeps it: no VMI, no migration, so nothing is admitted), in one write. fence.unfence's result shape + 'held'."""
    outcome = fence_mod.unfence_keeping_namespace(run.cluster, run.store.namespace, namespace, vmis,
                                                  held_fence_note(held), run.check_mode)
    return dict(outcome, held=list(held))


def _reserve_message(reservation_id, final, state, item):
    entry = final.reservations.get(reservation_id)
    return ("kvquota reservation '%s' (owner %s; reason: %s) %s: %s, until %s"
            % (reservation_id, entry.owner or "-", entry.reason or "-", item.get("outcome"),
               _changes_text(item["before"], item["after"]), entry.expires or "released"))


# ---------------------------------------------------------------------------
# release

def find_ledgers(cluster, warnings=None, operator_namespace=store_mod.DEFAULT_OPERATOR_NAMESPACE):
    """{(namespace, quota): Ledger} for every quota kvquota holds a ledger for: the ConfigMaps of the operator
    namespace, and 0.1.0 annotations not adopted yet that verify against their quota (three list requests). A
    ledger that cannot be read, or whose quota is gone, is left out with a warning appended to warnings (when
    given): it never stops the others from being read."""
    found, _orphans, _legacy = _scan(cluster, warnings if warnings is not None else [], operator_namespace)
    return found


def _scan(cluster, warnings, operator_namespace):
    """(ledgers by (namespace, quota), [(Ledger, ConfigMap)] of ledgers whose quota no longer exists, the
    (namespace, quota) of verified 0.1.0 ledgers not adopted yet)."""
    store = store_mod.Store(cluster, operator_namespace)
    stored = store.list(warnings)
    quotas = cluster.list_quotas()
    by_uid = dict(((q.get("metadata") or {}).get("uid"), q) for q in quotas)
    found, orphans, legacy_targets = {}, [], []
    for uid, (entry, configmap) in sorted(stored.items()):
        quota = by_uid.get(uid)
        if quota is None:
            warnings.append("the kvquota ledger of %s/%s names a quota that no longer exists (uid %s); its "
                            "reservations %s are void (the reaper deletes it)"
                            % (entry.namespace, entry.quota, uid, ", ".join(sorted(entry.reservations)) or "none"))
            orphans.append((entry, configmap))
            continue
        meta = quota.get("metadata") or {}
        entry.namespace, entry.quota = meta.get("namespace"), meta.get("name")
        found[(entry.namespace, entry.quota)] = entry
    # 0.1.0 kept the ledger on the quota, or on the Namespace of a Rancher-managed quota
    candidates = [q for q in quotas if (q.get("metadata") or {}).get("uid") not in stored and (
        ledger_mod.LEDGER_ANNOTATION in ((q.get("metadata") or {}).get("annotations") or {}) or is_rancher_managed(q))]
    namespaces = {}
    if any(is_rancher_managed(q) for q in candidates):
        namespaces = dict(((n.get("metadata") or {}).get("name"), n) for n in cluster.list_namespaces())
    if candidates:
        run = Reservations(cluster, operator_namespace, check_mode=True)._run()
        for quota in candidates:
            meta = quota.get("metadata") or {}
            namespace = namespaces.get(meta.get("namespace")) or {}
            backend = registry.owner_of(quota, namespace, run.facts)
            legacy = _legacy_ledger(run, quota, namespace, backend) if backend.writable else None
            if legacy is not None:
                found[(meta.get("namespace"), meta.get("name"))] = legacy
                legacy_targets.append((meta.get("namespace"), meta.get("name")))
        warnings.extend(w for w in run.warnings if w not in warnings)
    return found, orphans, sorted(legacy_targets)


def _release_blockers(run, state, reservation_id, now):
    """Why reservation_id cannot be released from this quota yet ([] = it can), from what release_readiness reads
    and decides (see there what is waited for and what never keeps a reservation). Sets state.captured (objects that
    hold the headroom without being the reservation's migrations, as text), state.overuse and state.running."""
    entry = state.ledger.reservations.get(reservation_id)
    state.captured, state.overuse, state.running = [], None, []
    if entry is None:
        return []
    namespace = state.target[0]
    own = readiness.read_own(run.cluster, entry, namespace, now)
    reasons, state.running = readiness.own_blockers(own, now)
    after, _outcome = ledger_mod.release(state.ledger, reservation_id, now)
    target = desired(after)
    used = parse_resource_list(mask(used_of(state.quota), list(target)), "status.used")
    fits, names = less_or_equal(used, target)
    if fits:
        return reasons
    facts, unreadable = readiness.read_usage(run.cluster, own, namespace, names)
    if unreadable:
        run.warn("cannot name the PersistentVolumeClaims or ResourceClaims that use %s/%s (%s): status.used is taken "
                 "as what they charge; bind this collection's kvquota-read (ansible-playbook kvquota.maintenance.install)"
                 % (namespace, state.target[1], unreadable))
    usage = readiness.usage_now(state.quota, state.ledger, entry, namespace, names, facts, now)
    reasons, state.captured, state.overuse = readiness.decide(state.target, state.quota, after, used, names, reasons,
                                                              usage)
    return reasons


def _release_ledger(state, reservation_id, now):
    """The ledger after releasing reservation_id from state's quota, and the outcome: base + the other
    reservations; where the quota's owner refuses a value below usage (Harvester's namespace webhook), what
    status.used still holds above that is kept as the reservation's remainder (ledger.hold_at_usage)."""
    if not state.backend.refuses_below_usage or reservation_id not in state.ledger.reservations:
        return ledger_mod.release(state.ledger, reservation_id, now)
    after, _outcome = ledger_mod.release(state.ledger, reservation_id, now)
    target = desired(after)
    used = parse_resource_list(mask(used_of(state.quota), list(target)), "status.used")
    above = dict((name, used[name] - target[name]) for name in used if used[name] > target[name])
    return ledger_mod.hold_at_usage(state.ledger, reservation_id, above, now)


_GIVEN_BACK = (ledger_mod.RELEASED, ledger_mod.HELD_AT_USAGE)


def _release_mutation(reservation_id):
    def mutate(state, now):
        new, outcome = _release_ledger(state, reservation_id, now)
        if outcome["outcome"] not in _GIVEN_BACK and not state.changes:
            if state.stored is not None and is_idle(state.stored):
                return new, outcome   # a leftover idle ledger: clean it up
            return None, outcome
        return new, outcome
    return mutate


def _release_one(run, target, reservation_id, state=None):
    """Release reservation_id from one quota (when this empties the ledger, Harvester's opt-out is put back once the
    owner applied the base: _Writer.change)."""
    if state is None:
        state = _read(run, target, run.clock())
    state, final, info, changed = _transact(run, target, _release_mutation(reservation_id), first=state)
    _report_changes(run, state)
    item = _quota_result(state, final, info, changed)
    if changed and final is not None:
        run.writer.applied(state, final)
        if info and info.get("outcome") in _GIVEN_BACK:
            rest = sorted(final.reservations)
            tail = ("base restored, no reservation left" if not rest else
                    "%d reservation(s) still active: %s" % (len(rest), ", ".join(rest)))
            if info.get("outcome") == ledger_mod.HELD_AT_USAGE:
                tail = ("down to the namespace's usage, which is above its base: %s kept as '%s' until usage drops; %s"
                        % (", ".join("%s=%s" % kv for kv in sorted(info["held"].items())), info["held_as"], tail))
            _emit(run, state, "QuotaReleased", "kvquota released reservation '%s': %s (%s)"
                  % (reservation_id, _changes_text(item["before"], item["after"]), tail))
    return item


def _release_locked(run, target, reservation_id):
    """_release_one holding the namespace's Lease, from a fresh read: the change is made against the ledger as
    it is now, never as it was before the lock was taken."""
    with run.locked([target[0]]):
        return _release_one(run, target, reservation_id)


def _vms_of(state, reservation_id):
    entry = state.ledger.reservations.get(reservation_id) if state.ledger is not None else None
    return [dict(item) for item in readiness.ref_items(entry.refs if entry else None, "vms", state.target[0], True)
            if item.get("uid")]


def _release_request(service, request):
    """Give request.reservation_id back on every quota holding it (or only on request.quotas=[(ns, quota)]), and
    finish any change an interrupted run left half-written.

    A quota is restored (to base + the other active reservations, from the ledger, never by subtraction)
    only when the reservation's migrations are final, its recorded source pods are terminal or gone, and
    status.used fits under the value to write. wait_for_pods=True waits for that up to timeout seconds,
    polling every poll_interval; False checks once. Quotas that are still not ready raise WaitTimeoutError
    naming the pods that still count (quotas already released stay released). force=True skips the checks.
    Releasing an id that is not active is a no-op that says so. Each quota's write holds the Lease of its
    namespace (lock: as for reserve), taken only for the write, not while waiting for pods.
    """
    reservation_id = request.reservation_id
    _check_id(reservation_id)
    run = service._run()
    if request.quotas is not None:
        targets = sorted(parse_targets(dict((tuple(t) if isinstance(t, list) else t, {}) for t in request.quotas)))
    else:
        targets = sorted(target for target, entry in find_ledgers(service.cluster, run.warnings,
                                                                  service.operator_namespace).items()
                         if ledger_mod.holding(entry, reservation_id) or _unfinished(entry))
    return _release(run, request, targets, True)


def _unfinished(entry):
    """Whether a stored ledger is left half-written by an interrupted run (idle, or a write under way)."""
    return is_idle(entry) or entry.previous is not None


def _release(run, request, targets, raise_on_wait):
    """Release request.reservation_id from targets [(ns, quota)], waiting as the request says; raise_on_wait: raise
    WaitTimeoutError naming what still waits (release), or report it as pending (the reaper)."""
    reservation_id = request.reservation_id
    results, waiting = [], {}
    if not targets:
        return {"changed": False, "reservation_id": reservation_id, "quotas": [], "pending": [], "overuse": [],
                "warnings": list(run.warnings), "diff": _diff([]),
                "message": "no active reservation '%s' on any quota: nothing to release (already released or never "
                           "made)" % reservation_id, "check_mode": run.check_mode, "status_hard_wait_seconds": 0.0}
    pending = list(targets)
    released_vms = {}   # namespace -> [{name, uid}] of the VMs whose reservation was given back there
    held_now = {}       # namespace -> ids of the remainders this release kept there (ledger.hold_at_usage)
    deadline = run.clock() + max(0, request.timeout or 0)
    captured = {}  # target -> objects created during the reservation that hold its headroom (no fence kept them)
    running = {}   # target -> its migrations still under way (for the fix)
    overuse = []   # the quotas restored below their usage (reported, never kept as headroom)
    while pending:
        waiting = {}
        for target in pending:
            now = run.clock()
            state = _read(run, target, now)
            if not state.backend.writable:
                continue
            if state.ledger is None or not ledger_mod.holding(state.ledger, reservation_id):
                results.append(_release_locked(run, target, reservation_id))
                continue
            reasons = [] if request.force else _release_blockers(run, state, reservation_id, now)
            if state.captured:
                captured[target] = state.captured
            else:
                captured.pop(target, None)
            running[target] = state.running
            if reasons and not run.check_mode:
                waiting[target] = reasons
                continue
            vms = _vms_of(state, reservation_id)
            item = _release_one(run, target, reservation_id, state) if run.check_mode else \
                _release_locked(run, target, reservation_id)
            if item.get("outcome") in _GIVEN_BACK:
                # a namespace with no VM listed too: a remainder held there keeps it fenced, one released lifts it
                released_vms.setdefault(target[0], []).extend(v for v in vms if v not in
                                                              released_vms.get(target[0], []))
            if item.get("outcome") == ledger_mod.HELD_AT_USAGE and item.get("held_as"):
                held_now.setdefault(target[0], []).append(item["held_as"])
            if reasons:
                item["would_wait_for"] = reasons
            if state.overuse and item.get("outcome") in _GIVEN_BACK:
                report = dict(state.overuse)
                if item.get("outcome") == ledger_mod.HELD_AT_USAGE:
                    report.update(held=dict(item.get("held") or {}), held_as=item.get("held_as"))
                item["overuse"] = report
                overuse.append(report)
                text = readiness.overuse_text(reservation_id, report, _fence_installed(run))
                run.warn(text)
                if item.get("changed"):   # once per change: a reaper run that finds a remainder as it was is silent
                    _emit(run, state, "QuotaOverUse", "kvquota: " + text, "Warning")
            results.append(item)
        pending = sorted(waiting)
        if not pending or not request.wait_for_pods or run.clock() >= deadline:
            break
        run.sleep(max(0.05, min(request.poll_interval, deadline - run.clock())))
    lowered_after = _wait_lowered(run, reservation_id, results)
    # unfence only namespaces none of whose quotas still waits for this reservation
    unfenced = _unfence(run, dict((ns, vms) for ns, vms in released_vms.items()
                                  if not any(t[0] == ns for t in waiting)), reservation_id, held_now)
    result = {
        "changed": any(item["changed"] for item in results) or any(item["changed"] for item in unfenced),
        "reservation_id": reservation_id,
        "quotas": results,
        "fence": unfenced,
        "pending": [{"namespace": t[0], "quota": t[1], "reasons": waiting[t]} for t in sorted(waiting)],
        "overuse": overuse,
        "warnings": list(run.warnings),
        "diff": _diff(results),
        "check_mode": run.check_mode,
        "status_hard_wait_seconds": lowered_after,
    }
    messages = []
    for item in results:
        outcome = item.get("outcome")
        if outcome in (ledger_mod.UNKNOWN, ledger_mod.ALREADY_RELEASED) and item.get("message"):
            messages.append(item["message"])
    if messages:
        result["message"] = "; ".join(messages)
    if captured:
        result["captured"] = [{"namespace": t[0], "quota": t[1], "pods": pods} for t, pods in sorted(captured.items())]
    if waiting and raise_on_wait:
        details = "; ".join("%s/%s: %s" % (t[0], t[1], "; ".join(waiting[t])) for t in sorted(waiting))
        err = WaitTimeoutError("reservation '%s' not released after %ss: %s" % (reservation_id, request.timeout, details),
                               _wait_fix([m for t in sorted(waiting) for m in running.get(t) or ()],
                                         any(t in captured for t in waiting),
                                         _fence_installed(run) if captured else False))
        err.details["result"] = result
        raise err
    return result


def _wait_lowered(run, reservation_id, results):
    """Wait until quota admission no longer grants what this release gave back: admission checks status.hard,
    which the quota controller lowers after spec.hard, and a pod created in between is admitted at the old
    limit. Only then is the fence lifted and the headroom reported gone. Waits up to enforcement.enforce_timeout
    (the outage budget + the controller's relist), re-reading only the quotas still behind; past it, a warning
    names them (the release stands: spec.hard is restored). Returns the seconds waited."""
    restored = {} if run.check_mode else enforcement.restored_hard(results)
    if not restored:
        return 0.0
    timeout = enforcement.enforce_timeout(getattr(run.cluster, "outage_budget", DEFAULT_OUTAGE_BUDGET))
    gaps, waited = enforcement.wait_enforced(run.cluster.get_quota, restored, timeout, run.clock, run.sleep,
                                             behind=enforcement.unlowered)
    if gaps:
        run.warn("reservation '%s' is released but quota admission still grants it %ds later: %s (admission checks "
                 "status.hard, which kube-controller-manager's quota controller lowers after spec.hard; pods created "
                 "until it does are admitted at the old limit); check that kube-controller-manager runs and syncs "
                 "ResourceQuotas" % (reservation_id, int(waited),
                                     "; ".join(enforcement.gaps_text(t, g) for t, g in sorted(gaps.items()))))
    return round(waited, 2)


def _fence_installed(run):
    try:
        return bool(run.fence_installed())
    except KvquotaError:
        return False


def _wait_fix(migrations, captured, fence_installed):
    """The fix of a release that is still waiting: what it waits for ends by itself; a migration can be cancelled
    by name. Never "delete the pods": a source pod is a VM's launcher until its migration completed."""
    parts = []
    if migrations:
        parts.append("wait for migration(s) %s to end, or cancel them by name (kubectl -n <namespace> delete "
                     "virtualmachineinstancemigration <name>)" % ", ".join("%s/%s" % m for m in migrations))
    parts.append("a source pod ends by itself once its migration completed, and the quota controller catches up "
                 "with status.used within seconds: re-run the release later (quotas listed as released are "
                 "already restored)")
    if captured:
        parts.append("the objects named as created during the reservation took its headroom: remove them, and %s "
                     "the headroom fence (ansible-playbook kvquota.maintenance.install)"
                     % ("extend" if fence_installed else "install"))
    return "; ".join(parts)


def _release_expired(service, now, wait_for_pods, timeout, force, poll_interval):
    """The reaper: release every reservation whose expiry is at or before now (default: the clock). Ones that
    cannot be released yet (their migrations or source pods not over) are reported under "deferred", not raised.
    A quota restored below its usage is reported under "overuse"; where its owner refuses that (Harvester), the
    part usage still holds stays as a remainder (ledger.hold_at_usage, expiring at once) listed under
    "held_at_usage", and the next run restores the base once usage dropped. It also finishes
    what interrupted runs left half-written, adopts 0.1.0 ledgers, and deletes ledgers whose quota is gone."""
    clock, check_mode = service.clock, service.check_mode
    when = clock() if now is None else timeutil.parse_time(now)
    run = service._run()
    found, orphans, legacy = _scan(service.cluster, run.warnings, service.operator_namespace)
    by_id = {}
    for target, entry in sorted(found.items()):
        for rid in ledger_mod.expired(entry, when):
            by_id.setdefault(rid, []).append(target)
    results, deferred, released, held, overuse = [], [], [], [], []
    for rid in sorted(by_id):
        outcome = _release(run, ReleaseRequest(rid, wait_for_pods=wait_for_pods, timeout=timeout, force=force,
                                               poll_interval=poll_interval), sorted(by_id[rid]), False)
        results.extend(outcome["quotas"])
        overuse.extend(dict(item, id=rid) for item in outcome.get("overuse") or ())
        for item in outcome["quotas"]:
            if item.get("outcome") == ledger_mod.RELEASED:
                released.append({"id": rid, "namespace": item["namespace"], "quota": item["quota"]})
            elif item.get("outcome") == ledger_mod.HELD_AT_USAGE:
                held.append({"id": rid, "namespace": item["namespace"], "quota": item["quota"],
                             "held": dict(item.get("held") or {}), "held_as": item.get("held_as")})
        for item in outcome["pending"]:
            deferred.append(dict(item, id=rid))
    touched = set((item["namespace"], item["quota"]) for item in results)
    for target in sorted(set(legacy) | set(t for t, entry in found.items() if _unfinished(entry))):
        if target not in touched:
            results.append(_settle_ledger(run, target))
    stale_locks = run.writer.delete_expired_locks(clock())
    gone = set((item["id"], item["namespace"], item["quota"]) for item in released + held)
    # a remainder held at usage (ledger.hold_at_usage) keeps its namespace fenced (nothing new admitted while the
    # quota is above its base): one not released by this run, or held again (same id) or anew (X.held) by it
    active = set(ns for (ns, quota), entry in found.items()
                 if any((rid, ns, quota) not in gone for rid in entry.reservations))
    active.update(item["namespace"] for item in held)
    unfenced = _unfence_idle(run, active)
    removed = []
    for entry, configmap in orphans:
        removed.append({"namespace": entry.namespace, "quota": entry.quota, "uid": entry.uid,
                        "reservations": sorted(entry.reservations), "base": dict(entry.base)})
        run.writer.delete_ledger(configmap)
    return {"changed": any(item["changed"] for item in results + unfenced) or bool(removed) or bool(stale_locks),
            "released": released, "held_at_usage": held, "overuse": overuse,
            "deferred": deferred, "quotas": results, "orphaned_ledgers_removed": removed,
            "expired_locks_removed": stale_locks, "unfenced": unfenced,
            "warnings": list(run.warnings), "diff": _diff(results), "check_mode": check_mode,
            "now": timeutil.format_time(when)}


def _unfence_idle(run, active):
    """Unfence every fenced namespace that holds no active reservation any more (a run killed between its fence
    and its quota write, or a release that could not unfence): a fence must never outlive its headroom. active
    counts a namespace where a remainder is held (ledger.hold_at_usage): it stays fenced until the reaper
    restored its base."""
    if not run.fence_installed():
        return []
    results = []
    for namespace in sorted(set(fence_mod.fences(run.cluster, run.store.namespace)) - set(active)):
        # a run reserving there now fences first, then writes its ledger, under the namespace's lock (a window
        # beside this reaper: the rulebook runs both at once): decide under that lock, on a fresh read
        with run.locked([namespace]):
            if any(entry.namespace == namespace and entry.reservations
                   for entry, _configmap in run.store.list(run.warnings).values()):
                continue
            results.append(fence_mod.unfence(run.cluster, run.store.namespace, namespace, None, run.check_mode))
    return results


def _delete_expired_locks(run, now):
    """Delete the namespace locks of runs that were killed while holding them (expired Leases), each only if
    unchanged since read; returns their names. A live lock is never touched."""
    removed = []
    listed = run.cluster.request("GET", lease_mod.leases_path(run.store.namespace),
                                 what="list leases in namespace %s" % run.store.namespace) or {}
    for lease in listed.get("items") or []:
        meta = lease.get("metadata") or {}
        if not str(meta.get("name", "")).startswith(lease_mod.NAMESPACE_LOCK_PREFIX):
            continue
        if not lease_mod.lease_status(lease, now)["expired"]:
            continue
        try:
            run.cluster.delete(lease_mod.leases_path(run.store.namespace, meta["name"]),
                               "delete lease %s in namespace %s" % (meta["name"], run.store.namespace),
                               resource_version=meta.get("resourceVersion"))
            removed.append(meta["name"])
        except (ConflictError, NotFoundError):
            continue
    return removed


def _settle_interrupted(service, ledgers, namespaces):
    """Finish the writes interrupted runs left half-done on the quotas of ledgers ({(ns, quota): Ledger}, as
    find_ledgers returns them) in namespaces (None: all): a ledger with no reservation left whose quota is not back
    at its base yet (a release killed between its ledger write and its quota write), or one recording a write under
    way. Each is brought in line with its ledger under its namespace's Lease (a dead run's Lease is waited out);
    reservations are neither added nor released. Returns the per-quota results of those that were half-done."""
    targets = sorted(target for target, entry in ledgers.items()
                     if _unfinished(entry) and (namespaces is None or target[0] in namespaces))
    if not targets:
        return []      # the common case: nothing half-done, nothing more read
    run = service._run()
    return [_settle_ledger(run, target) for target in targets]


def _settle_ledger(run, target):
    """Bring one quota in line with its ledger (adopting a 0.1.0 one, finishing an interrupted write), holding
    its namespace's Lease; reservations are neither added nor released."""
    def mutate(state, now):
        return None, {"outcome": "reconciled" if state.changes else "in-sync"}

    with run.locked([target[0]]):
        state, final, info, changed = _transact(run, target, mutate)
    if state.backend.writable:
        _report_changes(run, state)
    return _quota_result(state, final, info, changed)


# ---------------------------------------------------------------------------
# reconcile and inspect

def _reconcile(service, quotas):
    """Re-apply every ledger (or those of quotas=[(ns, quota)]): a revert is re-applied, an administrator's
    change becomes the new base. Returns {changed, quotas, warnings, diff}."""
    run = service._run()
    if quotas is not None:
        targets = sorted(parse_targets(dict((tuple(t) if isinstance(t, list) else t, {}) for t in quotas)))
    else:
        targets = sorted(find_ledgers(service.cluster, run.warnings, service.operator_namespace))

    def mutate(state, now):
        if state.stored is None:
            return None, {"outcome": "no-ledger"}
        return state.ledger, {"outcome": "reconciled" if state.changes else "in-sync"}

    results = []
    for target in targets:
        with run.locked([target[0]]):   # held while waiting for Rancher too: a rewrite found then is adopted
            state, final, info, changed = _transact(run, tuple(target), mutate)
            if not state.backend.writable:
                continue
            _report_changes(run, state)
            results.append(_quota_result(state, final, info, changed))
            if final is not None and state.stored is not None and not is_idle(final):
                run.writer.guard(state, final)
                run.writer.applied(state, final)
    return {"changed": any(item["changed"] for item in results), "quotas": results,
            "warnings": list(run.warnings), "diff": _diff(results), "check_mode": run.check_mode}


def list_reservations(cluster, now=None, clock=time.time, operator_namespace=store_mod.DEFAULT_OPERATOR_NAMESPACE,
                      warnings=None):
    """Every active reservation in the cluster, flat, with an expired flag (for kvquota_check and reports)."""
    when = clock() if now is None else timeutil.parse_time(now)
    rows = []
    for (namespace, quota), entry in sorted(find_ledgers(cluster, warnings, operator_namespace).items()):
        for rid, item in sorted(entry.reservations.items()):
            expires_at = item.expires_at()
            rows.append({"id": rid, "namespace": namespace, "quota": quota, "backend": entry.backend,
                         "owner": item.owner, "reason": item.reason, "created": item.created,
                         "expires": item.expires, "expired": expires_at is not None and expires_at <= when,
                         "delta": dict(item.delta), "refs": dict(item.refs), "base": dict(entry.base),
                         "remainder": item.remainder})
    return rows


__all__ = ["Reservations", "ReserveRequest", "ReleaseRequest", "list_reservations", "find_ledgers", "parse_targets",
           "apply_margin", "admit_migrations", "end_migrations"]
