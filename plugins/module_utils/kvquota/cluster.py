# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""API access on the official `kubernetes` client: auth, raw reads and conditional writes, one clear error.

Auth options and their precedence follow kubernetes.core (so AWX's Kubernetes credential and
module_defaults carry over unchanged):

1. each option given by the caller (aliases verify_ssl, ssl_ca_cert, cert_file, key_file accepted);
2. else its environment variable K8S_AUTH_<OPTION> (e.g. K8S_AUTH_VALIDATE_CERTS, K8S_AUTH_CA_CERT), else
   K8S_AUTH_<CLIENT NAME> (K8S_AUTH_VERIFY_SSL, K8S_AUTH_SSL_CA_CERT, K8S_AUTH_CERT_FILE, K8S_AUTH_KEY_FILE);
   booleans from the environment are true unless "0", "false" or "no"; proxy_headers from
   K8S_AUTH_PROXY_HEADERS_<SUBOPTION>; impersonate_groups from a comma-separated K8S_AUTH_IMPERSONATE_GROUPS;
3. then where the connection comes from: host with api_key, username+password or client_cert+client_key
   is enough on its own; else a kubeconfig/context given loads that kubeconfig (path, "a:b" list, or dict);
   else the in-cluster service account, else the default kubeconfig (KUBECONFIG or ~/.kube/config);
4. options given (host, validate_certs, ca_cert, proxy, ...) then override what the kubeconfig said.

TLS verification stays on unless validate_certs is false (or a kubeconfig explicitly skips it).

