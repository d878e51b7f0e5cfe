"""Thin JSON REST access, list/watch caches and a work queue for the emulator.

Everything is plain dicts (the apiserver's JSON), on top of the official kubernetes
client's ApiClient (auth, TLS, connection pool). Watches resume from the last
resourceVersion and fall back to a fresh list on 410 Gone or any stream error.
"""
import collections
import heapq
import json
import logging
import threading
import time

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("kvqlab.emulator.rest")

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def make_api_client(kubeconfig, pool_size=64):
    """An ApiClient for the given kubeconfig with a connection pool large enough for watches."""
    cfg = k8s_client.Configuration()
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    return k8s_client.ApiClient(cfg)


def impersonating(api_client, username):
    """A new ApiClient with api_client's configuration (an admin's) that acts as username (Impersonate-User).

    For a ServiceAccount username (system:serviceaccount:<ns>:<name>) the apiserver adds the groups
    system:serviceaccounts, system:serviceaccounts:<ns> and system:authenticated itself, so the request is
    authorised and admitted exactly as that ServiceAccount's would be."""
    api = k8s_client.ApiClient(api_client.configuration)
    api.set_default_header("Impersonate-User", username)
    return api


def impersonating_client(kubeconfig, username, pool_size=16):
    """impersonating() for the credentials of a kubeconfig."""
    return impersonating(make_api_client(kubeconfig, pool_size), username)


class Rest:
    """JSON requests against API paths; raises kubernetes ApiException on non-2xx."""

    def __init__(self, api_client):
        self.api = api_client

    def request(self, method, path, query=None, body=None, content_type="application/json",
                timeout=30, stream=False):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        q = [(k, v) for k, v in (query or {}).items() if v is not None]
        method, url, headers, body, post = self.api.param_serialize(
            method=method, resource_path=path, query_params=q, header_params=headers,
            body=body, auth_settings=["BearerToken"])
        resp = self.api.call_api(method, url, header_params=headers, body=body, post_params=post,
                                 _request_timeout=timeout)
        if stream:
            if not 200 <= resp.status <= 299:
                resp.read()
                raise ApiException.from_response(http_resp=resp, body=None, data=None)
            return resp.response
        resp.read()
        if not 200 <= resp.status <= 299:
            raise ApiException.from_response(http_resp=resp, body=None, data=None)
        return json.loads(resp.data) if resp.data else None

    def get(self, path, **query):
        return self.request("GET", path, query)

    def list_items(self, path, page=500, **query):
        """Every item of the list at path, in pages of `page` (limit/continue): each response stays small, so a
        list of 20,000 objects does not run into the request timeout as one response would."""
        items, token = [], None
        while True:
            data = self.get(path, limit=page, **dict(query, **({"continue": token} if token else {})))
            items.extend(data.get("items") or [])
            token = (data.get("metadata") or {}).get("continue")
            if not token:
                return items

    def get_or_none(self, path):
        try:
            return self.get(path)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path, body):
        return self.request("POST", path, body=body)

    def replace(self, path, body):
        return self.request("PUT", path, body=body)

    def patch(self, path, body, content_type=MERGE):
        return self.request("PATCH", path, body=body, content_type=content_type)

    def delete(self, path, body=None, **query):
        try:
            return self.request("DELETE", path, query, body=body)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


def watch_events(resp, stopped=lambda: False):
    """The events ({type, object}) of a streamed watch response, one per line, as they arrive; ends when the
    stream does or, checked at every chunk, when stopped() is true."""
    buf = b""
    for chunk in resp.stream(65536, decode_content=False):
        if stopped():
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


def api_message(exc):
    """The apiserver's Status message of an ApiException (or its text)."""
    try:
        return json.loads(exc.body).get("message") or str(exc)
    except Exception:  # noqa: BLE001 - body may be anything
        return str(exc.body or exc)


def _rv(obj):
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except ValueError:
        return None


def _newer(obj, old):
    """True if obj is a later version than old (resourceVersions compared as integers when they are)."""
    a, b = _rv(obj), _rv(old)
    if a is None or b is None:
        return obj["metadata"].get("resourceVersion") != old["metadata"].get("resourceVersion")
    return a > b


def key_of(obj):
    md = obj["metadata"]
    return (md.get("namespace") or "", md["name"])


