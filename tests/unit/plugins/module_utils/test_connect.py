# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The connection the modules get (kvquota_module.connect, kubernetes.core's public get_api_client): which option or
K8S_AUTH_* variable ends up where in the kubernetes client, what goes on the wire, and the errors.

A fake API server stands behind every connection (urllib3's PoolManager.request, so kubernetes.core's own client
code runs): it answers the discovery get_api_client makes (/version, /apis) and records every request.

The expected values are the kubernetes.core conventions (docs of its k8s_auth_options fragment) and what the
kubernetes client does with a kubeconfig, written out here, never read back from the code under test.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import base64
import json
import os
import tempfile
import threading
from urllib.parse import urlsplit

import pytest
import urllib3
import yaml

from ansible_collections.kvquota.maintenance.plugins.module_utils import kvquota_module as KM
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    InputError,
    KvquotaError,
    UnreachableError,
)

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {"name": "lab", "cluster": {"server": "https://127.0.0.1:6443"}},
        {"name": "other", "cluster": {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True}},
    ],
    "users": [{"name": "ops", "user": {"token": "tok-ops"}}],
    "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "ops"}},
                 {"name": "other", "context": {"cluster": "other", "user": "ops"}}],
    "current-context": "lab",
}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    """No K8S_AUTH_* variable, no pod, and no default kubeconfig but the ones a test sets."""
    for name in list(os.environ):
        if name.startswith("K8S_AUTH_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-default-kubeconfig"))
    # the client reads KUBECONFIG once, at import
    monkeypatch.setattr(KM.kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION",
                        str(tmp_path / "no-default-kubeconfig"))


DISCOVERY = {
    "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.13"},
    "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
}


class FakeServer(object):
    """What the fake API server received, and what it answers: DISCOVERY, {} elsewhere, or answers[path] (a list
    of (status, body) or exceptions, taken in turn)."""

    def __init__(self):
        self.sent = []
        self.answers = {}
        self.hang = None

    def paths(self):
        return [(request["method"], urlsplit(request["url"]).path) for request in self.sent]

    def request(self, method, url, *args, **kwargs):
        headers = kwargs.get("headers") or {}
        self.sent.append({"method": method, "url": url, "headers": headers})
        path = urlsplit(url).path
        if self.hang is not None:
            self.hang.wait(30)
            # the attempt connect left behind ends here, before it could reach the next test's server
            raise urllib3.exceptions.ProtocolError("the test is over")
        pending = self.answers.get(path)
        status, body = pending.pop(0) if pending else (200, DISCOVERY.get(path, {}))
        if isinstance(status, BaseException):
            raise status
        return urllib3.HTTPResponse(body=json.dumps(body).encode(), status=status, preload_content=True,
                                    headers={"Content-Type": "application/json"})


@pytest.fixture(autouse=True)
def server(monkeypatch, tmp_path):
    fake = FakeServer()
    monkeypatch.setattr(urllib3.PoolManager, "request", fake.request)
    # kubernetes.core's discovery cache file (in the temporary directory) would spare later tests their requests
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield fake
    if fake.hang is not None:
        fake.hang.set()


def header_values(headers, name):
    """Every value of a header as sent (a header may repeat: urllib3's HTTPHeaderDict)."""
    if hasattr(headers, "getlist"):
        return headers.getlist(name)
    return [value for key, value in headers.items() if key.lower() == name.lower()]


def files(tmp_path, *names):
    """Paths of files that exist (kubernetes.core reads the CA, certificate and key files when it connects)."""
    paths = []
    for name in names:
        path = tmp_path / name
        # its own content: kubernetes.core shares one client between connections whose files read the same
        path.write_text("not really a certificate: %s" % path)
        paths.append(str(path))
    return paths


