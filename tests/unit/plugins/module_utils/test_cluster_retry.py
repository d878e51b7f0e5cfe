# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cluster.request (every read and write, list pages included) rides through control-plane blips: a fake rest
client answers from a script, a fake clock advances only by the injected sleep (no real sleeping)."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import socket

import pytest

kubernetes = pytest.importorskip("kubernetes")
urllib3 = pytest.importorskip("urllib3")

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client import cluster as C  # noqa: E402
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (  # noqa: E402
    ConflictError,
    ForbiddenError,
    InputError,
    NotFoundError,
    UnreachableError,
)

HOST = "https://api.example:6443"


class FakeResponse(object):
    """What kubernetes' RESTClientObject.request returns (RESTResponse): status, reason, data, headers."""

    def __init__(self, status, body=None, headers=None):
        self.status = status
        self.reason = "reason %d" % status
        self.data = json.dumps(body).encode("utf-8") if body is not None else b""
        self.headers = dict(headers or {})

    def read(self):
        return self.data

    def getheaders(self):
        return self.headers


def status_body(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message}
    if details:
        body["details"] = details
    return body


def refused():
    return urllib3.exceptions.MaxRetryError(None, "/api", urllib3.exceptions.NewConnectionError(
        None, "Failed to establish a new connection: [Errno 111] Connection refused"))


def reset():
    return urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset by peer"))


def read_timeout():
    return urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out. (read timeout=60)")


class Script(object):
    """The fake rest client: each request takes the next outcome (an exception to raise or a FakeResponse);
    every attempt costs attempt_cost seconds of fake time, every sleep its length."""

    def __init__(self, outcomes, attempt_cost=0.0):
        self.outcomes = list(outcomes)
        self.requests = []
        self.headers = []
        self.sleeps = []
        self.now = 1000.0
        self.attempt_cost = attempt_cost

    def request(self, method, url, **kwargs):
        self.requests.append((method, url, kwargs.get("body")))
        self.headers.append(kwargs.get("headers"))
        self.now += self.attempt_cost
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def sleep(self, seconds):
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self):
        return self.now


class HeaderName(str):
    """A header name equal to another but never the same dict key: kubernetes.core's get_api_client sets a
    repeated header (Impersonate-Group, once per group) as default headers under such keys."""

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


def cluster_for(script, budget=60, default_headers=()):
    configuration = kubernetes.client.Configuration()
    configuration.host = HOST
    api_client = kubernetes.client.ApiClient(configuration)
    api_client.rest_client.request = script.request
    for name, value in default_headers:
        api_client.set_default_header(name, value)
    return C.Cluster(api_client, outage_budget=budget, sleep=script.sleep, clock=script.clock)


OK_NAMESPACE = FakeResponse(200, {"kind": "Namespace", "metadata": {"name": "a", "resourceVersion": "7"}})


@pytest.mark.parametrize("failure", [
    refused(),
    reset(),
    read_timeout(),
    urllib3.exceptions.ConnectTimeoutError(None, "Connection to api.example timed out. (connect timeout=10)"),
    ConnectionRefusedError(111, "Connection refused"),
    socket.timeout("timed out"),
    FakeResponse(429, status_body(429, "TooManyRequests", "Too many requests, please try again later.")),
    FakeResponse(500, status_body(500, "InternalError", "etcdserver: leader changed")),
    FakeResponse(502, None),
    FakeResponse(503, status_body(503, "ServiceUnavailable", "apiserver is shutting down")),
    FakeResponse(504, status_body(504, "Timeout", "Timeout: request did not complete within requested timeout")),
], ids=["refused", "reset", "read-timeout", "connect-timeout", "socket-refused", "socket-timeout",
        "429", "500", "502", "503", "504"])
def test_each_transient_failure_is_retried_until_an_answer(failure):
    script = Script([failure, failure, OK_NAMESPACE])
    cluster = cluster_for(script)
    assert cluster.get_namespace("a")["metadata"]["name"] == "a"
    assert len(script.requests) == 3
    assert len(script.sleeps) == 2
    assert cluster.request_count == 3