Every request goes through Cluster.request (raw JSON dicts in and out, so no typed-model conversion can
alter an object on its way back) or Cluster.call (the typed APIs, reads only), is counted in
Cluster.request_count, and rides through control-plane blips: a transient failure (connection refused or
reset, a timeout, 429, 500/502/503/504) is retried with jittered exponential backoff, honouring Retry-After,
until the outage budget (seconds since the request's first failure) runs out; nothing else is retried, but for
the 401/403/404 an API server that is coming back gives before its /readyz says it is ready.
docs/reliability.md states what a retried write can and cannot do.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import contextlib
import json
import os
import random
import socket
import time

from urllib.parse import quote

try:
    import kubernetes
    from kubernetes.client.rest import ApiException
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError as _err:  # handled at connect time
    kubernetes = None
    ApiException = None
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = str(_err)

try:
    import urllib3
    HAS_URLLIB3 = True
except ImportError:  # comes with kubernetes
    urllib3 = None
    HAS_URLLIB3 = False

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import (
    ConflictError,
    ForbiddenError,
    InputError,
    KvquotaError,
    NotFoundError,
    UnreachableError,
)

# option name -> name in kubernetes.client.Configuration (also the second env spelling)
AUTH_OPTIONS = (
    ("kubeconfig", "kubeconfig"),
    ("context", "context"),
    ("host", "host"),
    ("api_key", "api_key"),
    ("username", "username"),
    ("password", "password"),
    ("validate_certs", "verify_ssl"),
    ("ca_cert", "ssl_ca_cert"),
    ("client_cert", "cert_file"),
    ("client_key", "key_file"),
    ("proxy", "proxy"),
    ("no_proxy", "no_proxy"),
    ("proxy_headers", "proxy_headers"),
    ("persist_config", "persist_config"),
    ("impersonate_user", "impersonate_user"),
    ("impersonate_groups", "impersonate_groups"),
)
BOOL_OPTIONS = ("validate_certs", "persist_config")
PROXY_HEADER_OPTIONS = ("proxy_basic_auth", "basic_auth", "user_agent")
RBAC_FIX = ("bind the roles of rbac/clusterrole.yml and rbac/operator-namespace.yml to this identity with the "
            "install playbook (as an administrator): ansible-playbook kvquota.maintenance.install "
            "-e kvquota_subject_kind=ServiceAccount -e kvquota_subject_name=<name> "
            "-e kvquota_subject_namespace=<namespace> (kvquota_bind_rancher=true on Rancher, "
            "kvquota_bind_shutdown=true for the shutdown policy)")
TLS_FIX = ("give the API server's CA with ca_cert (K8S_AUTH_SSL_CA_CERT) or in the kubeconfig "
           "(certificate-authority-data); set validate_certs: false only for a throw-away lab")
DEFAULT_TIMEOUT = (10, 60)
DEFAULT_OUTAGE_BUDGET = 60
# jittered exponential backoff between attempts: first ~0.5 s, doubling, each wait at most 8 s
BACKOFF_FIRST = 0.5
BACKOFF_CAP = 8.0
TRANSIENT_STATUSES = (429, 500, 502, 503, 504)
# answers an API server gives while it starts (authorizer caches empty, CRD handlers not installed yet): retried
# only after this Cluster saw a transient failure and while /readyz says the server is not ready
STARTUP_STATUSES = (401, 403, 404)
COMPONENT = "kvquota.maintenance"


def _env_bool(text):
    return str(text).strip().lower() not in ("0", "false", "no")


def resolve_auth(options=None, environ=None):
    """The effective auth options (kvquota/kubernetes.core names), options first, then K8S_AUTH_* variables.

    Pure: environ defaults to os.environ but can be given. Options that are None are looked up in the
    environment; options absent everywhere are left out of the result.
    """
    options = dict(options or {})
    env = os.environ if environ is None else environ
    aliases = {"verify_ssl": "validate_certs", "ssl_ca_cert": "ca_cert", "cert_file": "client_cert",
               "key_file": "client_key"}
    for alias, name in aliases.items():
        if options.get(name) is None and options.get(alias) is not None:
            options[name] = options[alias]
    auth = {}
    for name, client_name in AUTH_OPTIONS:
        value = options.get(name)
        if value is not None:
            auth[name] = value
            continue
        if name == "proxy_headers":
            headers = {}
            for key in PROXY_HEADER_OPTIONS:
                env_value = env.get("K8S_AUTH_PROXY_HEADERS_%s" % key.upper())
                if env_value is not None:
                    headers[key] = env_value
            if headers:
                auth[name] = headers
            continue
        env_value = env.get("K8S_AUTH_%s" % name.upper()) or env.get("K8S_AUTH_%s" % client_name.upper())
        if env_value is None:
            continue
        if name in BOOL_OPTIONS:
            env_value = _env_bool(env_value)
        elif name == "impersonate_groups":
            env_value = [item for item in env_value.split(",") if item != ""]
        auth[name] = env_value
    for name in BOOL_OPTIONS:
        if name in auth and isinstance(auth[name], str):
            auth[name] = _env_bool(auth[name])
    if auth.get("host"):
        auth["host"] = str(auth["host"]).rstrip("/")
    if isinstance(auth.get("impersonate_groups"), str):
        auth["impersonate_groups"] = [item for item in auth["impersonate_groups"].split(",") if item != ""]
    return auth


def config_source(auth):
    """Where the connection comes from: 'explicit' (host + credentials given), 'kubeconfig' (a kubeconfig or
    context given), or 'default' (in-cluster service account, else the default kubeconfig)."""
    def given(*names):
        return all(auth.get(name) for name in names)
    if given("host", "api_key") or given("host", "username", "password") or given("host", "client_cert", "client_key"):
        return "explicit"
    if given("kubeconfig") or given("context"):
        return "kubeconfig"
    return "default"


def _kubeconfig_description(auth):
    kubeconfig = auth.get("kubeconfig")
    if isinstance(kubeconfig, dict):
        return "the kubeconfig given as a dict"
    if kubeconfig:
        return "kubeconfig %s" % kubeconfig
    return "the default kubeconfig (%s)" % (os.environ.get("KUBECONFIG") or "~/.kube/config")


def _load_kubeconfig(auth, configuration):
    kubeconfig = auth.get("kubeconfig")
    kwargs = {"context": auth.get("context"), "client_configuration": configuration,
              "persist_config": bool(auth.get("persist_config"))}
    if isinstance(kubeconfig, dict):
        kubernetes.config.load_kube_config_from_dict(config_dict=kubeconfig, **kwargs)
    else:
        if kubeconfig:
            missing = [path for path in str(kubeconfig).split(os.pathsep) if path and
                       not os.path.exists(os.path.expanduser(path))]
            if missing and len(missing) == len([p for p in str(kubeconfig).split(os.pathsep) if p]):
                raise InputError("kubeconfig %s does not exist" % kubeconfig,
                                 "give the path of a readable kubeconfig (kubeconfig option or K8S_AUTH_KUBECONFIG)")
            kubeconfig = os.path.expanduser(str(kubeconfig))
        kubernetes.config.load_kube_config(config_file=kubeconfig or None, **kwargs)


def build_configuration(auth):
    """A kubernetes.client.Configuration for resolved auth (see resolve_auth); no request is made."""
    _require_kubernetes()
    configuration = kubernetes.client.Configuration()
    source = config_source(auth)
    try:
        if source == "kubeconfig":
            _load_kubeconfig(auth, configuration)
        elif source == "default":
            try:
                kubernetes.config.load_incluster_config(client_configuration=configuration)
            except kubernetes.config.ConfigException:
                _load_kubeconfig(auth, configuration)
    except KvquotaError:
        raise
    except (kubernetes.config.ConfigException, IOError, OSError, ValueError, TypeError, KeyError) as err:
        if source == "default" and not auth.get("host"):
            raise UnreachableError(
                "no Kubernetes connection configured: not running in a pod and %s could not be loaded (%s)"
                % (_kubeconfig_description(auth), _one_line(err)),
                "give kubeconfig (or K8S_AUTH_KUBECONFIG), or host with api_key (K8S_AUTH_HOST, K8S_AUTH_API_KEY)")
        if source != "default":
            raise InputError("cannot load %s%s: %s" % (
                _kubeconfig_description(auth),
                (" context %s" % auth["context"]) if auth.get("context") else "", _one_line(err)),
                "check the kubeconfig path and that the context exists (kubectl config get-contexts)")
    if auth.get("host"):
        configuration.host = auth["host"]
    if auth.get("api_key"):
        token = "Bearer %s" % auth["api_key"]
        configuration.api_key = {"authorization": token, "BearerToken": token}
        configuration.api_key_prefix = {}
    for name, client_name in (("username", "username"), ("password", "password"),
                              ("validate_certs", "verify_ssl"), ("ca_cert", "ssl_ca_cert"),
                              ("client_cert", "cert_file"), ("client_key", "key_file"),
                              ("proxy", "proxy"), ("no_proxy", "no_proxy")):
        if auth.get(name) is not None:
            setattr(configuration, client_name, auth[name])
    if auth.get("proxy_headers"):
        configuration.proxy_headers = urllib3.util.make_headers(**auth["proxy_headers"])
    if not configuration.host:
        raise InputError("no API server address", "give host (K8S_AUTH_HOST) or a kubeconfig with a cluster server")
    return configuration


def _require_kubernetes():
    if not HAS_KUBERNETES:
        raise KvquotaError("the Python library 'kubernetes' is required (%s)" % KUBERNETES_IMPORT_ERROR,
                           "pip install kubernetes")


def _one_line(err):
    return " ".join(str(err).split())


def connect(auth=None, environ=None, timeout=DEFAULT_TIMEOUT, outage_budget=DEFAULT_OUTAGE_BUDGET):
    """A Cluster for the given auth options (kubernetes.core names; see resolve_auth). No request is made.
    outage_budget: seconds a request keeps retrying transient failures (see Cluster)."""
    _require_kubernetes()
    resolved = resolve_auth(auth, environ)
    configuration = build_configuration(resolved)
    api_client = kubernetes.client.ApiClient(configuration)
    headers = []
    if resolved.get("impersonate_user"):
        headers.append(("Impersonate-User", resolved["impersonate_user"]))
    for group in resolved.get("impersonate_groups") or []:
        headers.append(("Impersonate-Group", group))
    return Cluster(api_client, extra_headers=headers, timeout=timeout, outage_budget=outage_budget)


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
# TLS failures that no retry can cure (a wrong CA, a wrong host name, plain HTTP)
_TLS_PERMANENT = ("CERTIFICATE_VERIFY_FAILED", "certificate verify", "hostname", "WRONG_VERSION_NUMBER")


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
    if any(mark in text for mark in _TLS_PERMANENT):
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

class Cluster(object):
    """One API connection: typed APIs for callers that want them, raw JSON helpers for the core."""

    def __init__(self, api_client, extra_headers=None, timeout=DEFAULT_TIMEOUT, outage_budget=DEFAULT_OUTAGE_BUDGET,
                 sleep=time.sleep, clock=time.monotonic):
        if isinstance(outage_budget, bool) or not isinstance(outage_budget, (int, float)) or outage_budget < 0:
            raise InputError("api_outage_budget must be a number of seconds >= 0, not %r" % (outage_budget,),
                             "give e.g. api_outage_budget: 60 (0 turns retries off)")
        self.outage_budget = outage_budget
        self.sleep = sleep
        self.clock = clock
        # set by a transient failure, cleared by a ready /readyz: an API server coming back serves requests
        # before its caches are filled (RBAC denies, CRDs are not found), which are no answers yet
        self._recovering = False
        self.api_client = api_client
        self.configuration = api_client.configuration
        self.host = self.configuration.host
        self.timeout = timeout
        self.extra_headers = list(extra_headers or [])
        self._count = 0
        self._facts = None
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.coordination = kubernetes.client.CoordinationV1Api(api_client)
        self._wrap_rest_client()

    # -- plumbing --------------------------------------------------------

    def _wrap_rest_client(self):
        rest = self.api_client.rest_client
        original = rest.request
        cluster = self

        def counted(*args, **kwargs):
            cluster._count += 1
            if cluster.extra_headers:
                headers = _header_dict(kwargs.get("headers") or {})
                for name, value in cluster.extra_headers:
                    if name == "Impersonate-User":
                        headers[name] = value
                    else:
                        headers.add(name, value)
                kwargs["headers"] = headers
            return original(*args, **kwargs)

        rest.request = counted

    @property
    def request_count(self):
        """How many HTTP requests this Cluster has sent (for the benchmark)."""
        return self._count

    def call(self, fn, *args, **kwargs):
        """fn(*args, **kwargs) (a typed API's read) with transient failures retried and failures mapped to one
        clear error; what= names the action. Writes go through request, which knows what a retry may do."""
        what = kwargs.pop("what", None) or getattr(fn, "__name__", "call the API")
        kwargs.setdefault("_request_timeout", self.timeout)
        return self._with_retries(lambda: fn(*args, **kwargs), "GET", "", what)

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
        """One attempt: the raw response body, or the client's exception."""
        client = self.api_client
        if hasattr(client, "param_serialize"):
            serialized = client.param_serialize(method=method, resource_path=path, query_params=query,
                                                header_params=dict(headers), body=body, auth_settings=["BearerToken"])
            response = client.call_api(*serialized, _request_timeout=self.timeout)
            response.read()
            if not 200 <= response.status <= 299:
                raise ApiException(http_resp=response)
            return response.data
        # kubernetes < 36
        response = client.call_api(path, method, query_params=query, header_params=dict(headers), body=body,
                                   auth_settings=["BearerToken"], _preload_content=False,
                                   _return_http_data_only=True, _request_timeout=self.timeout)
        return response.data

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
                kind = transient_kind(exc, path)
                if kind is None and self._recovering and getattr(exc, "status", None) in STARTUP_STATUSES:
                    kind = None if self._ready() else NOT_SENT
                if kind is not None:
                    self._recovering = True
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

    def _ready(self):
        """Whether the API server says it is ready (GET /readyz, one attempt); clears the recovering state."""
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
        path = object_path(obj)
        meta = obj.get("metadata") or {}
        if not meta.get("resourceVersion"):
            raise InputError("refusing an unconditional write of %s" % path, "read the object first")
        return self.request("PUT", path, body=obj, what=what or "update %s" % _describe_path(obj))

    def delete(self, path, what, resource_version=None):
        body = None
        if resource_version:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": resource_version}}
        return self.request("DELETE", path, body=body, what=what)

    # -- typed helpers (raw dicts) --------------------------------------

    def get_namespace(self, name):
        return self.get("/api/v1/namespaces/%s" % _q(name), "get namespace %s" % name)

    def list_namespaces(self, label_selector=None):
        return self.request("GET", "/api/v1/namespaces", query={"labelSelector": label_selector},
                            what="list namespaces").get("items") or []

    def get_quota(self, namespace, name):
        return self.get("/api/v1/namespaces/%s/resourcequotas/%s" % (_q(namespace), _q(name)),
                        "get resourcequota %s in namespace %s" % (name, namespace))

    def list_quotas(self, namespace=None):
        path = "/api/v1/namespaces/%s/resourcequotas" % _q(namespace) if namespace else "/api/v1/resourcequotas"
        what = "list resourcequotas in namespace %s" % namespace if namespace else "list resourcequotas in all namespaces"
        return self.request("GET", path, what=what).get("items") or []

    def get_pod(self, namespace, name):
        return self.get("/api/v1/namespaces/%s/pods/%s" % (_q(namespace), _q(name)),
                        "get pod %s in namespace %s" % (name, namespace))

    def list_pods(self, namespace=None, label_selector=None, field_selector=None):
        path = "/api/v1/namespaces/%s/pods" % _q(namespace) if namespace else "/api/v1/pods"
        return self.request("GET", path, query={"labelSelector": label_selector, "fieldSelector": field_selector},
                            what="list pods in namespace %s" % namespace if namespace else "list pods").get("items") or []

    def get_custom(self, group, version, plural, name, namespace=None):
        path = custom_path(group, version, plural, namespace, name)
        where = " in namespace %s" % namespace if namespace else ""
        return self.get(path, "get %s.%s %s%s" % (plural, group, name, where))

    def list_custom(self, group, version, plural, namespace=None, label_selector=None):
        path = custom_path(group, version, plural, namespace)
        where = " in namespace %s" % namespace if namespace else ""
        return self.request("GET", path, query={"labelSelector": label_selector},
                            what="list %s.%s%s" % (plural, group, where)).get("items") or []

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
        return self.create("/api/v1/namespaces/%s/events" % _q(ns), body,
                           "create events in namespace %s" % ns)

    def api_groups(self):
        """{group name: [group/version, ...]} from discovery (one request)."""
        data = self.request("GET", "/apis", what="discover API groups") or {}
        return dict((group.get("name"), [v.get("groupVersion") for v in group.get("versions") or []])
                    for group in data.get("groups") or [])

    def facts(self, refresh=False):
        """What kind of cluster this is, for select_backend: harvester, harvester_version, rancher_projects,
        aaq, kubevirt (bools) — from discovery, plus Harvester's server-version setting when present."""
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
        if facts["harvester"]:
            # the settings API alone is no Harvester (a CRD left behind, a lab): every Harvester has server-version
            try:
                setting = self.get_custom("harvesterhci.io", "v1beta1", "settings", "server-version")
                facts["harvester_version"] = setting.get("value") or setting.get("default")
            except NotFoundError:
                facts["harvester"] = False
            except ForbiddenError:
                pass
        self._facts = facts
        return dict(facts)


def _header_dict(headers):
    """A urllib3 HTTPHeaderDict (which can repeat a header, as Impersonate-Group needs) holding headers."""
    kind = getattr(urllib3, "HTTPHeaderDict", None)
    if kind is None:  # urllib3 < 2
        from urllib3._collections import HTTPHeaderDict as kind  # pylint: disable=import-outside-toplevel
    return kind(headers)


def _is_request_error(exc):
    if ApiException is not None and isinstance(exc, ApiException):
        return True
    if HAS_URLLIB3 and isinstance(exc, urllib3.exceptions.HTTPError):
        return True
    return isinstance(exc, _NETWORK_ERRORS)


def custom_path(group, version, plural, namespace=None, name=None):
    """/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>]."""
    path = "/apis/%s/%s" % (group, version)
    if namespace:
        path += "/namespaces/%s" % _q(namespace)
    path += "/%s" % plural
    if name:
        path += "/%s" % _q(name)
    return path


_CORE_PLURALS = {"Namespace": "namespaces", "ResourceQuota": "resourcequotas", "Pod": "pods", "Event": "events",
                 "ConfigMap": "configmaps"}
_GROUP_PLURALS = {"Lease": "leases"}


def object_path(obj):
    """The API path of an object dict (Namespace, ResourceQuota, Pod, Event, Lease, or any with apiVersion/kind
    whose plural is the lower-cased kind + 's')."""
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    api_version = obj.get("apiVersion") or "v1"
    if kind == "Namespace":
        return "/api/v1/namespaces/%s" % _q(meta.get("name"))
    plural = _CORE_PLURALS.get(kind) or _GROUP_PLURALS.get(kind) or (str(kind).lower() + "s")
    if "/" not in api_version:
        return "/api/%s/namespaces/%s/%s/%s" % (api_version, _q(meta.get("namespace")), plural, _q(meta.get("name")))
    group, version = api_version.split("/", 1)
    return custom_path(group, version, plural, meta.get("namespace"), meta.get("name"))


def _describe_path(obj):
    meta = obj.get("metadata") or {}
    if meta.get("namespace"):
        return "%s %s in namespace %s" % (str(obj.get("kind")).lower() + "s", meta.get("name"), meta.get("namespace"))
    return "%s %s" % (str(obj.get("kind")).lower() + "s", meta.get("name"))


def is_outage(err):
    """Whether err is a request that used up the outage budget (Cluster._outage_error)."""
    return isinstance(err, UnreachableError) and "outage_seconds" in (getattr(err, "details", None) or {})


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
    ConflictError everything is re-read and recomputed, up to attempts times. compute(current) returns the
    object to write or None (nothing to do). Returns (written or None, current)."""
    last = None
    for attempt in range(max(1, attempts)):
        current = read()
        new = compute(current)
        if new is None:
            return None, current
        try:
            return write(new), current
        except ConflictError as err:
            last = err
            sleep(min(1.0, 0.05 * (attempt + 1)) * (0.5 + random.random()))
    raise ConflictError("gave up trying to %s after %d conflicting concurrent writes (%s)" % (what, attempts, last),
                        "re-run: the ledger makes the retry safe; if it keeps happening, find the other writer "
                        "(kubectl get events, the ledger history)")