def set_env(monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def bearer(cluster):
    return cluster.configuration.auth_settings()["BearerToken"]["value"]


# ---------------------------------------------------------------------------
# options, then K8S_AUTH_<OPTION>, then K8S_AUTH_<CLIENT NAME>

def test_options_win_over_environment(monkeypatch):
    set_env(monkeypatch, {"K8S_AUTH_HOST": "https://env:6443", "K8S_AUTH_API_KEY": "env-token"})
    cluster = KM.connect({"host": "https://opt:6443/", "api_key": None})
    assert cluster.host == "https://opt:6443"
    assert bearer(cluster) == "Bearer env-token"


def test_every_environment_variable_is_read(monkeypatch, tmp_path, server):
    ca, cert, key = files(tmp_path, "ca.pem", "c.pem", "k.pem")
    set_env(monkeypatch, {
        "K8S_AUTH_HOST": "https://h", "K8S_AUTH_API_KEY": "t", "K8S_AUTH_USERNAME": "u", "K8S_AUTH_PASSWORD": "p",
        "K8S_AUTH_VERIFY_SSL": "no", "K8S_AUTH_SSL_CA_CERT": ca, "K8S_AUTH_CERT_FILE": cert,
        "K8S_AUTH_KEY_FILE": key, "K8S_AUTH_PROXY": "http://proxy:3128", "K8S_AUTH_NO_PROXY": "localhost",
        "K8S_AUTH_IMPERSONATE_USER": "alice", "K8S_AUTH_IMPERSONATE_GROUPS": "g1,,g2",
        "K8S_AUTH_PROXY_HEADERS_USER_AGENT": "kvq/1", "K8S_AUTH_PROXY_HEADERS_BASIC_AUTH": "u:p",
        # host + api_key are enough: this kubeconfig is never read
        "K8S_AUTH_KUBECONFIG": "/nonexistent/config", "K8S_AUTH_CONTEXT": "ctx",
    })
    cluster = KM.connect({})
    configuration = cluster.configuration
    assert configuration.host == "https://h"
    assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer t"
    assert (configuration.username, configuration.password) == ("u", "p")
    assert configuration.verify_ssl is False
    assert (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file) == (ca, cert, key)
    assert (configuration.proxy, configuration.no_proxy) == ("http://proxy:3128", "localhost")
    assert configuration.proxy_headers == {"user-agent": "kvq/1",
                                           "authorization": "Basic " + base64.b64encode(b"u:p").decode()}
    cluster.get("/api/v1/namespaces/x", "read namespace x")
    headers = server.sent[-1]["headers"]
    assert header_values(headers, "Impersonate-User") == ["alice"]
    assert header_values(headers, "Impersonate-Group") == ["g1", "g2"]


def test_option_named_environment_variable_comes_before_the_client_named_one(monkeypatch, tmp_path):
    a, b, c1, c2, k1, k2 = files(tmp_path, "a.pem", "b.pem", "c1", "c2", "k1", "k2")
    set_env(monkeypatch, {"K8S_AUTH_HOST": "https://h", "K8S_AUTH_API_KEY": "t",
                          "K8S_AUTH_VALIDATE_CERTS": "false", "K8S_AUTH_VERIFY_SSL": "true",
                          "K8S_AUTH_CA_CERT": a, "K8S_AUTH_SSL_CA_CERT": b,
                          "K8S_AUTH_CLIENT_CERT": c1, "K8S_AUTH_CERT_FILE": c2,
                          "K8S_AUTH_CLIENT_KEY": k1, "K8S_AUTH_KEY_FILE": k2})
    configuration = KM.connect({}).configuration
    assert configuration.verify_ssl is False
    assert (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file) == (a, c1, k1)


def test_empty_environment_value_falls_through(monkeypatch):
    set_env(monkeypatch, {"K8S_AUTH_HOST": "https://h", "K8S_AUTH_API_KEY": "t",
                          "K8S_AUTH_VALIDATE_CERTS": "", "K8S_AUTH_VERIFY_SSL": "0"})
    assert KM.connect({}).configuration.verify_ssl is False


@pytest.mark.parametrize("text,expected", [("0", False), ("false", False), ("No", False), ("FALSE", False),
                                           ("1", True), ("yes", True), ("true", True), ("anything", True)])
def test_boolean_environment_values(monkeypatch, text, expected):
    set_env(monkeypatch, {"K8S_AUTH_HOST": "https://h", "K8S_AUTH_API_KEY": "t", "K8S_AUTH_VERIFY_SSL": text})
    assert KM.connect({}).configuration.verify_ssl is expected


def test_client_named_aliases_are_accepted(tmp_path):
    ca, cert, key = files(tmp_path, "ca", "c", "k")
    configuration = KM.connect({"host": "https://h", "api_key": "t", "verify_ssl": False, "ssl_ca_cert": ca,
                                "cert_file": cert, "key_file": key}).configuration
    assert configuration.verify_ssl is False
    assert (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file) == (ca, cert, key)


def test_false_option_is_kept_and_not_replaced_by_environment(monkeypatch):
    set_env(monkeypatch, {"K8S_AUTH_VERIFY_SSL": "true"})
    assert KM.connect({"host": "https://h", "api_key": "t", "validate_certs": False}).configuration.verify_ssl is False


def test_impersonation_options(server):
    cluster = KM.connect({"kubeconfig": KUBECONFIG, "impersonate_user": "alice", "impersonate_groups": ["g1", "g2"]})
    cluster.get("/api/v1/namespaces/x", "read namespace x")
    headers = server.sent[-1]["headers"]
    assert header_values(headers, "Impersonate-User") == ["alice"]
    assert header_values(headers, "Impersonate-Group") == ["g1", "g2"]
    assert header_values(headers, "Authorization") == ["Bearer tok-ops"]
    plain = KM.connect({"kubeconfig": KUBECONFIG, "context": "other"})
    plain.get("/api/v1/namespaces/x", "read namespace x")
    headers = server.sent[-1]["headers"]
    assert header_values(headers, "Impersonate-User") == header_values(headers, "Impersonate-Group") == []


# ---------------------------------------------------------------------------
# where the connection comes from

def test_kubeconfig_dict_with_context_and_tls_default_on():
    cluster = KM.connect({"kubeconfig": KUBECONFIG})
    assert cluster.host == "https://127.0.0.1:6443"
    assert cluster.configuration.verify_ssl is True
    assert bearer(cluster) == "Bearer tok-ops"
    other = KM.connect({"kubeconfig": KUBECONFIG, "context": "other"})
    assert other.host == "https://10.0.0.1:6443"
    assert other.configuration.verify_ssl is False  # the kubeconfig itself said so


CERTIFICATE_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:6443"}}],
    "users": [{"name": "ops", "user": {"client-certificate-data": base64.b64encode(b"CERT").decode(),
                                       "client-key-data": base64.b64encode(b"KEY").decode()}}],
    "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "ops"}}],
    "current-context": "lab",
}


