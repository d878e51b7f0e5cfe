# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Auth option resolution (kubernetes.core conventions) and client configuration; no request is made.

API behaviour (errors, conditional writes, events) is tested against a real apiserver in the lab.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota import cluster as C
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.errors import (
    ForbiddenError,
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


# ---------------------------------------------------------------------------
# resolve_auth: options, then K8S_AUTH_<OPTION>, then K8S_AUTH_<CLIENT NAME>

def test_options_win_over_environment():
    env = {"K8S_AUTH_HOST": "https://env:6443", "K8S_AUTH_API_KEY": "env-token"}
    auth = C.resolve_auth({"host": "https://opt:6443/", "api_key": None}, env)
    assert auth == {"host": "https://opt:6443", "api_key": "env-token"}


def test_every_environment_variable_is_read():
    env = {
        "K8S_AUTH_KUBECONFIG": "/k/config", "K8S_AUTH_CONTEXT": "ctx", "K8S_AUTH_HOST": "https://h",
        "K8S_AUTH_API_KEY": "t", "K8S_AUTH_USERNAME": "u", "K8S_AUTH_PASSWORD": "p",
        "K8S_AUTH_VERIFY_SSL": "no", "K8S_AUTH_SSL_CA_CERT": "/ca.pem", "K8S_AUTH_CERT_FILE": "/c.pem",
        "K8S_AUTH_KEY_FILE": "/k.pem", "K8S_AUTH_PROXY": "http://proxy:3128", "K8S_AUTH_NO_PROXY": "localhost",
        "K8S_AUTH_PERSIST_CONFIG": "true", "K8S_AUTH_IMPERSONATE_USER": "alice",
        "K8S_AUTH_IMPERSONATE_GROUPS": "g1,,g2", "K8S_AUTH_PROXY_HEADERS_USER_AGENT": "kvq/1",
        "K8S_AUTH_PROXY_HEADERS_BASIC_AUTH": "u:p",
    }
    assert C.resolve_auth({}, env) == {
        "kubeconfig": "/k/config", "context": "ctx", "host": "https://h", "api_key": "t", "username": "u",
        "password": "p", "validate_certs": False, "ca_cert": "/ca.pem", "client_cert": "/c.pem",
        "client_key": "/k.pem", "proxy": "http://proxy:3128", "no_proxy": "localhost", "persist_config": True,
        "impersonate_user": "alice", "impersonate_groups": ["g1", "g2"],
        "proxy_headers": {"user_agent": "kvq/1", "basic_auth": "u:p"},
    }


def test_option_named_environment_variable_comes_before_the_client_named_one():
    env = {"K8S_AUTH_VALIDATE_CERTS": "false", "K8S_AUTH_VERIFY_SSL": "true",
           "K8S_AUTH_CA_CERT": "/a.pem", "K8S_AUTH_SSL_CA_CERT": "/b.pem",
           "K8S_AUTH_CLIENT_CERT": "/c1", "K8S_AUTH_CERT_FILE": "/c2",
           "K8S_AUTH_CLIENT_KEY": "/k1", "K8S_AUTH_KEY_FILE": "/k2"}
    auth = C.resolve_auth({}, env)
    assert auth == {"validate_certs": False, "ca_cert": "/a.pem", "client_cert": "/c1", "client_key": "/k1"}


def test_empty_environment_value_falls_through():
    assert C.resolve_auth({}, {"K8S_AUTH_VALIDATE_CERTS": "", "K8S_AUTH_VERIFY_SSL": "0"}) == {
        "validate_certs": False}


@pytest.mark.parametrize("text,expected", [("0", False), ("false", False), ("No", False), ("FALSE", False),
                                           ("1", True), ("yes", True), ("true", True), ("anything", True)])
def test_boolean_environment_values(text, expected):
    assert C.resolve_auth({}, {"K8S_AUTH_VERIFY_SSL": text})["validate_certs"] is expected


def test_aliases_are_accepted():
    auth = C.resolve_auth({"verify_ssl": False, "ssl_ca_cert": "/ca", "cert_file": "/c", "key_file": "/k"}, {})
    assert auth == {"validate_certs": False, "ca_cert": "/ca", "client_cert": "/c", "client_key": "/k"}


def test_false_option_is_kept_and_not_replaced_by_environment():
    assert C.resolve_auth({"validate_certs": False}, {"K8S_AUTH_VERIFY_SSL": "true"})["validate_certs"] is False


def test_nothing_given_gives_nothing():
    assert C.resolve_auth({}, {}) == {}
    assert C.resolve_auth(None, {"UNRELATED": "1"}) == {}


def test_kubeconfig_dict_passes_through():
    assert C.resolve_auth({"kubeconfig": KUBECONFIG}, {})["kubeconfig"] is KUBECONFIG


def test_impersonate_groups_given_as_text():
    assert C.resolve_auth({"impersonate_groups": "a,b"}, {})["impersonate_groups"] == ["a", "b"]


# ---------------------------------------------------------------------------
# config_source: explicit credentials, else kubeconfig/context, else in-cluster then default kubeconfig

@pytest.mark.parametrize("auth,source", [
    ({"host": "https://h", "api_key": "t"}, "explicit"),
    ({"host": "https://h", "username": "u", "password": "p"}, "explicit"),
    ({"host": "https://h", "client_cert": "/c", "client_key": "/k"}, "explicit"),
    ({"host": "https://h", "api_key": "t", "kubeconfig": "/k"}, "explicit"),
    ({"host": "https://h"}, "default"),
    ({"api_key": "t"}, "default"),
    ({"kubeconfig": "/k"}, "kubeconfig"),
    ({"context": "lab"}, "kubeconfig"),
    ({"host": "https://h", "context": "lab"}, "kubeconfig"),
    ({}, "default"),
])
def test_config_source(auth, source):
    assert C.config_source(auth) == source


# ---------------------------------------------------------------------------
# build_configuration / connect (client objects only)

def test_kubeconfig_dict_with_context_and_tls_default_on():
    configuration = C.build_configuration(C.resolve_auth({"kubeconfig": KUBECONFIG}, {}))
    assert configuration.host == "https://127.0.0.1:6443"
    assert configuration.verify_ssl is True
    other = C.build_configuration(C.resolve_auth({"kubeconfig": KUBECONFIG, "context": "other"}, {}))
    assert other.host == "https://10.0.0.1:6443"
    assert other.verify_ssl is False  # the kubeconfig itself said so


def test_options_override_the_kubeconfig(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not really a certificate")
    auth = C.resolve_auth({"kubeconfig": KUBECONFIG, "host": "https://override:6443", "ca_cert": str(ca),
                           "validate_certs": True, "proxy": "http://proxy:3128", "no_proxy": "localhost"}, {})
    configuration = C.build_configuration(auth)
    assert configuration.host == "https://override:6443"
    assert configuration.ssl_ca_cert == str(ca)
    assert configuration.proxy == "http://proxy:3128" and configuration.no_proxy == "localhost"


def test_host_and_api_key_need_no_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    env = {"K8S_AUTH_HOST": "https://h:6443/", "K8S_AUTH_API_KEY": "tok"}
    configuration = C.build_configuration(C.resolve_auth({}, env))
    assert configuration.host == "https://h:6443"
    assert configuration.verify_ssl is True
    assert configuration.api_key["authorization"] == "Bearer tok"
    assert configuration.auth_settings()["BearerToken"]["value"] == "Bearer tok"


def test_kubeconfig_file_path(tmp_path):
    import yaml
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    configuration = C.build_configuration(C.resolve_auth({}, {"K8S_AUTH_KUBECONFIG": str(path)}))
    assert configuration.host == "https://127.0.0.1:6443"


def test_missing_kubeconfig_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        C.build_configuration({"kubeconfig": str(tmp_path / "nope")})
    with pytest.raises(InputError, match="context"):
        C.build_configuration({"kubeconfig": KUBECONFIG, "context": "nope"})


def test_nothing_configured_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(UnreachableError) as err:
        C.build_configuration({})
    assert "K8S_AUTH_KUBECONFIG" in str(err.value)


def test_connect_counts_and_impersonates_without_requests():
    cluster = C.connect({"kubeconfig": KUBECONFIG, "impersonate_user": "alice",
                         "impersonate_groups": ["g1", "g2"]}, environ={})
    assert cluster.request_count == 0
    assert cluster.host == "https://127.0.0.1:6443"
    assert ("Impersonate-Group", "g1") in cluster.extra_headers and ("Impersonate-Group", "g2") in cluster.extra_headers
    assert ("Impersonate-User", "alice") in cluster.extra_headers
    headers = C._header_dict({"Accept": "application/json"})
    headers.add("Impersonate-Group", "g1")
    headers.add("Impersonate-Group", "g2")
    assert headers.getlist("Impersonate-Group") == ["g1", "g2"]


def test_missing_library_is_reported_at_connect(monkeypatch):
    monkeypatch.setattr(C, "HAS_KUBERNETES", False)
    monkeypatch.setattr(C, "KUBERNETES_IMPORT_ERROR", "No module named 'kubernetes'")
    with pytest.raises(KvquotaError) as err:
        C.connect({"host": "https://h", "api_key": "t"})
    assert "the Python library 'kubernetes' is required" in str(err.value)
    assert "Fix: pip install kubernetes" in str(err.value)


def test_object_paths():
    assert C.object_path({"kind": "Namespace", "metadata": {"name": "a"}}) == "/api/v1/namespaces/a"
    assert C.object_path({"apiVersion": "v1", "kind": "ResourceQuota",
                          "metadata": {"name": "q", "namespace": "a"}}) == "/api/v1/namespaces/a/resourcequotas/q"
    assert C.object_path({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": "l", "namespace": "a"}}) == \
        "/apis/coordination.k8s.io/v1/namespaces/a/leases/l"


class _Refusal(Exception):
    """What map_error reads from an ApiException: status, reason, body."""

    def __init__(self, status, message):
        super(_Refusal, self).__init__(message)
        self.status = status
        self.reason = "Forbidden"
        self.body = '{"kind": "Status", "message": %s}' % json.dumps(message)


def test_admission_policy_refusal_is_not_reported_as_missing_rbac():
    message = ("resourcequotas \"default-c7k2p\" is forbidden: ValidatingAdmissionPolicy "
               "'kvqlab-rancher-quota-lockdown' with binding 'kvqlab-rancher-quota-lockdown' denied request: "
               "resource quotas labelled ... are managed by Rancher")
    err = C.map_error(_Refusal(403, message), "update resourcequota default-c7k2p in namespace c-tenant")
    assert not isinstance(err, ForbiddenError)
    assert str(err).startswith("an admission policy refused to update resourcequota default-c7k2p in namespace "
                               "c-tenant: resourcequotas")
    assert "kvquota.maintenance.install" not in str(err) and "Fix: read the policy's message" in str(err)
    rbac = C.map_error(_Refusal(403, 'resourcequotas "q" is forbidden: User "u" cannot update resource'), "update q")
    assert isinstance(rbac, ForbiddenError) and "kvquota.maintenance.install" in str(rbac)
