# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""API access on the official `kubernetes` client: raw reads and conditional writes, one clear error.

A Cluster wraps a ready kubernetes ApiClient. Auth (kubeconfig, context, host/api_key, in-cluster,
K8S_AUTH_* variables, proxy, impersonation) is kubernetes.core's: the module layer
(module_utils/kvquota_module.connect) configures the client and hands it here, so the core has no
Ansible imports.

Every request, read or write, goes through Cluster.request (raw JSON dicts in and out, so no typed-model
conversion can alter an object on its way back; the paths are built here: api_path, custom_path, object_path;
lists page by PAGE_SIZE objects with list_items). Each HTTP attempt (Cluster._send) carries the client's default
headers (impersonation) and is counted in Cluster.request_count. A request rides through control-plane blips: a
transient failure (connection refused or reset, a timeout, 429, 500/502/503/504) is retried with jittered
exponential backoff, honouring Retry-After, until the outage budget (seconds since the request's first failure)
runs out; nothing else is retried, but for the 401/403/404 an API server that is coming back gives before its
/readyz says it is ready.
docs/reliability.md states what a retried write can and cannot do.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import contextlib
import inspect
import json
import random
import re
import socket
import threading
import time

from urllib.parse import quote, urlencode

try:
    from kubernetes.client.rest import ApiException
except ImportError:  # handled at connect time (kvquota_module.connect)
    ApiException = None

try:
    import urllib3
    HAS_URLLIB3 = True
except ImportError:  # comes with kubernetes
    urllib3 = None
    HAS_URLLIB3 = False

# a header dict that can repeat a header (Impersonate-Group needs that): urllib3 2 exports it, urllib3 1 hides it
HTTPHeaderDict = getattr(urllib3, "HTTPHeaderDict", None)
if HAS_URLLIB3 and HTTPHeaderDict is None:  # urllib3 < 2
    from urllib3._collections import HTTPHeaderDict

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
    KvquotaError,
    NotFoundError,
    UnreachableError,
)

RBAC_FIX = ("bind the collection's roles (kvquota-read, kvquota-write, kvquota-state) to this identity with the "
            "install playbook (as an administrator): ansible-playbook kvquota.maintenance.install "
            "-e kvquota_subject_kind=ServiceAccount -e kvquota_subject_name=<name> "
            "-e kvquota_subject_namespace=<namespace> (kvquota_bind_rancher=true on Rancher, "
            "kvquota_bind_shutdown=true for the shutdown policy)")
TLS_FIX = ("give the API server's CA with ca_cert (K8S_AUTH_SSL_CA_CERT) or in the kubeconfig "
           "(certificate-authority-data); set validate_certs: false only for a throw-away lab")
DEFAULT_TIMEOUT = (10, 60)
DEFAULT_OUTAGE_BUDGET = 60
# objects per list page (limit/continue), kubectl's default chunk size: a whole-cluster read fetches the same pages
PAGE_SIZE = 500
# jittered exponential backoff between attempts: first ~0.5 s, doubling, each wait at most 8 s
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 8.0
TRANSIENT_STATUSES = (429, 500, 502, 503, 504)
# answers an API server gives while it starts (authorizer caches empty, CRD handlers not installed yet): retried
# only after this Cluster saw a transient failure and while /readyz says the server is not ready
STARTUP_STATUSES = (401, 403, 404)
COMPONENT = "kvquota.maintenance"


def _one_line(err):
    return " ".join(str(err).split())


# ---------------------------------------------------------------------------
# errors

def _api_message(exc):
    body = getattr(exc, "body", None)
    if body:
        try:
            data = json.loads(body)
            if isinstance(data, dict) and data.get("message"):
                return str(data["message"])
        except (ValueError, TypeError):
            pass
        return _one_line(body)[:400]
    return _one_line(getattr(exc, "reason", "") or exc)


def _is_tls(text):
    text = str(text)
    return any(mark in text for mark in ("CERTIFICATE_VERIFY_FAILED", "SSLError", "SSL:", "certificate verify",
                                         "hostname", "WRONG_VERSION_NUMBER"))


