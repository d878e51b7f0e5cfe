# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bad input to the real modules and the filter, run by ansible-playbook against the lab: each one must fail
with ONE line that names the problem and says "Fix:", and must change nothing (the resourceVersions of every
quota, namespace, VM, VMI, migration, lease and KubeVirt CR of the tenant are compared before and after, and no
kvquota Event may appear).

Modules authenticate through K8S_AUTH_* only: the lab's least-privilege user, or identities made here
(service-account tokens bound to roles/install/files/clusterrole.yml minus one verb) for the RBAC cases.

Run: python3 -m pytest -q tests/integration/test_bad_inputs_lab.py
(uses $KVQ_LAB_RUN_DIR when set, else starts a lab of its own; KVQ_LAB_REQUIRED=1 makes a missing lab fail).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import json
import os
import secrets
import socket
import subprocess

import pytest
import yaml

import modlab as M

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

RBAC_FILES = [str(p) for p in M.kvqlab.default_rbac_files()]
GONE_NS = "kvq-no-such-namespace"


@pytest.fixture(scope="module")
def ns(lab, emu, r):
    """One tenant (scenario a's shape) shared by every case: nothing here may change it."""
    name = "bad-%s" % secrets.token_hex(3)
    M.make_tenant(lab, name)
    yield name
    M.delete_namespace(r, name)


@pytest.fixture(scope="module")
def rejected_migration(r, ns):
    """A migration the real apiserver refused (migrationRejectedByResourceQuota), with its FailedCreate Event."""
    name = M.create_vmim(r, ns, "vm-1")
    M.wait(lambda: M.rejected(M.vmim(r, ns, name)), 30, "migration rejected by quota")
    M.wait(lambda: r.get("/api/v1/namespaces/%s/events" % ns, fieldSelector="reason=FailedCreate")["items"], 10,
           "FailedCreate event")
    return name


def _without(rules, group, resource, verb):
    """rules with verb removed for exactly group/resource (the other resources of that rule keep it)."""
    result = []
    for rule in copy.deepcopy(rules):
        if group in rule.get("apiGroups", []) and resource in rule.get("resources", []) and verb in rule["verbs"]:
            others = [res for res in rule["resources"] if res != resource]
            if others:
                result.append(dict(rule, resources=others))
            verbs = [v for v in rule["verbs"] if v != verb]
            if verbs:
                result.append(dict(rule, resources=[resource], verbs=verbs))
        else:
            result.append(rule)
    return result


@pytest.fixture(scope="module")
def reduced(lab, r, tmp_path_factory):
    """{name: kubeconfig}: service-account identities bound to the shipped least-privilege ClusterRole minus one
    verb (a real bearer token from the TokenRequest API; no restart of the apiserver needed)."""
    # every rule of every shipped role (ClusterRoles and the operator-namespace Role), in one ClusterRole
    rules = []
    for path in RBAC_FILES:
        rules += [rule for doc in M.kvqlab.manifest_objects(path) if doc.get("kind") in ("ClusterRole", "Role")
                  for rule in doc.get("rules") or []]
    variants = {
        "no-list-vmis": ("kubevirt.io", "virtualmachineinstances", "list"),
        "no-update-quotas": ("", "resourcequotas", "update"),
    }
    home = "kvq-rbac-%s" % secrets.token_hex(3)
    r.create("/api/v1/namespaces", {"metadata": {"name": home}})
    made, configs = [], {}
    tmp = tmp_path_factory.mktemp("kvq-reduced")
    for variant, (group, resource, verb) in variants.items():
        name = "%s-%s" % (home, variant)
        r.create("/api/v1/namespaces/%s/serviceaccounts" % home, {"metadata": {"name": variant}})
        r.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": _without(rules, group, resource, verb)})
        r.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": variant, "namespace": home}]})
        # the operator namespace's Role (ledgers and locks) stays whole
        r.create("/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings" % M.OPERATOR_NS, {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": M.OPERATOR_NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kvquota-state"},
            "subjects": [{"kind": "ServiceAccount", "name": variant, "namespace": home}]})
        made.append(name)
        token = r.create("/api/v1/namespaces/%s/serviceaccounts/%s/token" % (home, variant), {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600}})["status"]["token"]
        path = tmp / ("%s.kubeconfig" % variant)
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "lab",
            "clusters": [{"name": "lab", "cluster": {"server": lab.server, "certificate-authority": str(lab.ca_file)}}],
            "users": [{"name": variant, "user": {"token": token}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": variant}}]}))
        os.chmod(str(path), 0o600)
        configs[variant] = str(path)

    # the reduced identity really lacks exactly that verb (and keeps its neighbours)
    def can_i(kubeconfig, *args):
        return subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "auth", "can-i"] + list(args),
                              capture_output=True, text=True, check=False).stdout.strip()
    assert can_i(configs["no-list-vmis"], "list", "virtualmachineinstances.kubevirt.io", "-A") == "no"
    assert can_i(configs["no-list-vmis"], "get", "virtualmachineinstances.kubevirt.io", "-A") == "yes"
    assert can_i(configs["no-update-quotas"], "update", "resourcequotas", "-A") == "no"
    assert can_i(configs["no-update-quotas"], "get", "resourcequotas", "-A") == "yes"
    yield configs
    for name in made:
        r.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + name)
        r.delete("/apis/rbac.authorization.k8s.io/v1/clusterroles/" + name)
    M.delete_namespace(r, home)


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    """A CA certificate that did not sign the lab's serving certificate (made with openssl)."""
    tmp = tmp_path_factory.mktemp("kvq-other-ca")
    crt, key = tmp / "ca.crt", tmp / "ca.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-subj", "/CN=kvq-not-the-lab-ca", "-days", "1"], check=True, capture_output=True)
    return str(crt)


