# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is a task result a control-plane blip? The roles' kubernetes.core tasks (k8s_info, k8s_drain, k8s) retry it.

The kvquota modules retry inside cluster.Cluster.request, where the exception is at hand. kubernetes.core's
modules give up at the first failure and leave only their result: a msg (an exception turned into text), a
status on some failures, a traceback in module_stderr when the module crashed (a connection refused while
kubernetes' discovery reads /version). This module reads those and says whether the failure is transient
by the same rules as cluster.transient_kind: connection refused or reset, a timeout, 429, 500/502/503/504
are; an answer (400, 401, 403, 404, 409, 422, a TLS verification failure, an unknown host, a 429 of the
Eviction API, which is a PodDisruptionBudget or KubeVirt refusing) is not.

A k8s_info result with api_found false counts too: a restarted API server serves discovery before its CRD
handlers are installed, and k8s_info then "succeeds" with no resources, which would read as "no VMI left".

recovering: a 401, 403 or 404 on a retry of a task that retries nothing but outages (so its previous attempt met
one) counts too - a restarted API server serves requests before its authorizer and CRD caches are filled, and
denies or misses what exists (cluster.py retries these while /readyz says not ready; a task cannot ask /readyz,
so its outage budget bounds them). A first attempt's 401/403/404 is an answer.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client.cluster import (
    STARTUP_STATUSES,
    TLS_PERMANENT_MARKS,
    TRANSIENT_STATUSES,
)

# "(503)\nReason: Service Unavailable" (kubernetes.client ApiException) or "503\nReason: ..." (kubernetes.dynamic)
_STATUS_LINE = re.compile(r"\(?\b([1-5][0-9][0-9])\)?\s*\n?\s*Reason:")
# the HTTP reason phrases kubernetes.core puts in a msg without the code (k8s_drain: "due to: Service Unavailable")
_TRANSIENT_REASONS = ("Too Many Requests", "Internal Server Error", "Bad Gateway", "Service Unavailable",
                      "Gateway Timeout")
# network failures on the way to the API server (urllib3 and socket texts)
_NETWORK_MARKS = ("Connection refused", "Connection reset", "Connection aborted", "RemoteDisconnected",
                  "Remote end closed connection", "timed out", "ConnectTimeoutError", "NewConnectionError",
                  "ProtocolError", "EOF occurred in violation of protocol", "Broken pipe",
                  "Temporary failure in name resolution", "etcdserver: leader changed",
                  "etcdserver: request timed out")
# answers that look like a network failure but are a misconfiguration: never retried
_PERMANENT_MARKS = TLS_PERMANENT_MARKS + (
    "Name or service not known", "nodename nor servname provided", "No address associated")
# k8s_drain's msg for an eviction the API refused ("Failed to delete pod ns/name due to: ...")
_EVICTION_PREFIX = "Failed to delete pod "


def _text(result, error_texts):
    """msg, the crash traceback and the error event's messages of a module result, as one string."""
    parts = [str(text) for text in error_texts if text]
    for key in ("msg", "module_stderr", "module_stdout"):
        value = result.get(key)
        if value:
            parts.append(str(value))
    return "\n".join(parts)


def _status(result, text):
    """The HTTP status the failure names (the result's status, else the first "NNN Reason:" in its text), or None."""
    status = result.get("status")
    if isinstance(status, int) and not isinstance(status, bool) and status >= 100:
        return status
    if isinstance(status, str) and status.isdigit():
        return int(status)
    match = _STATUS_LINE.search(text)
    return int(match.group(1)) if match else None


def _attempts(result):
    try:
        return int(result.get("attempts") or 1)
    except (TypeError, ValueError):
        return 1


def is_api_outage(result, error_texts=(), recovering=False):
    """True when result (a registered task result, a dict) failed for a transient reason worth retrying, or is a
    k8s_info read of a kind the API server does not serve (yet). False for a success and for an answer.

    error_texts: the messages of the error the controller recorded apart from the result (ansible-core 2.19+ keeps
    a module crash as an error event, without msg or module_stderr, until the task is over).
    recovering: the task retries nothing but outages, so a 401/403/404 on its retry is the API server coming back."""
    if not isinstance(result, dict):
        return False
    if not result.get("failed"):
        return result.get("api_found") is False
    text = _text(result, error_texts)
    if any(mark in text for mark in _PERMANENT_MARKS):
        return False
    status = _status(result, text)
    if status is not None:
        if status == 429 and str(result.get("msg", "")).startswith(_EVICTION_PREFIX):
            return False
        if recovering and status in STARTUP_STATUSES and _attempts(result) > 1:
            return True
        return status in TRANSIENT_STATUSES
    if str(result.get("msg", "")).startswith(_EVICTION_PREFIX) and "Too Many Requests" in text:
        return False
    if any(reason in text for reason in _TRANSIENT_REASONS):
        return True
    return any(mark in text for mark in _NETWORK_MARKS)