def map_error(exc, what, host=None):
    """The one clear KvquotaError for a failed request (ApiException, urllib3 or socket error)."""
    host = host or _pool_address(exc)
    where = " (API server %s)" % host if host else ""
    status = getattr(exc, "status", None)
    if ApiException is not None and isinstance(exc, ApiException) or status is not None and hasattr(exc, "reason"):
        message = _api_message(exc)
        if not status:
            if _is_tls(exc.reason or message):
                return UnreachableError("TLS verification failed while trying to %s%s: %s" % (what, where, message),
                                        TLS_FIX)
            return UnreachableError("cannot %s%s: %s" % (what, where, message),
                                    "check host/kubeconfig and that the API server is up and reachable")
        if status == 401:
            return ForbiddenError("the API server refused the credentials (401 Unauthorized) while trying to %s%s"
                                  % (what, where),
                                  "check the token or client certificate (expired? wrong cluster?) in the kubeconfig, "
                                  "api_key or K8S_AUTH_API_KEY")
        if status == 403:
            if "admission webhook" in message or "denied the request" in message:
                return KvquotaError("an admission webhook refused to %s: %s" % (what, message),
                                    "read the webhook's message; for Rancher/Harvester-managed quotas change the "
                                    "limit in Rancher or wait until the migrations it names are over")
            if "ValidatingAdmissionPolicy" in message and "denied request" in message:
                # not RBAC: a policy (the headroom fence, Rancher 2.14+'s quota lock-down, a platform's own)
                # refused this request for what it is, so binding more roles would not help
                return KvquotaError("an admission policy refused to %s: %s" % (what, message),
                                    "read the policy's message; a Rancher-managed quota is changed through its "
                                    "namespace's Rancher limit, never written directly")
            return ForbiddenError("forbidden: cannot %s%s (%s)" % (what, where, message), RBAC_FIX)
        if status == 404:
            return NotFoundError("cannot %s: not found (%s)" % (what, message),
                                 "check the name and namespace (kubectl get)")
        if status == 409:
            return ConflictError("conflict while trying to %s: %s" % (what, message),
                                 "re-run: kvquota re-reads and recomputes from the ledger")
        if status in (400, 422):
            return InputError("the API server refused to %s: %s" % (what, message),
                              "fix the value it names; nothing else was changed by this request")
        if status == 429 or status >= 500:
            # details.status: a 429 can also be an answer (an eviction refused by a PodDisruptionBudget)
            return UnreachableError("the API server answered %s while trying to %s%s: %s"
                                    % (status, what, where, message),
                                    "retry later; check the control plane's health (kubectl get --raw /readyz)",
                                    details={"status": status})
        return KvquotaError("the API server answered %s while trying to %s: %s" % (status, what, message))
    text = _short_reason(exc)
    if _is_tls(_one_line(exc)) or (HAS_URLLIB3 and _has_cause(exc, urllib3.exceptions.SSLError)):
        return UnreachableError("TLS verification failed while trying to %s%s: %s" % (what, where, text), TLS_FIX)
    if isinstance(exc, (socket.timeout,)) or "timed out" in text.lower() or "Timeout" in type(exc).__name__:
        return UnreachableError("timed out trying to %s%s" % (what, where),
                                "check that host is right and reachable from here (VPN, firewall, proxy/no_proxy)")
    return UnreachableError("cannot reach the API server to %s%s: %s" % (what, where, text),
                            "check host/kubeconfig, the network (VPN, firewall, proxy/no_proxy) and that the "
                            "cluster is up")


def _pool_address(exc):
    """The server a urllib3 error was about (its connection pool's scheme://host:port), or None."""
    for cause in _causes(exc):
        pool = getattr(cause, "pool", None)
        if getattr(pool, "host", None):
            return "%s://%s%s" % (pool.scheme, pool.host, ":%s" % pool.port if pool.port else "")
    return None


def _short_reason(exc):
    """The innermost cause of a urllib3/socket error, without the connection-pool noise."""
    seen = 0
    while seen < 8 and not isinstance(getattr(exc, "reason", None), (str, type(None))):
        exc = exc.reason
        seen += 1
    text = _one_line(exc)
    for mark in ("[Errno", "[SSL", "certificate verify failed"):
        if mark in text:
            text = text[text.index(mark):]
            break
    text = text.strip().rstrip("'\"")
    while text.endswith(")") and text.count(")") > text.count("("):
        text = text[:-1].rstrip("'\"")
    return text[:300]


def _has_cause(exc, kind):
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, kind) or isinstance(getattr(exc, "reason", None), kind):
            return True
        exc = getattr(exc, "reason", None) if not isinstance(getattr(exc, "reason", None), str) else None
        seen += 1
    return False


_NETWORK_ERRORS = (socket.error, OSError)

# What a transient failure says about the request that failed: NOT_SENT when the API server cannot have acted on
# it (no connection was made, or it was turned away before being handled: 429), MAYBE_APPLIED when it may have
# (the connection broke or timed out after the request was sent, or a 5xx came back, e.g. an etcd timeout).
NOT_SENT = "not sent"
MAYBE_APPLIED = "maybe applied"
# TLS failures that no retry can cure: a wrong CA or host name (ssl's CERTIFICATE_VERIFY_FAILED, "Hostname
# mismatch" inside it; urllib3's own match_hostname says "hostname '...' doesn't match"), plain HTTP on the port.
# outage.py reads kubernetes.core results by the same marks.
TLS_PERMANENT_MARKS = ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed", "Hostname mismatch",
                       "doesn't match", "WRONG_VERSION_NUMBER")


