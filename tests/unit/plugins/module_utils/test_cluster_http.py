# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Cluster puts on the wire, through the kubernetes client installed (make pytest-units: the newest; make
units-kubernetes-floor: kubernetes 24.2.0, the floor of meta/requirements.txt): a local HTTP server records each
request. The method, path and query, the bearer token, one Impersonate-User and every Impersonate-Group (a
header that repeats), the JSON body; a 404 and a 409 come back as the core's errors. The expected requests are
written out here, as an API server reads them."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qsl, urlsplit

import kubernetes
import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.client import cluster as cluster_mod


class _Recorder(BaseHTTPRequestHandler):
    requests = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        self.requests.append({"method": self.command, "path": url.path, "query": parse_qsl(url.query),
                              "headers": self.headers, "body": json.loads(body) if body else None})
        status, answer = {"/api/v1/namespaces/gone": (404, {"kind": "Status", "code": 404, "reason": "NotFound"}),
                          "/api/v1/namespaces/t/configmaps/busy": (409, {"kind": "Status", "code": 409,
                                                                         "reason": "Conflict"}),
                          "/api/v1/namespaces/t/resourcequotas": (403, {
                              "kind": "Status", "code": 403, "reason": "Forbidden",
                              "message": 'resourcequotas is forbidden: User "system:serviceaccount:t:unbound" cannot '
                                         'list resource "resourcequotas" in API group "" in the namespace "t"'})
                          }.get(url.path, (200, {"kind": "ConfigMap", "metadata": {"name": "x"}}))
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    _Recorder.requests = []
    httpd = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % httpd.server_address[1], _Recorder.requests
    httpd.shutdown()
    httpd.server_close()


class _HeaderName(str):
    """A header name that is equal to another but never the same dict key: kubernetes.core's get_api_client
    sets a repeated header (Impersonate-Group, once per group) as default headers under such keys."""

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


def _cluster(host):
    configuration = kubernetes.client.Configuration()
    configuration.host = host
    configuration.api_key = {"authorization": "tok-1"}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    api_client = kubernetes.client.ApiClient(configuration)
    api_client.set_default_header("Impersonate-User", "alice")
    for group in ("g1", "g2"):
        api_client.set_default_header(_HeaderName("Impersonate-Group"), group)
    return cluster_mod.Cluster(api_client, outage_budget=0)


def test_a_get_carries_the_query_the_token_and_every_impersonation_header(server):
    host, requests = server
    cluster = _cluster(host)
    assert cluster.get_custom("kubevirt.io", "v1", "virtualmachineinstances", "vm-1", "t") == {
        "kind": "ConfigMap", "metadata": {"name": "x"}}
    cluster.request("GET", "/api/v1/pods", query={"labelSelector": "kubevirt.io=virt-launcher,a!=b",
                                                  "fieldSelector": "spec.nodeName=node-1", "limit": 500})
    first, second = requests
    assert (first["method"], first["path"], first["query"]) == (
        "GET", "/apis/kubevirt.io/v1/namespaces/t/virtualmachineinstances/vm-1", [])
    assert second["query"] == [("labelSelector", "kubevirt.io=virt-launcher,a!=b"),
                               ("fieldSelector", "spec.nodeName=node-1"), ("limit", "500")]
    for request in requests:
        headers = request["headers"]
        assert headers.get("Authorization") == "Bearer tok-1"
        assert headers.get_all("Impersonate-User") == ["alice"]
        assert sorted(headers.get_all("Impersonate-Group")) == ["g1", "g2"]
        assert headers.get("Accept") == "application/json"
    assert cluster.request_count == 2


def test_a_write_carries_its_json_body_and_content_type(server):
    host, requests = server
    cluster = _cluster(host)
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "t", "resourceVersion": "7"}, "data": {"k": "v"}}
    cluster.request("PUT", "/api/v1/namespaces/t/configmaps/x", body=body)
    cluster.request("PATCH", "/api/v1/namespaces/t/configmaps/x", body={"data": {"k": "w"}},
                    content_type="application/merge-patch+json")
    put, patch = requests
    assert (put["method"], put["body"], put["headers"].get("Content-Type")) == ("PUT", body, "application/json")
    assert (patch["method"], patch["body"], patch["headers"].get("Content-Type")) == (
        "PATCH", {"data": {"k": "w"}}, "application/merge-patch+json")


def test_answers_outside_2xx_are_the_cores_errors(server):
    host, requests = server
    cluster = _cluster(host)
    with pytest.raises(NotFoundError):
        cluster.get("/api/v1/namespaces/gone", "get namespace gone")
    with pytest.raises(ConflictError):
        cluster.request("PUT", "/api/v1/namespaces/t/configmaps/busy", body={"metadata": {"name": "busy"}})
    # the API server's own words reach the error: who was refused what
    with pytest.raises(ForbiddenError) as err:
        cluster.get("/api/v1/namespaces/t/resourcequotas", "list resourcequotas in namespace t")
    assert 'User "system:serviceaccount:t:unbound" cannot list resource "resourcequotas"' in str(err.value)
    assert [r["method"] for r in requests] == ["GET", "PUT", "GET"]   # an answer is no outage: nothing repeated