def closed_port():
    """A 127.0.0.1 port nothing listens on."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def expect_failure(r, ns, module, args, kubeconfig, *fragments, **kwargs):
    """Run a module that must fail: one line with Fix: and the fragments; nothing in the cluster changed."""
    scope = {ns, GONE_NS, "kubevirt"}
    before = M.snapshot(r, scope)
    res = M.run_module(module, args, kubeconfig, **kwargs)
    msg = M.assert_one_line_error(res, *fragments)
    M.assert_unchanged(before, M.snapshot(r, scope))
    print("%s: %s" % (module, msg))   # shown with pytest -s / -rP: the messages operators get
    return msg


def headroom(ns, resources, quota="compute"):
    return [{"namespace": ns, "quota": quota, "resources": resources}]


def vm(ns, name="vm-1"):
    return [{"namespace": ns, "name": name}]


# ---------------------------------------------------------------------------
# input the modules refuse (as the least-privilege user)

CASES = [
    # id, module, args(ns), fragments
    ("headroom-malformed-quantity", "kvquota_reserve",
     lambda ns: {"reservation_id": "b1", "headroom": headroom(ns, {"limits.memory": "12Qi"})},
     ["malformed quantity '12Qi'", "limits.memory"]),
    ("headroom-negative-quantity", "kvquota_reserve",
     lambda ns: {"reservation_id": "b1", "headroom": headroom(ns, {"limits.memory": "-1Gi"})},
     ["negative amount of limits.memory"]),
    ("check-unknown-node", "kvquota_check", lambda ns: {"nodes": ["node-99"]},
     ["node 'node-99' not found", "node-1"]),
    ("check-unknown-namespace", "kvquota_check", lambda ns: {"namespaces": [GONE_NS]},
     ["namespace '%s' not found" % GONE_NS]),
    ("reserve-unknown-namespace", "kvquota_reserve",
     lambda ns: {"reservation_id": "b1", "headroom": headroom(GONE_NS, {"limits.memory": "1Gi"})},
     ["namespace %s does not exist" % GONE_NS]),
    ("reserve-unknown-quota", "kvquota_reserve",
     lambda ns: {"reservation_id": "b1", "headroom": headroom(ns, {"limits.memory": "1Gi"}, quota="nope")},
     ["ResourceQuota %s/nope does not exist" % "{ns}"]),
    ("reserve-unknown-vm", "kvquota_reserve", lambda ns: {"reservation_id": "b1", "vms": vm(ns, "vm-404")},
     ["VirtualMachineInstance {ns}/vm-404 not found"]),
    ("reserve-unknown-migration", "kvquota_reserve",
     lambda ns: {"reservation_id": "b1", "migrations": [{"namespace": ns, "name": "mig-404"}]},
     ["mig-404", "not found"]),
    ("check-overhead-ratio-abc", "kvquota_check", lambda ns: {"namespaces": [ns], "overhead_ratio": "abc"},
     ["invalid overhead ratio 'abc'"]),
    ("reserve-overhead-ratio-negative", "kvquota_reserve",
     lambda ns: {"reservation_id": "b1", "vms": vm(ns), "overhead_ratio": "-1"},
     ["invalid overhead ratio '-1'"]),
    ("reserve-ttl-zero", "kvquota_reserve", lambda ns: {"reservation_id": "b1", "vms": vm(ns), "ttl": "0"},
     ["ttl must be longer than zero"]),
    ("reserve-ttl-2-hours", "kvquota_reserve", lambda ns: {"reservation_id": "b1", "vms": vm(ns), "ttl": "2 hours"},
     ["malformed ttl '2 hours'", "2h"]),
    ("reserve-vms-and-headroom", "kvquota_reserve",
     lambda ns: {"reservation_id": "b1", "vms": vm(ns), "headroom": headroom(ns, {"limits.memory": "1Gi"})},
     ["give exactly one of vms, headroom or migrations (got vms, headroom)"]),
    ("reserve-nothing-given", "kvquota_reserve", lambda ns: {"reservation_id": "b1"},
     ["give exactly one of vms, headroom or migrations (got none)"]),
    ("reserve-malformed-safety-margin", "kvquota_reserve",
     lambda ns: {"reservation_id": "b1", "vms": vm(ns), "safety_margin": "ten percent"},
     ["malformed margin 'ten percent'", "10%"]),
    ("reserve-malformed-margin-quantity", "kvquota_reserve",
     lambda ns: {"reservation_id": "b1", "vms": vm(ns), "safety_margin": {"limits.memory": "lots"}},
     ["malformed quantity 'lots'", "margin"]),
    ("check-kubevirt-version-format", "kvquota_check", lambda ns: {"namespaces": [ns], "kubevirt_version": "one.two"},
     ["malformed KubeVirt version 'one.two'", "1.6.3"]),
    ("reserve-kubevirt-version-format", "kvquota_reserve",
     lambda ns: {"reservation_id": "b1", "vms": vm(ns), "kubevirt_version": "latest"},
     ["malformed KubeVirt version 'latest'"]),
    ("check-parallel-migrations-zero", "kvquota_check",
     lambda ns: {"namespaces": [ns], "parallel_migrations_per_cluster": 0},
     ["parallel_migrations_per_cluster must be a whole number of at least 1, got 0"]),
    ("check-per-namespace-cap-malformed", "kvquota_check",
     lambda ns: {"namespaces": [ns], "per_namespace_cap": {"limits.memory": "lots"}},
     ["malformed quantity 'lots'", "per_namespace_cap"]),
    ("migrate-unknown-node", "kvquota_migrate", lambda ns: {"node": "node-99", "batches": [[ns + "/vm-1"]]},
     ["node 'node-99' not found", "kubectl get nodes"]),
    ("migrate-top-up-cap-negative", "kvquota_migrate",
     lambda ns: {"node": "node-1", "batches": [[ns + "/vm-1"]], "top_up_cap": {"limits.memory": "-1Gi"}},
     ["top_up_cap must not be negative", "limits.memory=-1Gi"]),
    ("migrate-ttl-zero", "kvquota_migrate", lambda ns: {"node": "node-1", "batches": [[ns + "/vm-1"]], "ttl": "0"},
     ["ttl must be longer than zero"]),
    ("release-neither-id-nor-expired", "kvquota_release", lambda ns: {},
     ["give exactly one of reservation_id or expired=true"]),
    ("release-both-id-and-expired", "kvquota_release", lambda ns: {"reservation_id": "b1", "expired": True},
     ["give exactly one of reservation_id or expired=true"]),
    # the path shows: only the secrets of a kubeconfig given as a dict are redacted (as kubernetes.core 6.3+ does),
    # not the whole option (kubernetes.core < 6.3 made it no_log, which printed "kubeconfig ******** does not exist")
    ("kubeconfig-option-missing", "kvquota_check",
     lambda ns: {"namespaces": [ns], "kubeconfig": "/nonexistent/kubeconfig"},
     ["kubeconfig /nonexistent/kubeconfig does not exist", "give the path of a readable kubeconfig"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(r, ns, user, case):
    _id, module, args, fragments = case
    expect_failure(r, ns, module, args(ns), user, *[f.replace("{ns}", ns) for f in fragments])


# ---------------------------------------------------------------------------
# cases that need state or another identity

def test_duplicate_reservation_id_with_another_delta(r, ns, user):
    rid = "dup-%s" % secrets.token_hex(2)
    first = M.assert_ok(M.run_module("kvquota_reserve", {"reservation_id": rid,
                                                         "headroom": headroom(ns, {"limits.memory": "1Gi"})}, user))
    assert first["changed"] is True
    try:
        msg = expect_failure(r, ns, "kvquota_reserve", {"reservation_id": rid,
                                                        "headroom": headroom(ns, {"limits.memory": "2Gi"})}, user,
                             "reservation '%s' already holds limits.memory=1Gi" % rid, "limits.memory=2Gi",
                             "new reservation id")
        assert "%s/compute" % ns in msg
    finally:
        M.assert_ok(M.run_module("kvquota_release", {"reservation_id": rid}, user))
    assert M.ledger(r, M.quota(r, ns, "compute")) is None


def test_top_up_cap_exceeded(r, ns, user, rejected_migration):
    msg = expect_failure(r, ns, "kvquota_reserve", {
        "reservation_id": "topup-%s" % secrets.token_hex(2), "migrations": [{"namespace": ns, "name": rejected_migration}],
        "top_up_cap": {"limits.memory": "1Gi"}}, user,
        "exceeds top_up_cap", "%s/compute needs limits.memory=" % ns, "(top_up_cap 1Gi)", "nothing was changed")
    # the shortfall shown is the apiserver's: requested + used - limited of the refusal
    q = M.quota(r, ns, "compute")
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity
    used = parse_quantity(q["status"]["used"]["limits.memory"])
    short = 2 * used - parse_quantity(q["spec"]["hard"]["limits.memory"])   # target pod = source pod
    assert ("limits.memory=%d " % short) in msg or ("limits.memory=%d (" % short) in msg, (short, msg)


def test_api_unreachable(r, ns):
    port = closed_port()
    expect_failure(r, ns, "kvquota_check", {"namespaces": [ns]}, "/nonexistent/unused",
                   "cannot reach the API server", "https://127.0.0.1:%d" % port, "Connection refused",
                   env={"K8S_AUTH_HOST": "https://127.0.0.1:%d" % port, "K8S_AUTH_API_KEY": "abc",
                        "K8S_AUTH_KUBECONFIG": ""})


def test_api_unreachable_on_reserve(r, ns):
    port = closed_port()
    expect_failure(r, ns, "kvquota_reserve", {"reservation_id": "b1", "host": "https://127.0.0.1:%d" % port,
                                              "api_key": "abc", "headroom": headroom(ns, {"limits.memory": "1Gi"})},
                   "/nonexistent/unused", "cannot reach the API server", "127.0.0.1:%d" % port)


def test_kubeconfig_from_environment_missing(r, ns):
    expect_failure(r, ns, "kvquota_reserve", {"reservation_id": "b1", "vms": vm(ns)}, "/nonexistent/kvq.kubeconfig",
                   "kubeconfig /nonexistent/kvq.kubeconfig does not exist", "K8S_AUTH_KUBECONFIG")


def test_kubeconfig_dict_secrets_are_redacted_and_the_rest_is_not(r, ns, user):
    """A kubeconfig given as a dict: its token and certificate data never show, the rest of it does (in -vvv's
    module_args), as kubernetes.core 6.3+ redacts; a good one connects."""
    config = yaml.safe_load(open(str(user)))
    token = config["users"][0]["user"]["token"]
    server = config["clusters"][0]["cluster"]["server"]
    assert len(token) > 8
    verbose = {"ANSIBLE_VERBOSITY": "3"}   # prints each result with its invocation.module_args
    before = M.snapshot(r, {ns})
    res = M.run_module("kvquota_check", {"namespaces": [ns], "kubeconfig": config, "context": "nope"},
                       "/nonexistent/unused", env=verbose)
    M.assert_one_line_error(res, "cannot load the kubeconfig given as a dict context nope",
                            "kubectl config get-contexts")
    M.assert_unchanged(before, M.snapshot(r, {ns}))
    ok = M.assert_ok(M.run_module("kvquota_check", {"namespaces": [ns], "kubeconfig": config}, "/nonexistent/unused",
                                  env=verbose))
    for result in (res, ok):
        output = json.dumps(result) + result.stdout + result.stderr
        assert token not in output
        assert '"server": "%s"' % server in result.stdout, result.stdout[-3000:]
        assert '"token": "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"' in result.stdout


def test_wrong_ca(r, ns, user, other_ca):
    expect_failure(r, ns, "kvquota_check", {"namespaces": [ns], "ca_cert": other_ca}, user,
                   "TLS verification failed", "CERTIFICATE_VERIFY_FAILED", "ca_cert")


def test_wrong_ca_from_environment(r, ns, user, other_ca):
    expect_failure(r, ns, "kvquota_release", {"reservation_id": "b1"}, user,
                   "TLS verification failed", "ca_cert", env={"K8S_AUTH_SSL_CA_CERT": other_ca})


def test_rbac_forbidden_read(r, ns, reduced):
    expect_failure(r, ns, "kvquota_check", {"namespaces": [ns]}, reduced["no-list-vmis"],
                   "forbidden", "virtualmachineinstances", "kvquota.maintenance.install")


def test_rbac_forbidden_write(r, ns, reduced):
    """Everything is read and the lease taken, the quota write is refused: nothing stays changed (the lease is
    given back, no Event, no ledger)."""
    msg = expect_failure(r, ns, "kvquota_reserve", {"reservation_id": "b1",
                                                    "headroom": headroom(ns, {"limits.memory": "1Gi"})},
                         reduced["no-update-quotas"], "forbidden", "resourcequotas", "kvquota.maintenance.install")
    assert "update" in msg
    assert not r.get("/apis/coordination.k8s.io/v1/namespaces/%s/leases" % ns)["items"]
    assert M.locks(r) == [] and M.ledger(r, M.quota(r, ns, "compute")) is None


# ---------------------------------------------------------------------------
# the filter

FILTER_CASES = [
    ("filter-kubevirt-version-format", "kubevirt_version='abc'", None,
     ["malformed KubeVirt version 'abc'"]),
    ("filter-overhead-ratio-abc", "kubevirt_version='1.3.1', overhead_ratio='abc'", None,
     ["invalid overhead ratio 'abc'"]),
    ("filter-overhead-ratio-negative", "kubevirt_version='1.3.1', overhead_ratio='-1'", None,
     ["invalid overhead ratio '-1'"]),
    ("filter-malformed-quantity", "kubevirt_version='1.3.1'",
     {"spec": {"domain": {"resources": {"limits": {"memory": "4Gx"}}}}},
     ["malformed quantity '4Gx'", "spec.domain.resources.limits.memory"]),
    ("filter-unknown-option", "kubevirt_version='1.3.1', overhead='1.5'", None,
     ["unknown option(s) overhead"]),
]


@pytest.mark.parametrize("case", FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_bad_filter_input(r, ns, user, case):
    _id, options, vmi, fragments = case
    if vmi is None:
        vmi = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)
    scope = {ns, GONE_NS, "kubevirt"}
    before = M.snapshot(r, scope)
    res = M.run_task({"ansible.builtin.set_fact": {
        "sized": "{{ vmi | kvquota.maintenance.launcher_pod_resources(%s) }}" % options}}, user,
        extra_vars={"vmi": vmi})
    msg = M.assert_one_line_error(res, "launcher_pod_resources", *fragments)
    print("filter: %s" % msg)
    M.assert_unchanged(before, M.snapshot(r, scope))


def test_the_filter_sizes_like_the_emulator(r, ns, user):
    """Control for the cases above: the same task with good input works and agrees with the running pod."""
    vmi = r.get(M.KV + "/namespaces/%s/virtualmachineinstances/vm-1" % ns)
    res = M.assert_ok(M.run_task({"ansible.builtin.set_fact": {
        "sized": "{{ vmi | kvquota.maintenance.launcher_pod_resources(kubevirt_version='1.3.1', "
                 "overhead_ratio='1.5', quota_tracks=['limits.memory', 'limits.cpu']) }}"}}, user,
        extra_vars={"vmi": vmi}))
    used = M.quota(r, ns, "compute")["status"]["used"]
    assert res["ansible_facts"]["sized"]["pod"]["limits.memory"] == used["limits.memory"]
    assert res["ansible_facts"]["sized"]["pod"]["limits.cpu"] == used["limits.cpu"]