def _causes(exc):
    """exc and the errors it wraps (urllib3 keeps the cause in .reason, Python in __cause__/__context__)."""
    seen = []
    while exc is not None and len(seen) < 8 and not isinstance(exc, str):
        seen.append(exc)
        reason = getattr(exc, "reason", None)
        exc = reason if isinstance(reason, BaseException) else (exc.__cause__ or exc.__context__)
    return seen


def retry_after_seconds(exc):
    """The Retry-After of an API answer in seconds (header, else the Status' details.retryAfterSeconds), or None."""
    headers = getattr(exc, "headers", None) or {}
    try:
        value = headers.get("Retry-After") or headers.get("retry-after")
    except AttributeError:
        value = None
    if value is not None:
        try:
            return max(0.0, float(str(value).strip()))
        except ValueError:
            pass   # an HTTP date: the API server never sends one; fall back to the backoff
    body = getattr(exc, "body", None)
    if body:
        try:
            details = (json.loads(body) or {}).get("details") or {}
            if details.get("retryAfterSeconds") is not None:
                return max(0.0, float(details["retryAfterSeconds"]))
        except (ValueError, TypeError, AttributeError):
            pass
    return None


def transient_kind(exc, path=""):
    """NOT_SENT or MAYBE_APPLIED when exc (an ApiException, urllib3 or socket error) is a transient failure worth
    retrying, None when it is an answer (400/401/403/404/409/422, a TLS misconfiguration, an unknown host).

    A 429 from the Eviction API is an answer, not load shedding (a PodDisruptionBudget or KubeVirt's webhook
    refusing the eviction): drain.py waits for it with its own timeout, so it is not retried here."""
    status = getattr(exc, "status", None)
    if status:
        if status not in TRANSIENT_STATUSES:
            return None
        if status == 429:
            return None if str(path).rstrip("/").endswith("/eviction") else NOT_SENT
        return MAYBE_APPLIED
    text = _one_line(exc)
    if any(mark in text for mark in TLS_PERMANENT_MARKS):
        return None
    causes = _causes(exc)
    for cause in causes:
        if isinstance(cause, socket.gaierror):
            # a name that does not resolve is a wrong host, unless the resolver itself said "try again"
            return NOT_SENT if getattr(cause, "errno", None) == getattr(socket, "EAI_AGAIN", -3) else None
    for cause in causes:
        if isinstance(cause, ConnectionRefusedError) or "Connection refused" in _one_line(cause):
            return NOT_SENT
        if HAS_URLLIB3 and isinstance(cause, (urllib3.exceptions.NewConnectionError,
                                              urllib3.exceptions.ConnectTimeoutError)):
            return NOT_SENT
    if ApiException is not None and isinstance(exc, ApiException) and not _is_tls(text):
        return None   # status 0 without a network cause: nothing known to retry
    return MAYBE_APPLIED


def _q(text):
    return quote(str(text), safe="")


# ---------------------------------------------------------------------------
# the cluster


def kubernetes_minor_of(version):
    """The minor release of a GET /version answer: its "minor" ("37", or "37+" on some providers), else the second
    number of its gitVersion ("v1.37.2-eks-..."); None for anything else. Only major 1 is known."""
    if not isinstance(version, dict) or str(version.get("major") or "1").rstrip("+") != "1":
        return None
    for text, pattern in ((version.get("minor"), r"(\d+)\+?$"), (version.get("gitVersion"), r"v?1\.(\d+)\.")):
        found = re.match(pattern, text) if isinstance(text, str) else None
        if found:
            return int(found.group(1))
    return None