class Informer:
    """A list/watch cache of one resource collection.

    handler(event_type, obj, old) is called from the informer thread for every change
    (ADDED/MODIFIED/DELETED); keep it cheap (enqueue keys). indexers: name ->
    fn(obj) -> iterable of index values.
    """

    def __init__(self, rest, path, handler=None, label_selector=None, field_selector=None,
                 indexers=None, name=None, optional=False, stop=None):
        self.rest = rest
        self.path = path
        self.handler = handler
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.name = name or path
        self.optional = optional
        self.items = {}
        self.lock = threading.RLock()
        self.indexers = indexers or {}
        self.indices = {n: {} for n in self.indexers}
        self.synced = threading.Event()
        self.stop = stop or threading.Event()
        self.thread = threading.Thread(target=self._run, name="informer-" + self.name, daemon=True)
        self._resp = None

    def start(self):
        self.thread.start()
        return self

    # -- cache access -----------------------------------------------------
    def get(self, namespace, name):
        with self.lock:
            return self.items.get((namespace or "", name))

    def list(self, namespace=None):
        with self.lock:
            if namespace is None:
                return list(self.items.values())
            return [o for (ns, _name), o in self.items.items() if ns == namespace]

    def by_index(self, index, value):
        with self.lock:
            keys = self.indices[index].get(value, ())
            return [self.items[k] for k in keys if k in self.items]

    # -- internals --------------------------------------------------------
    def _index_add(self, key, obj):
        for n, fn in self.indexers.items():
            for v in fn(obj) or ():
                self.indices[n].setdefault(v, set()).add(key)

    def _index_remove(self, key, obj):
        for n, fn in self.indexers.items():
            for v in fn(obj) or ():
                s = self.indices[n].get(v)
                if s is not None:
                    s.discard(key)
                    if not s:
                        del self.indices[n][v]

    def _apply(self, etype, obj):
        key = key_of(obj)
        with self.lock:
            old = self.items.get(key)
            if old is not None:
                self._index_remove(key, old)
            if etype == "DELETED":
                self.items.pop(key, None)
            else:
                if old is not None and not _newer(obj, old):
                    self._index_add(key, old)
                    return
                self.items[key] = obj
                self._index_add(key, obj)
        self._notify(etype, obj, old)

    def _notify(self, etype, obj, old):
        if self.handler is None:
            return
        try:
            self.handler(etype, obj, old)
        except Exception:  # noqa: BLE001 - a handler bug must not kill the watch
            log.exception("handler of %s failed", self.name)

    def _list(self):
        query = {"labelSelector": self.label_selector, "fieldSelector": self.field_selector,
                 "limit": 2000}
        items, cont = [], None
        while True:
            query["continue"] = cont
            data = self.rest.get(self.path, **query)
            items.extend(data.get("items") or [])
            cont = data["metadata"].get("continue")
            if not cont:
                break
        rv = data["metadata"].get("resourceVersion")
        kind = data.get("kind", "")[:-4] if data.get("kind", "").endswith("List") else None
        api_version = data.get("apiVersion")
        fresh = {}
        for it in items:
            if kind and "kind" not in it:
                it["kind"] = kind
                it["apiVersion"] = api_version
            fresh[key_of(it)] = it
        with self.lock:
            gone = [o for k, o in self.items.items() if k not in fresh]
        for o in gone:
            self._apply("DELETED", o)
        for o in fresh.values():
            self._apply("ADDED", o)
        return rv

    def _watch(self, rv):
        query = {"watch": "true", "resourceVersion": rv, "allowWatchBookmarks": "true",
                 "labelSelector": self.label_selector, "fieldSelector": self.field_selector,
                 "timeoutSeconds": 300}
        resp = self.rest.request("GET", self.path, query, stream=True, timeout=(10, 330))
        self._resp = resp
        try:
            for ev in watch_events(resp, self.stop.is_set):
                etype, obj = ev.get("type"), ev.get("object") or {}
                if etype == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError("watch error: %s" % obj.get("message"))
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if etype == "BOOKMARK":
                    continue
                self._apply(etype, obj)
        finally:
            resp.release_conn()
        return rv

    def _run(self):
        rv = None
        delay = 0.2
        while not self.stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                    self.synced.set()
                rv = self._watch(rv)
                delay = 0.2
            except ApiException as exc:
                if exc.status == 410:
                    rv = None
                    continue
                if exc.status == 404 and self.optional:
                    self.synced.set()
                    self.stop.wait(2.0)
                    continue
                log.warning("informer %s: %s; relisting", self.name, exc.status)
                rv = None
                self.stop.wait(delay)
                delay = min(delay * 2, 5.0)
            except Exception as exc:  # noqa: BLE001 - connection reset, read timeout, ...
                if self.stop.is_set():
                    return
                log.debug("informer %s: watch ended (%s)", self.name, exc)
                # resume from rv; a stale rv is answered with 410 and relisted
                self.stop.wait(delay)
                delay = min(delay * 2, 5.0)


class WorkQueue:
    """A de-duplicating delayed work queue; one key is never processed by two workers at once."""

    def __init__(self):
        self.cond = threading.Condition()
        self.ready = collections.deque()  # FIFO of keys
        self.queued = set()      # keys in ready
        self.delayed = []        # heap of (when, seq, key)
        self.processing = set()
        self.dirty = set()       # re-added while processing
        self.seq = 0
        self.closed = False

    def add(self, key, delay=0.0):
        with self.cond:
            if delay > 0:
                self.seq += 1
                heapq.heappush(self.delayed, (time.monotonic() + delay, self.seq, key))
                self.cond.notify()
                return
            self._add_now(key)

    def _add_now(self, key):
        if key in self.processing:
            self.dirty.add(key)
            return
        if key in self.queued:
            return
        self.queued.add(key)
        self.ready.append(key)
        self.cond.notify()

    def get(self):
        with self.cond:
            while True:
                if self.closed:
                    return None
                now = time.monotonic()
                while self.delayed and self.delayed[0][0] <= now:
                    key = heapq.heappop(self.delayed)[2]
                    self._add_now(key)
                if self.ready:
                    key = self.ready.popleft()
                    self.queued.discard(key)
                    self.processing.add(key)
                    return key
                timeout = (self.delayed[0][0] - now) if self.delayed else None
                self.cond.wait(timeout if timeout is None else max(timeout, 0.001))

    def done(self, key):
        with self.cond:
            self.processing.discard(key)
            if key in self.dirty:
                self.dirty.discard(key)
                self._add_now(key)

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def __len__(self):
        with self.cond:
            return len(self.ready) + len(self.delayed)