def test_backoff_is_jittered_exponential_and_capped():
    script = Script([refused()] * 12 + [OK_NAMESPACE])
    cluster_for(script, budget=600).get_namespace("a")
    for attempt, slept in enumerate(script.sleeps):
        nominal = min(C.BACKOFF_CAP, C.BACKOFF_FIRST * 2 ** attempt)
        assert nominal / 2 <= slept <= nominal
    assert max(script.sleeps) <= C.BACKOFF_CAP


def test_retry_after_header_is_honoured():
    throttled = FakeResponse(429, status_body(429, "TooManyRequests", "Too many requests"), {"Retry-After": "7"})
    script = Script([throttled, OK_NAMESPACE])
    cluster_for(script).get_namespace("a")
    assert script.sleeps == [7.0]


def test_retry_after_seconds_from_the_status_details():
    throttled = FakeResponse(429, status_body(429, "TooManyRequests", "Too many requests", {"retryAfterSeconds": 3}))
    script = Script([throttled, OK_NAMESPACE])
    cluster_for(script).get_namespace("a")
    assert script.sleeps == [3.0]


def test_budget_exhausted_is_one_clear_error_naming_the_outage_and_its_duration():
    script = Script([refused()])
    cluster = cluster_for(script, budget=20)
    with pytest.raises(UnreachableError) as caught:
        cluster.get_namespace("a")
    err = caught.value
    assert err.details["outage_seconds"] == 20.0
    assert err.details["attempts"] == len(script.requests) > 3
    text = str(err)
    assert "did not answer usably for 20 s" in text
    assert "api_outage_budget 20 s" in text
    assert "get namespace a" in text
    assert "Connection refused" in text
    assert "raise api_outage_budget" in err.fix
    # the last wait is cut to what is left of the budget: the last attempt is made when the budget runs out
    assert sum(script.sleeps) == pytest.approx(20)
    assert script.sleeps[-1] < C.BACKOFF_CAP


def test_retry_after_longer_than_the_budget_is_cut_to_the_budget():
    throttled = FakeResponse(429, status_body(429, "TooManyRequests", "slow down"), {"Retry-After": "120"})
    script = Script([throttled])
    with pytest.raises(UnreachableError) as caught:
        cluster_for(script, budget=10).get_namespace("a")
    assert script.sleeps == [10.0]
    assert caught.value.details["status"] == 429
    assert caught.value.details["outage_seconds"] == 10.0


def test_budget_zero_turns_retries_off_and_keeps_the_plain_error():
    script = Script([refused(), OK_NAMESPACE])
    with pytest.raises(UnreachableError) as caught:
        cluster_for(script, budget=0).get_namespace("a")
    assert len(script.requests) == 1 and script.sleeps == []
    assert "cannot reach the API server to get namespace a" in str(caught.value)
    assert "outage_seconds" not in caught.value.details


@pytest.mark.parametrize("status,reason,error", [
    (400, "BadRequest", InputError),
    (401, "Unauthorized", ForbiddenError),
    (403, "Forbidden", ForbiddenError),
    (404, "NotFound", NotFoundError),
    (409, "Conflict", ConflictError),
    (422, "Invalid", InputError),
])
def test_answers_are_never_retried(status, reason, error):
    script = Script([FakeResponse(status, status_body(status, reason, "no")), OK_NAMESPACE])
    with pytest.raises(error):
        cluster_for(script).get_namespace("a")
    assert len(script.requests) == 1
    assert script.sleeps == []