class Cluster(object):
    """One API connection: raw JSON requests (request), and helpers built on it."""

    def __init__(self, api_client, timeout=DEFAULT_TIMEOUT, outage_budget=DEFAULT_OUTAGE_BUDGET, sleep=time.sleep,
                 clock=time.monotonic):
        """api_client: a ready kubernetes ApiClient; its default headers (kubernetes.core puts impersonation there,
        a repeated header under several keys) go with every request."""
        if isinstance(outage_budget, bool) or not isinstance(outage_budget, (int, float)) or outage_budget < 0:
            raise InputError("api_outage_budget must be a number of seconds >= 0, not %r" % (outage_budget,),
                             "give e.g. api_outage_budget: 60 (0 turns retries off)")
        self.outage_budget = outage_budget
        self.sleep = sleep
        self.clock = clock
        # set by a transient failure, cleared by a ready /readyz: an API server coming back serves requests
        # before its caches are filled (RBAC denies, CRDs are not found), which are no answers yet
        self._recovering = False
        self._failed_at = None   # when a request or watch last failed transiently
        self.api_client = None
        self.configuration = None
        self.host = None
        if api_client is not None:
            self._attach(api_client)
        self.timeout = timeout
        self._count = 0
        self._count_lock = threading.Lock()
        self._facts = None
        self._groups = None
        self._resources = {}
        # GET /version of the API server as the connection's discovery read it ({major, minor, gitVersion, ...});
        # None: not known (the quota rules then follow Kubernetes 1.33 to 1.36, see quotas.pod_requests_limits)
        self.server_version = None

    @property
    def kubernetes_minor(self):
        """The API server's Kubernetes minor release (37 for 1.37), or None when not known."""
        return kubernetes_minor_of(self.server_version)

    def _attach(self, api_client):
        self.api_client = api_client
        self.configuration = api_client.configuration
        self.host = self.configuration.host

    @classmethod
    def open(cls, open_api_client, timeout=DEFAULT_TIMEOUT, outage_budget=DEFAULT_OUTAGE_BUDGET, sleep=time.sleep,
             clock=time.monotonic):
        """A Cluster on the ApiClient open_api_client() returns, for a client that makes requests while it opens
        (kubernetes.core's get_api_client discovers the API: /version, /apis). Those requests ride through
        blips within the outage budget like any GET, and each attempt ends after the timeout (connect + read): the
        discovery sets no timeout of its own, so an API server that accepts connections and never answers would
        hold the run forever. An attempt still running then is left behind on a daemon thread."""
        cluster = cls(None, timeout=timeout, outage_budget=outage_budget, sleep=sleep, clock=clock)
        seconds = sum(timeout) if isinstance(timeout, (tuple, list)) else timeout
        cluster._attach(cluster._with_retries(lambda: _within(seconds, open_api_client), "GET", "/version",
                                              "discover the API (/version, /apis)"))
        return cluster

    # -- plumbing --------------------------------------------------------

    @property
    def request_count(self):
        """How many HTTP requests this Cluster has sent (for the benchmark)."""
        return self._count

    def request(self, method, path, body=None, query=None, content_type=None, what=None):
        """One HTTP request with raw JSON in and out; returns the decoded body (or None). Transient failures are
        retried within the outage budget (see _with_retries)."""
        what = what or "%s %s" % (method, path)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        query = [(k, v) for k, v in (query or {}).items() if v is not None] if isinstance(query, dict) \
            else list(query or [])
        # a POST with generateName names a new object each time: repeated after a lost answer it could create two
        creates_new_name = method == "POST" and bool(((body or {}).get("metadata") or {}).get("generateName")
                                                     if isinstance(body, dict) else False)
        data = self._with_retries(lambda: self._send(method, path, body, query, headers), method, path, what,
                                  repeatable=not creates_new_name)
        if not data:
            return None
        if isinstance(data, bytes):
            data = data.decode("utf-8")
        return json.loads(data)

    def _send(self, method, path, body, query, headers):
        """One HTTP attempt, counted, with the client's default headers (impersonation): the raw response body, or
        the client's exception.

        One path for every supported kubernetes client (24.2 and later): the request is assembled from the
        client's public parts (its default headers and cookie, the configuration's host and auth_settings(), which
        also refreshes an expiring token) and sent through its REST client, whose request() both generators of the
        client share (method, url, headers, body, _request_timeout). Its ApiClient.call_api would turn the headers
        into a plain dict, losing a repeated Impersonate-Group."""
        with self._count_lock:   # read_inventory lists the pods on a second thread
            self._count += 1
        client = self.api_client
        url = self.configuration.host + path + ("?" + urlencode(query) if query else "")
        response = client.rest_client.request(method, url, headers=self._header_params(headers), body=body,
                                              _request_timeout=self.timeout)
        # before kubernetes 37 the REST client read the body itself and raised on a status outside 2xx; from 37 the
        # body is read here, before the exception is built from it (the API server's message names who was refused)
        data = response.read() if callable(getattr(response, "read", None)) else response.data
        if not 200 <= response.status <= 299:
            raise ApiException(http_resp=response)
        return data

    def _header_params(self, headers):
        """The headers of one request: the client's default headers (a repeated Impersonate-Group kept), its
        cookie, the configuration's bearer token (refreshed when it expires), then headers."""
        client = self.api_client
        header_params = HTTPHeaderDict()
        for name, value in client.default_headers.items():
            header_params.add(str(name), value)
        for name, value in headers.items():
            header_params[name] = value
        if client.cookie:
            header_params["Cookie"] = client.cookie
        bearer = self.configuration.auth_settings().get("BearerToken") or {}
        if bearer.get("value"):
            header_params[bearer["key"]] = bearer["value"]
        return header_params

    def stream_lines(self, path, query, read_timeout):
        """One streaming GET (a watch): yields each line of the response body as the API server sends it (bytes),
        until the server ends it; read_timeout: seconds without a byte before the read fails (the caller
        reconnects). Not retried here: a watch resumes from its last resourceVersion (client/watch.py). An HTTP
        error status raises the client's ApiException, as _send does."""
        with self._count_lock:
            self._count += 1
        client = self.api_client
        url = self.configuration.host + path + ("?" + urlencode(query) if query else "")
        timeout = (self.timeout[0] if isinstance(self.timeout, (tuple, list)) else self.timeout, read_timeout)
        kwargs = {"headers": self._header_params({"Accept": "application/json"}), "_request_timeout": timeout}
        # kubernetes 24 to 36 read the whole body unless told not to; 37 never reads it and wraps the response
        if "_preload_content" in inspect.signature(client.rest_client.request).parameters:
            kwargs["_preload_content"] = False
        try:
            response = client.rest_client.request("GET", url, **kwargs)
        except Exception as exc:  # pylint: disable=broad-except
            self._note_failure(exc, path)
            raise
        raw = getattr(response, "response", response)
        try:
            if not 200 <= raw.status <= 299:
                if callable(getattr(response, "read", None)):
                    response.read()
                error = ApiException(http_resp=response)
                if self._starting_answer(error):
                    # the watch of an API server that is coming back: its RBAC caches are not filled yet
                    raise UnreachableError(
                        "the API server answered %s while it starts (its /readyz is not ready yet) for %s"
                        % (error.status, path), "wait: the watch reconnects",
                        details={"status": error.status, "starting": True})
                raise error
            pending = b""
            for chunk in raw.stream(65536, decode_content=True):
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if line.strip():
                        yield line
            if pending.strip():
                yield pending
        except Exception as exc:  # pylint: disable=broad-except
            self._note_failure(exc, path)
            raise
        finally:
            raw.release_conn()

    def _note_failure(self, exc, path):
        """transient_kind(exc, path), remembering a transient failure: what the API server answers next may be
        an answer of one that is starting (STARTUP_STATUSES), asked of its /readyz before it is believed, for at
        most the outage budget after this failure (a token revoked for good, whose /readyz is refused too, ends
        the watch then)."""
        kind = transient_kind(exc, path) if _is_request_error(exc) else None
        if kind is not None:
            self._recovering, self._failed_at = True, self.clock()
        return kind

    def _with_retries(self, attempt, method, path, what, repeatable=True):
        """attempt() until it succeeds, fails for good, or the outage budget runs out.

        The budget counts from this request's first transient failure; waits are jittered and exponential
        (BACKOFF_FIRST doubling up to BACKOFF_CAP), at least the API server's Retry-After, never past the budget.
        A write that failed after it may have reached the API server (MAYBE_APPLIED) is repeated only when that
        is safe: every PUT/DELETE of the core is conditional on resourceVersion or uid, and a POST with a fixed
        name cannot create twice. Its later 409 (or a DELETE's 404) is then no proof that someone else wrote:
        the error says so (details maybe_applied) and the caller re-reads, as after any conflict."""
        first_failure = None
        attempts = 0
        maybe_applied = False
        failed_itself = False   # this request itself failed transiently (not only met doubted answers)
        while True:
            attempts += 1
            try:
                return attempt()
            except KvquotaError:
                raise
            except Exception as exc:  # pylint: disable=broad-except
                if not _is_request_error(exc):
                    raise
                error = map_error(exc, what, self.host)
                kind = self._note_failure(exc, path)
                failed_itself = failed_itself or kind is not None
                if kind is None and self._starting_answer(exc, retrying=failed_itself):
                    # not a failure of its own: it does not extend how long such answers are doubted
                    kind = NOT_SENT
                if kind is None:
                    if maybe_applied and (isinstance(error, ConflictError) or
                                          method == "DELETE" and isinstance(error, NotFoundError)):
                        raise type(error)(
                            "%s (an earlier attempt of this request lost its answer and may have done it)"
                            % error.message, error.fix, details=dict(error.details, maybe_applied=True))
                    raise error
                now = self.clock()
                if first_failure is None:
                    first_failure = now
                if method != "GET" and kind == MAYBE_APPLIED:
                    if not repeatable:
                        raise type(error)("%s (not repeated: it may have been applied, and a repeat would create "
                                          "a second object)" % error.message, error.fix,
                                          details=dict(error.details, maybe_applied=True))
                    maybe_applied = True
                if not self.outage_budget:
                    raise error   # retries turned off
                remaining = self.outage_budget - (now - first_failure)
                if remaining <= 0:
                    raise self._outage_error(error, what, now - first_failure, attempts, maybe_applied)
                delay = min(BACKOFF_CAP, BACKOFF_FIRST * (2 ** min(attempts - 1, 10))) * (0.5 + random.random() / 2)
                retry_after = retry_after_seconds(exc)
                if retry_after is not None:
                    delay = max(delay, retry_after)
                self.sleep(min(delay, remaining))

    def _starting_answer(self, exc, retrying=False):
        """Whether exc (a 401/403/404) is, as far as can be told, the answer of an API server that is starting:
        doubted (_maybe_starting, or retrying: a request that itself failed transiently and is retrying through that
        outage, whose own budget bounds how long it doubts, so that it ends as that outage, naming the refusal last,
        whatever the jitter of its waits; a request that only met doubted answers is bounded by _maybe_starting, so a
        revoked token is believed within the outage budget of the last failure), and its /readyz is not ready."""
        return getattr(exc, "status", None) in STARTUP_STATUSES and (retrying or self._maybe_starting()) and \
            not self._ready()

    def _maybe_starting(self):
        """Whether a 401/403/404 may still be the answer of an API server that is starting: after a transient
        failure, for at most the outage budget since the last one (a refusal that lasts, say of a token revoked
        for good whose /readyz is refused too, is believed then)."""
        return self._recovering and self._failed_at is not None and \
            self.clock() - self._failed_at <= self.outage_budget

    def _ready(self):
        """Whether the API server says it is ready (GET /readyz, one attempt); clears the recovering state."""
        if self.api_client is None:
            return False   # still opening (Cluster.open): its discovery is retried until the budget runs out
        try:
            self._send("GET", "/readyz", None, [], {"Accept": "text/plain"})
        except Exception as exc:  # pylint: disable=broad-except
            if _is_request_error(exc):
                return False
            raise
        self._recovering = False
        return True

    def _outage_error(self, error, what, duration, attempts, maybe_applied):
        details = dict(error.details, outage_seconds=round(duration, 1), attempts=attempts,
                       outage_budget=self.outage_budget)
        if maybe_applied:
            details["maybe_applied"] = True
        return UnreachableError(
            "the API server%s did not answer usably for %.0f s (api_outage_budget %s s, %d attempts) while "
            "trying to %s; the last failure: %s%s" % (
                " " + self.host if self.host else "", duration, self.outage_budget, attempts, what, error.message,
                "; a write attempt may have been applied (a re-run re-reads it)" if maybe_applied else ""),
            "re-run once the control plane answers again (kubectl get --raw /readyz); raise api_outage_budget "
            "(seconds) to ride through longer outages",
            details=details)

    # -- generic object access -------------------------------------------

    def get(self, path, what):
        return self.request("GET", path, what=what)

    def exists(self, path, what):
        try:
            return self.get(path, what)
        except NotFoundError:
            return None

    def create(self, path, body, what):
        return self.request("POST", path, body=body, what=what)

    def replace(self, obj, what=None):
        """PUT obj back; conditional on its metadata.resourceVersion (409 -> ConflictError)."""
        meta = obj.get("metadata") or {}
        if not meta.get("resourceVersion"):
            raise InputError("refusing an unconditional write of %s %s" % (obj.get("kind"), _describe_name(meta)),
                             "read the object first")
        plural, _namespaced = self.resource(obj.get("apiVersion") or "v1", obj.get("kind"))
        return self.request("PUT", self.object_path(obj), body=obj,
                            what=what or "update %s %s" % (plural, _describe_name(meta)))

    # -- discovery -------------------------------------------------------

    def resource(self, api_version, kind):
        """(plural, namespaced) of kind in api_version, from the API server's resource list of that group/version:
        one request per group/version, kept for this Cluster's life (a module run). Never guessed from the kind."""
        if api_version not in self._resources:
            listing = self.request("GET", _group_version_path(api_version),
                                   what="discover the resources of %s" % api_version) or {}
            self._resources[api_version] = dict(
                (item.get("kind"), (item.get("name"), bool(item.get("namespaced"))))
                for item in listing.get("resources") or [] if "/" not in (item.get("name") or ""))
        found = self._resources[api_version].get(kind)
        if found is None:
            raise InputError("the API server serves no kind %s in %s" % (kind, api_version),
                             "check apiVersion and kind (kubectl api-resources --api-group=%s)"
                             % (api_version.split("/")[0] if "/" in api_version else "''"))
        return found

    def object_path(self, obj):
        """The API path of an object dict (apiVersion, kind, metadata.name and, when namespaced, namespace)."""
        meta = obj.get("metadata") or {}
        api_version = obj.get("apiVersion") or "v1"
        plural, namespaced = self.resource(api_version, obj.get("kind"))
        path = _group_version_path(api_version)
        if namespaced:
            path += "/namespaces/%s" % _q(meta.get("namespace"))
        return "%s/%s/%s" % (path, plural, _q(meta.get("name")))

    def delete(self, path, what, resource_version=None):
        body = None
        if resource_version:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": resource_version}}
        return self.request("DELETE", path, body=body, what=what)

    # -- helpers (raw dicts) ---------------------------------------------

    def get_namespace(self, name):
        return self.get(api_path("v1", "namespaces", name=name), "get namespace %s" % name)

    def list_namespaces(self, label_selector=None):
        return list_items(self, api_path("v1", "namespaces"), {"labelSelector": label_selector}, "list namespaces")

    def get_quota(self, namespace, name):
        return self.get(api_path("v1", "resourcequotas", namespace, name),
                        "get resourcequota %s in namespace %s" % (name, namespace))

    def list_quotas(self, namespace=None):
        what = "list resourcequotas in namespace %s" % namespace if namespace else "list resourcequotas in all namespaces"
        return list_items(self, api_path("v1", "resourcequotas", namespace), None, what)

    def get_pod(self, namespace, name):
        return self.get(api_path("v1", "pods", namespace, name), "get pod %s in namespace %s" % (name, namespace))

    def list_pods(self, namespace=None, label_selector=None, field_selector=None):
        return list_items(self, api_path("v1", "pods", namespace),
                          {"labelSelector": label_selector, "fieldSelector": field_selector},
                          "list pods in namespace %s" % namespace if namespace else "list pods")

    def get_custom(self, group, version, plural, name, namespace=None):
        path = custom_path(group, version, plural, namespace, name)
        where = " in namespace %s" % namespace if namespace else ""
        return self.get(path, "get %s.%s %s%s" % (plural, group, name, where))

    def list_custom(self, group, version, plural, namespace=None, label_selector=None):
        where = " in namespace %s" % namespace if namespace else ""
        return list_items(self, custom_path(group, version, plural, namespace), {"labelSelector": label_selector},
                          "list %s.%s%s" % (plural, group, where))

    def create_event(self, involved, reason, message, event_type="Normal", action="Update", namespace=None):
        """Create a core/v1 Event about involved (a dict with apiVersion, kind, metadata); returns it."""
        meta = involved.get("metadata") or {}
        ns = namespace or meta.get("namespace")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        instance = (socket.gethostname() or "kvquota")[:128]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "%s.kvquota-" % meta.get("name"), "namespace": ns,
                         "labels": {"app.kubernetes.io/managed-by": COMPONENT}},
            "involvedObject": {"apiVersion": involved.get("apiVersion", "v1"), "kind": involved.get("kind"),
                               "name": meta.get("name"), "namespace": ns, "uid": meta.get("uid")},
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "action": action,
            "source": {"component": COMPONENT, "host": instance},
            "reportingComponent": COMPONENT,
            "reportingInstance": instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        return self.create(api_path("v1", "events", ns), body,
                           "create events in namespace %s" % ns)

    def api_groups(self):
        """{group name: [group/version, ...]} from discovery (one request per connection: the inventory and the
        cluster facts share it)."""
        if self._groups is None:
            data = self.request("GET", "/apis", what="discover API groups") or {}
            self._groups = dict((group.get("name"), [v.get("groupVersion") for v in group.get("versions") or []])
                                for group in data.get("groups") or [])
        return dict(self._groups)

    def facts(self, refresh=False, harvester_settings=None):
        """What kind of cluster this is, for owners.registry.owner_of: harvester, harvester_version, rancher_projects,
        aaq, kubevirt (bools) — from discovery, plus Harvester's server-version setting when present (taken from
        harvester_settings, {name: setting}, when the caller listed them: no request then). The one place they are
        told: the inventory records them for the check and the plan (Snapshot.cluster_facts), the reservations
        service asks here; the first answer of a connection is kept."""
        if self._facts is not None and not refresh:
            return dict(self._facts)
        groups = self.api_groups()
        facts = {
            "harvester": "harvesterhci.io" in groups,
            "harvester_version": None,
            "rancher_projects": "management.cattle.io" in groups,
            "aaq": "aaq.kubevirt.io" in groups,
            "kubevirt": "kubevirt.io" in groups,
        }
        if facts["harvester"] and harvester_settings is not None:
            # the settings API alone is no Harvester (a CRD left behind, a lab): every Harvester has server-version
            server = harvester_settings.get("server-version")
            facts["harvester"] = server is not None
            facts["harvester_version"] = (server or {}).get("value") or (server or {}).get("default")
        elif facts["harvester"]:
            try:
                setting = self.get_custom("harvesterhci.io", "v1beta1", "settings", "server-version")
                facts["harvester_version"] = setting.get("value") or setting.get("default")
            except NotFoundError:
                facts["harvester"] = False
            except ForbiddenError:
                pass
        self._facts = facts
        return dict(facts)


