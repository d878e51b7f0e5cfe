"""kvqlab.rbacusage without a lab: audit lines and roles made up here, matched by hand."""
from __future__ import annotations

import json

import pytest

from kvqlab import rbacusage

pytestmark = pytest.mark.lab   # make lab-tests (conftest.py: every lab test has one such marker)

ROLES_YAML = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r-read}
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: r-write}
rules:
  - apiGroups: [""]
    resources: [pods/eviction]
    verbs: [create]
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [mine]
    verbs: [update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: r-opt
  labels: {kvquota.maintenance/feature: shutdown}
rules:
  - apiGroups: [subresources.kubevirt.io]
    resources: [virtualmachines/stop]
    verbs: [update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: r-state, namespace: kvquota-system}
rules:
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get]
"""


def _event(verb, resource=None, group="", ns=None, name=None, sub=None, code=200, role="r-read", user="op",
           audit_id=None, stage="ResponseComplete"):
    ref = None
    if resource:
        ref = {"resource": resource, "apiGroup": group, "namespace": ns, "name": name, "subresource": sub}
        ref = dict((k, v) for k, v in ref.items() if v)
    decision = "allow" if code != 403 else "forbid"
    reason = 'RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "%s" to User "op"' % role if code != 403 else ""
    return json.dumps({"kind": "Event", "stage": stage, "auditID": audit_id or "%s-%s-%s-%s" % (
        verb, resource, name, code), "verb": verb, "user": {"username": user}, "objectRef": ref,
        "requestURI": "/x", "responseStatus": {"code": code},
        "annotations": {"authorization.k8s.io/decision": decision, "authorization.k8s.io/reason": reason}})


def _roles(tmp_path, operator_namespace="kvquota-system"):
    path = tmp_path / "roles.yml"
    path.write_text(ROLES_YAML)
    return rbacusage.load_roles([path], operator_namespace=operator_namespace)


def _audit(tmp_path, lines):
    path = tmp_path / "audit.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_rule_used_and_nothing_refused(tmp_path):
    roles = _roles(tmp_path)
    log = _audit(tmp_path, [
        _event("get", "pods", ns="t", name="p"),
        _event("list", "pods"),
        _event("create", "pods", ns="t", name="p", sub="eviction", role="r-write"),
        _event("update", "leases", group="coordination.k8s.io", ns="t", name="mine", role="r-write"),
        _event("update", "virtualmachines", group="subresources.kubevirt.io", ns="t", name="vm", sub="stop",
               role="r-opt"),
        _event("get", "configmaps", ns="kvquota-system", name="c", role="r-state"),
        _event("get", stage="ResponseStarted"),            # not a complete request
        _event("get", "pods", ns="t", name="p", user="someone-else"),
        _event("get"),                                      # discovery (non-resource)
    ])
    requests = rbacusage.read_audit(log, "op")
    assert len(requests) == 7
    usage = rbacusage.analyse(requests, roles, features={"shutdown"})
    assert usage.problems() == []
    assert (len(usage.used), len(usage.required)) == (6, 6)   # six atoms in ROLES_YAML
    assert len(usage.discovery) == 1
    assert "rules used 6/6" in usage.summary()


def test_refused_unmatched_unused_and_outside(tmp_path):
    roles = _roles(tmp_path)
    log = _audit(tmp_path, [
        _event("get", "pods", ns="t", name="p"),
        _event("update", "leases", group="coordination.k8s.io", ns="kube-system", name="kube-scheduler",
               code=403),
        _event("get", "configmaps", ns="t", name="c", role="admin"),   # the Role is for kvquota-system only
        _event("get", "secrets", ns="t", name="s", role="admin"),
    ])
    usage = rbacusage.analyse(rbacusage.read_audit(log, "op"), roles)
    problems = usage.problems()
    assert "refused: update leases.coordination.k8s.io kube-scheduler in kube-system -> 403 (no RBAC reason)" \
        in problems
    assert "no shipped rule allows: get configmaps.core c in t -> 200" in problems
    assert "no shipped rule allows: get secrets.core s in t -> 200" in problems
    # list pods, pods/eviction create, lease update and the Role's configmaps get were never used; the
    # optional role's rule is not required (its feature did not run)
    unused = sorted(a.describe() for a in usage.unused)
    assert unused == ["ClusterRole r-read: list pods.core", "ClusterRole r-write: create pods/eviction.core",
                      "ClusterRole r-write: update leases.coordination.k8s.io [mine]",
                      "Role kvquota-system/r-state: get configmaps.core"]
    assert "optional: shutdown did not run" in usage.summary()


def test_allowed_by_a_role_that_is_not_shipped(tmp_path):
    roles = _roles(tmp_path)
    log = _audit(tmp_path, [_event("get", "pods", ns="t", name="p", role="cluster-admin")])
    usage = rbacusage.analyse(rbacusage.read_audit(log, "op"), roles)
    assert usage.outside and "allowed by a role that is not shipped" in usage.problems()[0]


def test_operator_namespace_and_offset(tmp_path):
    roles = _roles(tmp_path, operator_namespace="ops")
    first = _event("get", "configmaps", ns="kvquota-system", name="c", role="r-state")
    log = _audit(tmp_path, [first, _event("get", "configmaps", ns="ops", name="c", role="r-state")])
    requests = rbacusage.read_audit(log, "op", offset=len(first) + 1)
    assert [r.namespace for r in requests] == ["ops"]
    usage = rbacusage.analyse(requests, roles)
    assert [a.describe() for a in usage.used] == ["Role ops/r-state: get configmaps.core"]


def test_shipped_roles_load():
    roles = {r.name: r for r in rbacusage.load_roles()}
    assert {"kvquota-read", "kvquota-write", "kvquota-rancher", "kvquota-shutdown", "kvquota-state"} <= set(roles)
    assert roles["kvquota-state"].namespace == "kvquota-system"
    assert roles["kvquota-rancher"].feature == "rancher" and roles["kvquota-shutdown"].feature == "shutdown"
    verbs = {v for r in roles.values() for rule in r.rules for v in rule["verbs"]}
    assert "patch" in verbs   # patch: only node cordon
    # watch: only the event source's roles (feature eda, bound with kvquota_bind_eda), and only list + watch there
    watching = sorted(r.name for r in roles.values() for rule in r.rules if "watch" in rule["verbs"])
    assert watching == ["kvquota-eda", "kvquota-eda", "kvquota-eda-ledgers"], watching
    assert all(r.feature == "eda" and all(set(rule["verbs"]) == {"list", "watch"} for rule in r.rules)
               for r in roles.values() if r.name in watching)
    patches = [(r.name, rule["resources"]) for r in roles.values() for rule in r.rules if "patch" in rule["verbs"]]
    assert patches == [("kvquota-write", ["nodes"])]
