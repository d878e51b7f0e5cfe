# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tests' shorthand for one call of the reservations service: a service built from the keywords that are its
settings (lock, facts, clock, sleep, rancher_sync_timeout, operator_namespace, check_mode), asked one request."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations as R

SETTINGS = ("lock", "facts", "clock", "sleep", "rancher_sync_timeout", "operator_namespace", "check_mode")


def _split(options):
    settings = dict((name, options.pop(name)) for name in SETTINGS if name in options)
    return settings, options


def reserve(cluster, reservation_id, headroom, owner, reason, ttl_seconds, **options):
    settings, rest = _split(options)
    enforce_timeout = rest.pop("enforce_timeout", None)
    request = R.ReserveRequest(reservation_id, headroom, owner, reason, ttl_seconds, **rest)
    return R.Reservations(cluster, **settings).reserve(request, enforce_timeout=enforce_timeout)


def release(cluster, reservation_id, **options):
    settings, rest = _split(options)
    return R.Reservations(cluster, **settings).release(R.ReleaseRequest(reservation_id, **rest))


def release_expired(cluster, **options):
    settings, rest = _split(options)
    return R.Reservations(cluster, **settings).release_expired(**rest)


def reconcile(cluster, quotas=None, **options):
    settings, _rest = _split(options)
    return R.Reservations(cluster, **settings).reconcile(quotas)