def test_options_override_the_kubeconfig(tmp_path, server):
    ca, = files(tmp_path, "ca.pem")
    cluster = KM.connect({"kubeconfig": CERTIFICATE_KUBECONFIG, "host": "https://override:6443", "ca_cert": ca,
                          "validate_certs": True, "proxy": "http://proxy:3128", "no_proxy": "localhost"})
    configuration = cluster.configuration
    assert configuration.host == "https://override:6443"
    assert configuration.ssl_ca_cert == ca
    assert configuration.proxy == "http://proxy:3128" and configuration.no_proxy == "localhost"
    assert open(configuration.cert_file).read() == "CERT"
    cluster.get("/api/v1/namespaces/x", "read namespace x")
    assert [request["url"] for request in server.sent] == [
        "https://override:6443/version", "https://override:6443/apis", "https://override:6443/api/v1/namespaces/x"]


def test_a_token_kubeconfig_keeps_its_own_server_and_tls(tmp_path, server):
    """The kubernetes client re-applies a token kubeconfig's server, CA, TLS choice and proxy before every request
    (its token refresh hook), over the options: kubernetes.core's own modules (k8s_drain in the roles) talk to the
    kubeconfig's server then too, and so does this collection, so that one play never talks to two servers."""
    ca, = files(tmp_path, "ca.pem")
    cluster = KM.connect({"kubeconfig": KUBECONFIG, "host": "https://override:6443", "ca_cert": ca})
    assert cluster.host == "https://127.0.0.1:6443"
    assert cluster.configuration.ssl_ca_cert is None
    cluster.get("/api/v1/namespaces/x", "read namespace x")
    assert {urlsplit(request["url"]).netloc for request in server.sent} == {"127.0.0.1:6443"}
    assert bearer(cluster) == "Bearer tok-ops"


