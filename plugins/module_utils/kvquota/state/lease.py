# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""coordination.k8s.io/v1 Lease locking per reservation scope.

A lease keeps two jobs (two nodes drained in parallel, an AWX schedule overlapping a manual run) from
planning against the same namespaces at once, and lets a crashed job's lock expire:

- acquire: take the lease when nobody holds it, we hold it already, or the holder's lease expired
  (renewTime + leaseDurationSeconds in the past); otherwise wait (polling) up to wait_timeout, then raise
  LeaseHeldError naming the holder and when its lease expires;
- renew: push renewTime forward while we hold it (LeaseHeldError if someone took it over);
- release: delete it, only if we still hold it (a no-op that says so otherwise).

Writes are conditional (resourceVersion), so two acquirers racing cannot both win. The pure helpers
(lease_status, can_take, acquire_body, ...) take times as Unix seconds.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import contextlib
import copy
import os
import socket
import time

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import (
    api_path,
    conditional_update,
    retry_on_conflict,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    InputError,
    LeaseHeldError,
    NotFoundError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.timeutil import format_time, parse_time

LEASE_API = "coordination.k8s.io/v1"
DEFAULT_DURATION = 300
# The lock of one tenant namespace's quotas is a Lease in the OPERATOR namespace (only the operator can
# create it there; a Lease a tenant creates in its own namespace means nothing to kvquota).
NAMESPACE_LOCK_PREFIX = "kvq-lock-"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kvquota.maintenance"}


def micro_time(seconds):
    """MicroTime text as the API wants it: 2025-01-31T12:00:00.000000Z."""
    whole = int(seconds)
    micros = int(round((seconds - whole) * 1000000))
    if micros >= 1000000:
        whole, micros = whole + 1, 0
    return "%s.%06dZ" % (format_time(whole)[:-1], micros)


def namespace_lock_name(namespace):
    """The Lease (in the operator namespace) that serialises kvquota's writes to one tenant namespace's quotas."""
    return NAMESPACE_LOCK_PREFIX + namespace


def default_holder(environ=None):
    """An identity for this run: AWX job id when there is one, else user@host:pid."""
    env = os.environ if environ is None else environ
    host = socket.gethostname() or "localhost"
    job = env.get("JOB_ID") or env.get("AWX_JOB_ID") or env.get("TOWER_JOB_ID")
    if job:
        return "awx-job-%s@%s" % (job, host)
    user = env.get("USER") or env.get("LOGNAME") or "ansible"
    return "%s@%s:%d" % (user, host, os.getpid())


def _to_seconds(text):
    if not text:
        return None
    return parse_time(text)


def lease_status(lease, now):
    """{holder, acquired, renewed, duration, expires_at (Unix seconds or None), expires (text), expired} of a
    Lease dict; a lease without holder counts as free (expired True)."""
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity") or None
    duration = spec.get("leaseDurationSeconds")
    renewed = _to_seconds(spec.get("renewTime")) or _to_seconds(spec.get("acquireTime"))
    expires_at = renewed + int(duration) if renewed is not None and duration is not None else None
    expired = holder is None or expires_at is None or expires_at <= now
    return {
        "holder": holder,
        "acquired": spec.get("acquireTime"),
        "renewed": spec.get("renewTime"),
        "duration": duration,
        "expires_at": expires_at,
        "expires": format_time(expires_at) if expires_at is not None else None,
        "expired": expired,
        "transitions": spec.get("leaseTransitions") or 0,
    }


def can_take(lease, holder, now):
    """Whether holder may take (or keep) the lease at time now."""
    status = lease_status(lease, now)
    return status["holder"] == holder or status["expired"]


def new_lease(namespace, name, holder, duration, now):
    """The body of a new Lease held by holder."""
    stamp = micro_time(now)
    return {
        "apiVersion": LEASE_API,
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": int(duration), "acquireTime": stamp,
                 "renewTime": stamp, "leaseTransitions": 0},
    }


def acquire_body(existing, holder, duration, now):
    """existing (a Lease dict) taken or renewed by holder at now; keeps resourceVersion for a conditional
    write; a change of holder counts one more leaseTransition."""
    result = copy.deepcopy(existing)
    spec = result.setdefault("spec", {})
    stamp = micro_time(now)
    if spec.get("holderIdentity") != holder:
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if spec.get("holderIdentity") else 0)
        spec["acquireTime"] = stamp
        spec["holderIdentity"] = holder
    spec["renewTime"] = stamp
    spec["leaseDurationSeconds"] = int(duration)
    return result


def held_message(namespace, name, status, now):
    """One line naming who holds the lease and until when."""
    left = max(0, int(status["expires_at"] - now)) if status["expires_at"] is not None else None
    return ("lease %s/%s is held by %s until %s (%s s from now; renewed %s)"
            % (namespace, name, status["holder"], status["expires"], left, status["renewed"] or status["acquired"]))


def leases_path(namespace, name=None):
    return api_path("coordination.k8s.io/v1", "leases", namespace, name)


