# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Kubernetes watch that keeps going: list, then watch from the list's resourceVersion, and on.

- each watch request asks for bookmarks (allowWatchBookmarks) and ends after WATCH_SECONDS (timeoutSeconds): it is
  resumed from the last resourceVersion seen, a bookmark's included, so nothing is missed and nothing repeated;
- 410 Gone (the resourceVersion is older than etcd keeps: an ERROR event with code 410, or the HTTP status) lists
  again: the consumer gets the whole list (on_resync) and tells what changed meanwhile itself;
- a transient failure (connection refused or reset, a read timeout, 429, 5xx: cluster.transient_kind) reconnects
  with a jittered, doubling backoff (BACKOFF_FIRST to BACKOFF_CAP). Once failures have lasted the outage budget,
  on_outage(seconds, message) is called once, and the loop keeps trying (an always-on source outlives any outage);
  the first success after an outage lists again, as after 410;
- after a transient failure, a 401/403/404 while the API server's /readyz says it is not ready is one more
  transient failure (a kube-apiserver that restarts serves watches before its RBAC caches are filled);
- any other error (403: RBAC; 404: the resource is not served) raises: a configuration to fix, not an outage.

The consumer's on_event(type, object) gets ADDED, MODIFIED and DELETED; BOOKMARK and ERROR are handled here.
stopped() is looked at between events and between attempts. Clock and sleep are injected (tests).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import random
import time

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import KvquotaError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client import cluster as cluster_mod

WATCH_SECONDS = 300          # timeoutSeconds of one watch request: the API server ends it, the loop resumes it
READ_SLACK = 30              # read timeout beyond that: a silent connection is given up and reconnected
PAGE_SIZE = 500
BACKOFF_FIRST = cluster_mod.BACKOFF_FIRST
BACKOFF_CAP = cluster_mod.BACKOFF_CAP


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def list_page(cluster, path, what):
    """(items, resourceVersion) of a full list of path (paged; the resourceVersion of the first page, which every
    page continues). Not retried beyond the cluster's own retries within its outage budget."""
    items, token, version = [], None, None
    while True:
        query = {"limit": PAGE_SIZE}
        if token:
            query["continue"] = token
        page = cluster.request("GET", path, query=query, what=what) or {}
        meta = page.get("metadata") or {}
        if version is None:
            version = meta.get("resourceVersion")
        items.extend(page.get("items") or [])
        token = meta.get("continue")
        if not token:
            return items, version


def watch_events(cluster, path, resource_version):
    """The events ({type, object}) of one watch request of path from resource_version; raises Expired on 410."""
    query = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": str(WATCH_SECONDS)}
    if resource_version:
        query["resourceVersion"] = resource_version
    try:
        for line in cluster.stream_lines(path, query, WATCH_SECONDS + READ_SLACK):
            event = json.loads(line.decode("utf-8") if isinstance(line, bytes) else line)
            if event.get("type") == "ERROR":
                status = event.get("object") or {}
                if status.get("code") == 410:
                    raise Expired(status.get("message") or "410 Gone")
                raise KvquotaError("watch %s: %s" % (path, status.get("message") or status),
                                   "check the collection's RBAC (list and watch) and the API server")
            yield event
    except Exception as exc:  # pylint: disable=broad-except
        if getattr(exc, "status", None) == 410:
            raise Expired(str(exc))
        raise


class WatchLoop(object):
    """Lists and watches one resource path until stopped() (see the module's docstring).

    lister() -> (items, resourceVersion); streamer(resourceVersion) -> iterator of watch events. on_event(type,
    object) for ADDED/MODIFIED/DELETED, on_resync(items) after every list (the first included), on_outage(seconds,
    message) once per outage past outage_budget seconds."""

    def __init__(self, lister, streamer, on_event, on_resync, on_outage=None, outage_budget=60, stopped=None,
                 clock=time.monotonic, sleep=time.sleep, is_transient=None):
        self.lister, self.streamer = lister, streamer
        self.on_event, self.on_resync, self.on_outage = on_event, on_resync, on_outage
        self.outage_budget = outage_budget
        self.stopped = stopped or (lambda: False)
        self.clock, self.sleep = clock, sleep
        self.is_transient = is_transient or _transient
        self.version = None
        self.lists = 0          # how many times it listed (the first, and after every 410 or outage)
        self.watches = 0        # how many watch requests it made

    def run(self):
        failing_since, attempts, told, relist = None, 0, False, True
        while not self.stopped():
            try:
                if relist:
                    items, self.version = self.lister()
                    self.lists += 1
                    relist = False
                    self.on_resync(items)
                self.watches += 1
                for event in self.streamer(self.version):
                    failing_since, attempts, told = None, 0, False
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    version = (obj.get("metadata") or {}).get("resourceVersion")
                    if version:
                        self.version = version
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.on_event(kind, obj)
                    if self.stopped():
                        return
                failing_since, attempts, told = None, 0, False
            except Expired:
                relist = True
            except Exception as exc:  # pylint: disable=broad-except
                if not self.is_transient(exc):
                    raise
                now = self.clock()
                if failing_since is None:
                    failing_since = now
                attempts += 1
                if not told and now - failing_since >= self.outage_budget:
                    told = True
                    relist = True   # what changed during a long outage is read whole once it answers
                    if self.on_outage is not None:
                        self.on_outage(now - failing_since, _message(exc))
                delay = min(BACKOFF_CAP, BACKOFF_FIRST * (2 ** min(attempts - 1, 10))) * (0.5 + random.random() / 2)
                self.sleep(delay)


def _message(exc):
    return getattr(exc, "message", None) or str(exc) or type(exc).__name__


def _transient(exc):
    """Whether exc is a failure a reconnect may cure: the client's and urllib3's request errors that
    cluster.transient_kind calls transient, and a list whose own retries ran out of the outage budget
    (cluster.is_outage; not a TLS or configuration error), and the 401/403/404 of an API server that is coming
    back (cluster.is_starting: after a transient failure, while its /readyz is not ready)."""
    if cluster_mod.is_outage(exc) or cluster_mod.is_starting(exc):
        return True
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if cluster_mod._is_request_error(exc):   # pylint: disable=protected-access
        return cluster_mod.transient_kind(exc, "") is not None
    return False