def test_host_and_api_key_need_no_kubeconfig(monkeypatch):
    set_env(monkeypatch, {"K8S_AUTH_HOST": "https://h:6443/", "K8S_AUTH_API_KEY": "tok"})
    cluster = KM.connect({})
    assert cluster.host == "https://h:6443"
    assert cluster.configuration.verify_ssl is True
    assert bearer(cluster) == "Bearer tok"


def test_kubeconfig_file_path_from_environment(monkeypatch, tmp_path):
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    set_env(monkeypatch, {"K8S_AUTH_KUBECONFIG": str(path), "K8S_AUTH_CONTEXT": "other"})
    assert KM.connect({}).host == "https://10.0.0.1:6443"


def test_default_kubeconfig_is_the_last_resort(monkeypatch, tmp_path):
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    monkeypatch.setattr(KM.kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    assert KM.connect({}).host == "https://127.0.0.1:6443"


def test_in_cluster_service_account_comes_before_the_default_kubeconfig(monkeypatch, tmp_path):
    """In a pod (AWX's container group): the service account's token and CA, the API server from the
    KUBERNETES_SERVICE_* variables the kubelet sets."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token")
    ca.write_text("not really a certificate")
    monkeypatch.setattr(KM.kubernetes.config.incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(KM.kubernetes.config.incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    set_env(monkeypatch, {"KUBERNETES_SERVICE_HOST": "10.43.0.1", "KUBERNETES_SERVICE_PORT": "443"})
    default = tmp_path / "config"
    default.write_text(yaml.safe_dump(KUBECONFIG))
    monkeypatch.setattr(KM.kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(default))
    cluster = KM.connect({})
    assert cluster.host == "https://10.43.0.1:443"
    assert bearer(cluster) == "bearer sa-token"   # the client's in-cluster loader writes the scheme in lower case
    assert cluster.configuration.ssl_ca_cert == str(ca)
    # a kubeconfig given still wins over the pod's service account
    assert KM.connect({"kubeconfig": KUBECONFIG}).host == "https://127.0.0.1:6443"


def test_one_connection_inherits_nothing_from_another():
    """kubernetes.core configures through the client's process-wide default: a second connection in the same
    process (the lab tests, a future action plugin) must not keep the first one's server, token or TLS choice."""
    first = KM.connect({"kubeconfig": KUBECONFIG, "context": "other"})
    assert first.configuration.verify_ssl is False
    second = KM.connect({"host": "https://h", "api_key": "t"})
    assert second.configuration.verify_ssl is True
    assert bearer(second) == "Bearer t"
    assert second.host == "https://h"


def test_connect_makes_only_kubernetes_cores_discovery_requests(server):
    cluster = KM.connect({"host": "https://discovery-only:6443", "api_key": "t"})
    assert server.paths() == [("GET", "/version"), ("GET", "/apis")]
    assert all(header_values(request["headers"], "Authorization") == ["Bearer t"] for request in server.sent)
    assert cluster.request_count == 0   # the core's own requests start after connect
    # the discovery's GET /version tells which Kubernetes rules quota follows; nothing more is asked for it
    assert cluster.server_version["gitVersion"] == "v1.33.13" and cluster.kubernetes_minor == 33


def test_a_blip_at_connect_is_ridden_through(server):
    server.answers["/version"] = [(503, {"kind": "Status", "code": 503})]
    cluster = KM.connect({"host": "https://blip:6443", "api_key": "t"})
    assert cluster.host == "https://blip:6443"
    assert server.paths()[:2] == [("GET", "/version"), ("GET", "/version")]


def test_an_api_server_down_at_connect_is_one_clear_error_naming_it(server):
    refused = urllib3.exceptions.MaxRetryError(
        urllib3.HTTPSConnectionPool("127.0.0.1", 1), "/version",
        urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection: [Errno 111] "
                                                    "Connection refused"))
    server.answers["/version"] = [(refused, None)] * 3
    with pytest.raises(UnreachableError) as err:
        KM.connect({"host": "https://127.0.0.1:1", "api_key": "t"}, outage_budget=0)
    assert str(err.value).startswith("cannot reach the API server to discover the API (/version, /apis) "
                                     "(API server https://127.0.0.1:1): [Errno 111] Connection refused")
    assert len(server.sent) == 1