def _within(seconds, call):
    """call() on a daemon thread: its result or its exception, or socket.timeout when it runs longer than seconds
    (it is left behind: a module's process ends soon after)."""
    outcome = {}

    def run():
        try:
            outcome["result"] = call()
        except BaseException as exc:  # pylint: disable=broad-except
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="kvquota-connect", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise socket.timeout("timed out after %s s" % seconds)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _is_request_error(exc):
    if ApiException is not None and isinstance(exc, ApiException):
        return True
    if HAS_URLLIB3 and isinstance(exc, urllib3.exceptions.HTTPError):
        return True
    return isinstance(exc, _NETWORK_ERRORS)


def api_path(api_version, plural, namespace=None, name=None):
    """The path of a resource (a list without name, an object with it): /api/v1/... for the core group,
    /apis/<group>/<version>/... for the others, [/namespaces/<ns>]/<plural>[/<name>]."""
    path = _group_version_path(api_version)
    if namespace:
        path += "/namespaces/%s" % _q(namespace)
    path += "/%s" % plural
    if name:
        path += "/%s" % _q(name)
    return path


def custom_path(group, version, plural, namespace=None, name=None):
    """/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>]."""
    return api_path("%s/%s" % (group, version), plural, namespace, name)


def list_items(cluster, path, query=None, what=None, page_size=PAGE_SIZE, each=None):
    """Every item of the list at path (query: labelSelector, fieldSelector; None values left out), following
    limit/continue pages of page_size objects (0: one request for all), as raw JSON dicts, through
    cluster.request; each(item), when given, is applied to every item as its page arrives (to keep less of it).
    A failure after the first page (a continue token that expired: 410 Gone) restarts the list once from the
    beginning; NotFound and Forbidden never do."""
    query = dict((key, value) for key, value in (query or {}).items() if value is not None)
    what = what or "list %s" % path
    for attempt in (1, 2):
        items = []
        token = None
        try:
            while True:
                page = dict(query)
                if page_size:
                    page["limit"] = page_size
                if token:
                    page["continue"] = token
                doc = cluster.request("GET", path, query=page, what=what) or {}
                items.extend(map(each, doc.get("items") or ()) if each else doc.get("items") or ())
                token = (doc.get("metadata") or {}).get("continue")
                if not token:
                    return items
        except (NotFoundError, ForbiddenError):
            raise
        except KvquotaError:
            if token is None or attempt == 2:
                raise
    return items  # pragma: no cover