def acquire(cluster, namespace, name, holder, duration=DEFAULT_DURATION, wait_timeout=0, poll_interval=2.0,
            clock=time.time, sleep=time.sleep, on_wait=None):
    """Take lease namespace/name for holder (see the module docstring). Returns the Lease dict we hold.
    on_wait(message naming the holder) is called once when we start waiting for someone else's lease."""
    if not holder:
        raise InputError("a lease holder identity is required", "give a holder such as the AWX job id")
    if int(duration) <= 0:
        raise InputError("lease duration must be positive, got %r" % (duration,), "give a duration such as 300")
    deadline = clock() + max(0, wait_timeout)
    conflicts = 0
    while True:
        now = clock()
        try:
            current = cluster.get(leases_path(namespace, name), "get lease %s in namespace %s" % (name, namespace))
        except NotFoundError:
            current = None
        try:
            if current is None:
                try:
                    return cluster.create(leases_path(namespace), new_lease(namespace, name, holder, duration, now),
                                          "create lease %s in namespace %s" % (name, namespace))
                except NotFoundError:   # creating in a namespace that does not exist
                    raise NotFoundError("namespace %s does not exist" % namespace,
                                        "check the namespace name with `kubectl get namespaces`")
            if can_take(current, holder, now):
                return cluster.replace(acquire_body(current, holder, duration, now),
                                       "update lease %s in namespace %s" % (name, namespace))
        except ConflictError:
            conflicts += 1  # someone else created or updated it first: look again
            if conflicts > 50:
                raise
            continue
        status = lease_status(current, now)
        if now >= deadline:
            raise LeaseHeldError(held_message(namespace, name, status, now),
                                 "wait for that job to finish and re-run, or raise the wait timeout; a crashed "
                                 "holder's lease can be taken once it expires")
        if on_wait is not None:
            on_wait(held_message(namespace, name, status, now))
            on_wait = None
        wait = min(poll_interval, max(0.0, deadline - now))
        if status["expires_at"] is not None:
            wait = min(wait, max(0.0, status["expires_at"] - now) + 0.05)
        sleep(max(wait, 0.01))


def renew(cluster, lease, holder, duration=None, clock=time.time):
    """Renew a lease we hold (re-read first; again after a conflicting write); LeaseHeldError if another holder
    has it now."""
    meta = lease.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    what = "lease %s in namespace %s" % (name, namespace)

    def compute(current):
        now = clock()
        status = lease_status(current, now)
        if status["holder"] != holder and not status["expired"]:
            raise LeaseHeldError("lost the lease: " + held_message(namespace, name, status, now),
                                 "stop and re-run: another job took over this scope")
        spec_duration = duration or (current.get("spec") or {}).get("leaseDurationSeconds") or DEFAULT_DURATION
        return acquire_body(current, holder, spec_duration, now)

    written, _current = conditional_update(lambda: cluster.get(leases_path(namespace, name), "get " + what), compute,
                                           lambda body: cluster.replace(body, "update " + what), what="renew " + what)
    return written


def release(cluster, namespace, name, holder):
    """Delete the lease if holder holds it (re-read after a conflicting write). Returns {released: bool, message}."""
    def attempt(_number):
        try:
            current = cluster.get(leases_path(namespace, name), "get lease %s in namespace %s" % (name, namespace))
        except NotFoundError:
            return {"released": False,
                    "message": "lease %s/%s does not exist: nothing to release" % (namespace, name)}
        holder_now = ((current.get("spec") or {}).get("holderIdentity"))
        if holder_now != holder:
            return {"released": False,
                    "message": "lease %s/%s is held by %s, not %s: left alone" % (namespace, name, holder_now, holder)}
        try:
            cluster.delete(leases_path(namespace, name), "delete lease %s in namespace %s" % (name, namespace),
                           resource_version=(current.get("metadata") or {}).get("resourceVersion"))
        except NotFoundError:
            pass
        return {"released": True, "message": "lease %s/%s released" % (namespace, name)}
    return retry_on_conflict(attempt, what="release lease %s/%s" % (namespace, name))


@contextlib.contextmanager
def held(cluster, namespace, name, holder, duration=DEFAULT_DURATION, wait_timeout=0, **kwargs):
    """with held(...): the body runs holding the lease, which is released afterwards (also on errors)."""
    acquire(cluster, namespace, name, holder, duration, wait_timeout, **kwargs)
    try:
        yield
    finally:
        release(cluster, namespace, name, holder)


@contextlib.contextmanager
def held_many(cluster, scopes, holder, duration=DEFAULT_DURATION, wait_timeout=0, **kwargs):
    """Hold several leases [(namespace, name)], taken in sorted order (no deadlock between two jobs)."""
    taken = []
    try:
        for namespace, name in sorted(set(scopes)):
            acquire(cluster, namespace, name, holder, duration, wait_timeout, **kwargs)
            taken.append((namespace, name))
        yield taken
    finally:
        for namespace, name in reversed(taken):
            try:
                release(cluster, namespace, name, holder)
            except Exception:  # pylint: disable=broad-except
                pass