def test_refused_credentials_at_connect_are_not_retried(server):
    server.answers["/version"] = [(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})] * 5
    with pytest.raises(KvquotaError) as err:
        KM.connect({"host": "https://refusing:6443", "api_key": "stale"})
    assert str(err.value).startswith("the API server refused the credentials (401 Unauthorized) while trying to "
                                     "discover the API")
    assert "stale" not in str(err.value)
    assert len(server.sent) == 1


def test_an_api_server_that_never_answers_ends_with_the_timeout(server):
    """kubernetes.core's discovery sets no timeout: connect ends each attempt itself."""
    server.hang = threading.Event()
    with pytest.raises(UnreachableError) as err:
        KM.connect({"host": "https://silent:6443", "api_key": "t"}, timeout=(0.1, 0.2), outage_budget=0)
    assert str(err.value).startswith("timed out trying to discover the API")


def test_a_missing_ca_file_is_named_and_nothing_is_sent(server, tmp_path):
    missing = str(tmp_path / "no-ca.pem")
    with pytest.raises(InputError) as err:
        KM.connect({"host": "https://h", "api_key": "t", "ca_cert": missing})
    assert str(err.value).startswith("cannot read %s: No such file or directory" % missing)
    assert "ca_cert" in err.value.fix
    assert server.sent == []


# ---------------------------------------------------------------------------
# errors: the problem and the fix, the kubeconfig named by its path, never a secret