def test_tls_misconfiguration_and_unknown_host_are_not_retried():
    tls = urllib3.exceptions.MaxRetryError(None, "/api", urllib3.exceptions.SSLError(
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: unable to get local issuer certificate"))
    mismatch = urllib3.exceptions.MaxRetryError(None, "/api", urllib3.exceptions.SSLError(
        "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: Hostname mismatch, certificate is not valid for "
        "'10.0.0.9'. (_ssl.c:1006)"))
    unknown = urllib3.exceptions.MaxRetryError(None, "/api", urllib3.exceptions.NewConnectionError(
        None, "Failed to resolve 'nope.example'"))
    unknown.reason.__cause__ = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    for failure in (tls, mismatch, unknown):
        script = Script([failure, OK_NAMESPACE])
        with pytest.raises(UnreachableError):
            cluster_for(script).get_namespace("a")
        assert len(script.requests) == 1


def test_a_429_from_the_eviction_api_is_an_answer_not_retried():
    refusal = FakeResponse(429, status_body(429, "TooManyRequests",
                                            "Cannot evict pod as it would violate the pod's disruption budget."))
    script = Script([refusal, FakeResponse(201, {})])
    with pytest.raises(UnreachableError) as caught:
        cluster_for(script).request("POST", "/api/v1/namespaces/t/pods/p/eviction", body={"kind": "Eviction"},
                                    what="evict pod p")
    assert caught.value.details["status"] == 429
    assert len(script.requests) == 1


def test_a_conditional_put_is_retried_and_a_later_409_says_the_first_may_have_applied():
    conflict = FakeResponse(409, status_body(409, "Conflict", "the object has been modified"))
    discovery = FakeResponse(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "resourcequotas", "kind": "ResourceQuota", "namespaced": True}]})
    script = Script([discovery, reset(), conflict])
    quota = {"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": "q", "namespace": "t", "resourceVersion": "5"}}
    with pytest.raises(ConflictError) as caught:
        cluster_for(script).replace(quota)
    # the first request is discovery (the path of a ResourceQuota), then the PUT and its retry
    assert [r[0] for r in script.requests] == ["GET", "PUT", "PUT"]
    assert all(r[2]["metadata"]["resourceVersion"] == "5" for r in script.requests[1:])
    assert caught.value.details["maybe_applied"] is True
    assert "may have done it" in str(caught.value)


def test_a_409_after_a_request_that_never_left_is_a_plain_conflict():
    conflict = FakeResponse(409, status_body(409, "AlreadyExists", "configmaps \"x\" already exists"))
    script = Script([refused(), conflict])
    with pytest.raises(ConflictError) as caught:
        cluster_for(script).create("/api/v1/namespaces/kvquota-system/configmaps",
                                   {"metadata": {"name": "x"}}, "create configmap x")
    assert "maybe_applied" not in caught.value.details


def test_a_generate_name_post_is_not_repeated_after_a_lost_answer():
    script = Script([read_timeout(), FakeResponse(201, {"metadata": {"name": "e1"}})])
    body = {"kind": "Event", "metadata": {"generateName": "vm.kvquota-", "namespace": "t"}}
    with pytest.raises(UnreachableError) as caught:
        cluster_for(script).create("/api/v1/namespaces/t/events", body, "create events in namespace t")
    assert len(script.requests) == 1
    assert caught.value.details["maybe_applied"] is True


def test_a_generate_name_post_is_repeated_when_it_never_reached_the_server():
    script = Script([refused(), FakeResponse(201, {"metadata": {"name": "e1"}})])
    body = {"kind": "Event", "metadata": {"generateName": "vm.kvquota-", "namespace": "t"}}
    made = cluster_for(script).create("/api/v1/namespaces/t/events", body, "create events in namespace t")
    assert made["metadata"]["name"] == "e1"
    assert len(script.requests) == 2


def test_a_delete_whose_answer_was_lost_then_404_says_it_may_have_been_ours():
    gone = FakeResponse(404, status_body(404, "NotFound", "leases \"kvq-lock-t\" not found"))
    script = Script([reset(), gone, FakeResponse(200, None)])   # the last: /readyz says ready, so 404 is an answer
    with pytest.raises(NotFoundError) as caught:
        cluster_for(script).delete("/apis/coordination.k8s.io/v1/namespaces/kvquota-system/leases/kvq-lock-t",
                                   "delete lease kvq-lock-t", resource_version="9")
    assert caught.value.details["maybe_applied"] is True


def test_a_list_follows_its_pages_and_each_page_is_retried():
    first = FakeResponse(200, {"kind": "PodList", "metadata": {"continue": "tok"}, "items": [{"metadata": {"name": "a"}}]})
    last = FakeResponse(200, {"kind": "PodList", "metadata": {}, "items": [{"metadata": {"name": "b"}}]})
    script = Script([first, reset(), last])
    cluster = cluster_for(script)
    listed = cluster.list_pods(label_selector="kubevirt.io=virt-launcher")
    assert [pod["metadata"]["name"] for pod in listed] == ["a", "b"]
    assert [url for _method, url, _body in script.requests] == [
        HOST + "/api/v1/pods?labelSelector=kubevirt.io%3Dvirt-launcher&limit=500"] + [
        HOST + "/api/v1/pods?labelSelector=kubevirt.io%3Dvirt-launcher&limit=500&continue=tok"] * 2
    assert cluster.request_count == 3 and len(script.sleeps) == 1


