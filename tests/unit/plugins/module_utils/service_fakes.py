# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-ins for the reservations service in the executor's unit tests: a fake written as
fake(cluster, reservation_id, headroom, owner, reason, ttl_seconds, **kw) for reserve,
fake(cluster, reservation_id, targets, migrations, **kw) for record_migrations, or
fake(cluster, reservation_id, **kw) for release, gets the request's other fields and the service's settings as
keywords (check_mode only when the service is a dry run)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import reservations


def _settings(service):
    settings = dict(lock=service.lock, clock=service.clock, sleep=service.sleep,
                    operator_namespace=service.operator_namespace)
    if service.check_mode:
        settings["check_mode"] = True
    return settings


def patch(monkeypatch, which, fake):
    """Route Reservations.<which> ("reserve", "record_migrations" or "release") to fake."""
    if which == "reserve":
        def reserve(service, request, enforce_timeout=None):
            return fake(service.cluster, request.reservation_id, request.headroom, request.owner, request.reason,
                        request.ttl_seconds, margin=request.margin, top_up=request.top_up, replace=request.replace,
                        refs=request.refs, enforce_timeout=enforce_timeout, **_settings(service))
        monkeypatch.setattr(reservations.Reservations, "reserve", reserve)
    elif which == "record_migrations":
        def record_migrations(service, reservation_id, targets, migrations):
            return fake(service.cluster, reservation_id, targets, migrations, **_settings(service))
        monkeypatch.setattr(reservations.Reservations, "record_migrations", record_migrations)
    elif which == "release":
        def release(service, request):
            return fake(service.cluster, request.reservation_id, wait_for_pods=request.wait_for_pods,
                        timeout=request.timeout, quotas=request.quotas, force=request.force,
                        poll_interval=request.poll_interval, **_settings(service))
        monkeypatch.setattr(reservations.Reservations, "release", release)
    else:
        raise ValueError(which)