def test_missing_kubeconfig_names_its_path(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(InputError) as err:
        KM.connect({"kubeconfig": missing})
    assert str(err.value).startswith("kubeconfig %s does not exist" % missing)
    assert "K8S_AUTH_KUBECONFIG" in err.value.fix


def test_missing_kubeconfig_from_environment(monkeypatch):
    set_env(monkeypatch, {"K8S_AUTH_KUBECONFIG": "/nonexistent/kvq.kubeconfig"})
    with pytest.raises(InputError, match="kubeconfig /nonexistent/kvq.kubeconfig does not exist"):
        KM.connect({})


def test_unknown_context_is_named_without_the_token():
    with pytest.raises(InputError) as err:
        KM.connect({"kubeconfig": KUBECONFIG, "context": "nope"})
    text = str(err.value)
    assert text.startswith("cannot load the kubeconfig given as a dict context nope: ")
    assert "kubectl config get-contexts" in text
    assert "tok-ops" not in text


def test_nothing_configured_is_one_clear_error():
    with pytest.raises(UnreachableError) as err:
        KM.connect({})
    assert str(err.value).startswith("no Kubernetes connection configured: not running in a pod")
    assert "K8S_AUTH_KUBECONFIG" in str(err.value) and "K8S_AUTH_API_KEY" in str(err.value)


def test_missing_library_is_reported_at_connect(monkeypatch):
    monkeypatch.setattr(KM, "HAS_KUBERNETES", False)
    with pytest.raises(KvquotaError) as err:
        KM.connect({"host": "https://h", "api_key": "t"})
    assert "the Python library 'kubernetes' is required" in str(err.value)
    assert "Fix: pip install kubernetes" in str(err.value)


# ---------------------------------------------------------------------------
# the option spec and redaction

def test_auth_options_are_kubernetes_cores_with_the_kubeconfig_path_visible():
    names = ["kubeconfig", "context", "host", "api_key", "username", "password", "validate_certs", "ca_cert",
             "client_cert", "client_key", "proxy", "no_proxy", "proxy_headers", "persist_config",
             "impersonate_user", "impersonate_groups"]
    assert sorted(KM.AUTH_ARG_SPEC) == sorted(names)
    assert not KM.AUTH_ARG_SPEC["kubeconfig"].get("no_log")
    assert KM.AUTH_ARG_SPEC["api_key"]["no_log"] is True and KM.AUTH_ARG_SPEC["password"]["no_log"] is True
    assert KM.AUTH_ARG_SPEC["proxy_headers"]["options"]["basic_auth"]["no_log"] is True
    assert KM.AUTH_ARG_SPEC["validate_certs"]["aliases"] == ["verify_ssl"]


SECRET_KUBECONFIG = {
    "apiVersion": "v1",
    "clusters": [{"name": "c", "cluster": {"server": "https://s", "certificate-authority-data": "Q0EtREFUQQ=="}}],
    "users": [{"name": "u", "user": {"token": "tok-1", "client-key-data": "S0VZ", "client-certificate-data": "Q0VSVA==",
                                     "username": "admin", "password": "pw-1"}}],
    "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
}
EXPECTED_SECRETS = {"Q0EtREFUQQ==", "tok-1", "S0VZ", "Q0VSVA==", "pw-1"}


def test_secrets_of_a_dict_kubeconfig_are_found():
    assert KM.kubeconfig_secrets(SECRET_KUBECONFIG) == EXPECTED_SECRETS
    assert KM.kubeconfig_secrets("/path/to/kubeconfig") == set()
    assert KM.kubeconfig_secrets(None) == set()


def test_secrets_are_found_without_kubernetes_cores_helper(monkeypatch):
    """kubernetes.core < 6.3 has no extract_sensitive_values_from_kubeconfig: the collection's own walk finds the
    same values."""
    monkeypatch.setattr(KM, "extract_sensitive_values_from_kubeconfig", None)
    assert KM.kubeconfig_secrets(SECRET_KUBECONFIG) == EXPECTED_SECRETS


def test_the_discovery_cache_is_private(server, tmp_path):
    """kubernetes.core writes its discovery cache under a name any local user can predict in the temporary directory
    (tmp_path here): connect reads nothing from there and writes nothing through it; its own directory is private."""
    planted = tmp_path / "planted-target"
    (tmp_path / ("k8srcp-%s.json" % ("0" * 64))).symlink_to(planted)   # a dangling symlink another user might plant
    KM.connect({"host": "https://private:6443", "api_key": "t"})
    assert server.paths() == [("GET", "/version"), ("GET", "/apis")]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[0] == "k8srcp-%s.json" % ("0" * 64) and len(names) == 2, names
    private = tmp_path / names[1]
    assert names[1].startswith("kvquota-connect-") and oct(private.stat().st_mode & 0o777) == "0o700"
    assert [p.name for p in private.iterdir() if p.name.startswith("k8srcp-")]   # the cache went there
    assert not planted.exists()
    assert tempfile.tempdir == str(tmp_path)