def test_a_continue_token_that_expired_restarts_the_list_once():
    first = FakeResponse(200, {"metadata": {"continue": "tok"}, "items": [{"metadata": {"name": "a"}}]})
    gone = FakeResponse(410, status_body(410, "Expired", "The provided continue parameter is too old"))
    last = FakeResponse(200, {"metadata": {}, "items": [{"metadata": {"name": "b"}}]})
    script = Script([first, gone, first, last])
    listed = C.list_items(cluster_for(script), "/api/v1/namespaces", what="list namespaces")
    assert [ns["metadata"]["name"] for ns in listed] == ["a", "b"]
    assert len(script.requests) == 4
    script = Script([first, gone, first, gone])
    with pytest.raises(C.KvquotaError) as caught:
        C.list_items(cluster_for(script), "/api/v1/namespaces", what="list namespaces")
    assert "410" in str(caught.value) and len(script.requests) == 4


def test_the_clients_default_headers_go_with_every_request_and_a_group_header_repeats():
    """Impersonation: Cluster._send sends the client's default headers (no wrapped rest client), Impersonate-Group
    once per group."""
    script = Script([OK_NAMESPACE])
    cluster = cluster_for(script, default_headers=[("Impersonate-User", "alice"), (HeaderName("Impersonate-Group"), "g1"),
                                                   (HeaderName("Impersonate-Group"), "g2")])
    cluster.get_namespace("a")
    cluster.create("/api/v1/namespaces/t/events", {"metadata": {"name": "e1"}}, "create events in namespace t")
    for headers in script.headers:
        assert headers.getlist("Impersonate-Group") == ["g1", "g2"]
        assert headers.getlist("Impersonate-User") == ["alice"]
        assert headers["Accept"] == "application/json"
    assert cluster.request_count == 2
    script = Script([OK_NAMESPACE])
    cluster_for(script).get_namespace("a")
    assert "Impersonate-User" not in script.headers[0]


def test_a_bad_budget_is_one_clear_error():
    with pytest.raises(InputError) as caught:
        cluster_for(Script([OK_NAMESPACE]), budget=-1)
    assert "api_outage_budget" in str(caught.value)


def test_a_403_from_an_api_server_still_starting_after_an_outage_is_retried():
    denied = FakeResponse(403, status_body(403, "Forbidden", "nodes is forbidden: User \"kvquota-operator\" ..."))
    not_ready = FakeResponse(500, None)   # /readyz: [-]informer-sync failed
    ready = FakeResponse(200, None)
    script = Script([refused(), denied, not_ready, denied, ready, denied])
    cluster = cluster_for(script)
    with pytest.raises(ForbiddenError):
        cluster.get_namespace("a")
    paths = [url.split(HOST, 1)[1] for _method, url, _body in script.requests]
    assert paths == ["/api/v1/namespaces/a", "/api/v1/namespaces/a", "/readyz", "/api/v1/namespaces/a", "/readyz"]
    assert len(script.sleeps) == 2
    # once /readyz said ready, a 403 is an answer again, without another probe
    script.outcomes = [denied]
    with pytest.raises(ForbiddenError):
        cluster.get_namespace("a")
    assert [url.split(HOST, 1)[1] for _method, url, _body in script.requests][5:] == ["/api/v1/namespaces/a"]


class StreamResponse(FakeResponse):
    """A streamed answer (a watch): its body comes by stream(), its connection is released."""

    def stream(self, _amount, decode_content=True):
        yield self.data

    def release_conn(self):
        pass


WATCH = "/apis/kubevirt.io/v1/virtualmachineinstances"