def _group_version_path(api_version):
    """/api/v1 for the core group, /apis/<group>/<version> for the others."""
    return "/apis/%s" % api_version if "/" in api_version else "/api/%s" % api_version


def _describe_name(meta):
    if meta.get("namespace"):
        return "%s in namespace %s" % (meta.get("name"), meta.get("namespace"))
    return str(meta.get("name"))


CONFLICT_FIX = ("re-run: the ledger makes the retry safe; if it keeps happening, find the other writer "
                "(kubectl get events, the ledger history)")


def retry_on_conflict(attempt, attempts=10, what="update", sleep=time.sleep):
    """attempt(number) again from scratch while it raises ConflictError (a 409 on a conditional write), after a
    short jittered pause, up to attempts times; then one ConflictError naming what. The one conflict loop of the
    collection: attempt must re-read what it writes, so each try decides on the current state."""
    last = None
    for number in range(max(1, attempts)):
        try:
            return attempt(number)
        except ConflictError as err:
            last = err
            sleep(min(1.0, 0.05 * (number + 1)) * (0.5 + random.random()))
    raise ConflictError("gave up trying to %s after %d conflicting concurrent writes (%s)" % (what, attempts, last),
                        CONFLICT_FIX)


def is_outage(err):
    """Whether err is a request that used up the outage budget (Cluster._outage_error)."""
    return isinstance(err, UnreachableError) and "outage_seconds" in (getattr(err, "details", None) or {})


def is_starting(err):
    """Whether err is the answer of an API server that is starting (Cluster.stream_lines): no answer yet."""
    return isinstance(err, UnreachableError) and bool((getattr(err, "details", None) or {}).get("starting"))


@contextlib.contextmanager
def one_attempt_after_outage(cluster, err):
    """While cleaning up after err: when err used up the outage budget, each request gets one attempt (a
    control plane that is back answers it; one still down must not cost another budget per request)."""
    if not is_outage(err) or not hasattr(cluster, "outage_budget"):
        yield
        return
    budget = cluster.outage_budget
    cluster.outage_budget = 0
    try:
        yield
    finally:
        cluster.outage_budget = budget


def conditional_update(read, compute, write, attempts=10, what="update", sleep=time.sleep):
    """Read-compute-write with optimistic concurrency: write(new) must be conditional (resourceVersion); on
    ConflictError everything is re-read and recomputed (retry_on_conflict). compute(current) returns the
    object to write or None (nothing to do). Returns (written or None, current)."""
    def attempt(_number):
        current = read()
        new = compute(current)
        if new is None:
            return None, current
        return write(new), current
    return retry_on_conflict(attempt, attempts, what, sleep)