def test_a_watch_refused_by_an_api_server_still_starting_after_a_broken_watch_is_a_transient_failure():
    # the CI failure of 6f083b7: kube-apiserver restarted, the source's watch reconnected and was refused with 403
    # (RBAC caches not filled yet), and the rulebook ended
    denied = StreamResponse(403, status_body(403, "Forbidden", "virtualmachineinstances.kubevirt.io is forbidden"))
    script = Script([refused(), denied, FakeResponse(500, None), denied, FakeResponse(200, None)])
    cluster = cluster_for(script)
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        list(cluster.stream_lines(WATCH, {"watch": "1"}, 30))
    with pytest.raises(UnreachableError) as starting:
        list(cluster.stream_lines(WATCH, {"watch": "1"}, 30))
    assert C.is_starting(starting.value) and "403" in str(starting.value)
    with pytest.raises(kubernetes.client.rest.ApiException) as refusal:   # /readyz ready: a refusal is an answer
        list(cluster.stream_lines(WATCH, {"watch": "1"}, 30))
    assert refusal.value.status == 403 and not C.is_starting(refusal.value)
    paths = [url.split(HOST, 1)[1].split("?", 1)[0] for _method, url, _body in script.requests]
    assert paths == [WATCH, WATCH, "/readyz", WATCH, "/readyz"]


def test_a_watch_refused_for_good_ends_once_the_outage_budget_after_its_last_failure_is_spent():
    # found by an attack: a revoked token gets 401 from the watch and from /readyz alike; without a bound the
    # source would reconnect for ever, blind, instead of ending with the refusal named
    denied = StreamResponse(401, status_body(401, "Unauthorized", "Unauthorized"))
    script = Script([refused(), denied, FakeResponse(401, None)])
    cluster = cluster_for(script, budget=60)
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        list(cluster.stream_lines(WATCH, {"watch": "1"}, 30))
    with pytest.raises(UnreachableError):          # within the budget: maybe a server starting
        list(cluster.stream_lines(WATCH, {"watch": "1"}, 30))
    script.now += 61
    script.outcomes = [denied]
    with pytest.raises(kubernetes.client.rest.ApiException) as refusal:
        list(cluster.stream_lines(WATCH, {"watch": "1"}, 30))
    assert refusal.value.status == 401


def test_a_request_refused_for_good_after_an_outage_is_believed_within_the_budget():
    # a revoked token after a blip: 401 from the request and from /readyz; retried as a server starting only
    # until the outage budget after the blip, then the refusal is raised (not an outage a watch would retry)
    denied = FakeResponse(401, status_body(401, "Unauthorized", "Unauthorized"))
    script = Script([refused(), denied, FakeResponse(401, None)], attempt_cost=5.0)
    cluster = cluster_for(script, budget=60)
    with pytest.raises(UnreachableError) as outage:       # the blip's request: its budget names the 401 last
        cluster.get_namespace("a")
    assert C.is_outage(outage.value) and "401" in str(outage.value)
    script.outcomes, asked = [denied], len(script.requests)
    with pytest.raises(ForbiddenError):                    # the next one (a watch's relist): believed at once
        cluster.get_namespace("a")
    assert len(script.requests) == asked + 1


def test_a_request_that_only_meets_doubted_refusals_believes_them_within_the_budget_of_the_blip():
    # found by review: a request starting 59 s after a blip, 401 from it and from /readyz, was doubted for its own
    # whole budget (an outage after ~60 s more, 32 requests); it is believed once the blip's budget has passed
    denied = FakeResponse(401, status_body(401, "Unauthorized", "Unauthorized"))
    script = Script([refused(), OK_NAMESPACE])
    cluster = cluster_for(script, budget=60)
    cluster.get_namespace("a")                              # the blip, then an answer
    script.now += 59
    script.outcomes, asked, started = [denied], len(script.requests), script.now
    with pytest.raises(ForbiddenError):
        cluster.get_namespace("a")
    assert script.now - started < 5 and len(script.requests) - asked < 10


def test_a_watch_refused_without_a_failure_before_it_is_an_answer_with_no_readiness_probe():
    denied = StreamResponse(403, status_body(403, "Forbidden", "no"))
    script = Script([denied])
    with pytest.raises(kubernetes.client.rest.ApiException):
        list(cluster_for(script).stream_lines(WATCH, {"watch": "1"}, 30))
    assert len(script.requests) == 1


def test_a_403_without_an_outage_before_it_is_an_answer_with_no_readiness_probe():
    denied = FakeResponse(403, status_body(403, "Forbidden", "no"))
    script = Script([denied, OK_NAMESPACE])
    with pytest.raises(ForbiddenError):
        cluster_for(script).get_namespace("a")
    assert len(script.requests) == 1
