"""Tenant identities of the lab: what a tenant can do, tried as the tenant.

For a namespace, make() creates three ServiceAccounts in it (ServiceAccount tokens are real: the lab's
apiserver signs and verifies them, no impersonation involved):

- ``edit``: bound by a RoleBinding to the built-in ClusterRole ``edit`` (pods, Events, Leases, ConfigMaps,
  Secrets, ... of the namespace; KubeVirt's objects through KUBEVIRT_EDIT below);
- ``admin``: bound to the built-in ClusterRole ``admin`` (edit + RBAC of the namespace);
- ``project-member``: a Rancher project member, who may get, patch and update the Namespaces of its
  project (annotations included) and nothing else: a ClusterRole limited to those namespaces' names.

Each Identity gives a kubeconfig file, an environment for ansible/kubectl, and a kubernetes ApiClient.

    from kvqlab import tenants
    team = tenants.make(lab, "tenant-a", project_namespaces=["tenant-a", "tenant-b"])
    core = kubernetes.client.CoreV1Api(team["edit"].api_client())
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

ROLES = ("edit", "admin", "project-member")
TOKEN_SECONDS = 7 * 24 * 3600
LABELS = {"app.kubernetes.io/part-of": "kvqlab", "kvqlab.io/tenant-identity": "true"}
# KubeVirt ships kubevirt.io:edit aggregated to edit (VMs, VMIs and, up to KubeVirt 1.4, migrations):
# without it a lab tenant could not even start a VM. The lab gives edit that rule too.
KUBEVIRT_EDIT = "kvqlab:kubevirt-edit"


@dataclass
class Identity:
    role: str
    namespace: str
    service_account: str
    username: str
    token: str
    kubeconfig: Path

    def api_client(self):
        """A kubernetes.client.ApiClient acting as this identity."""
        from kubernetes import config as kconfig
        return kconfig.new_client_from_config(config_file=str(self.kubeconfig))

    def env(self) -> dict:
        """Environment for ansible (K8S_AUTH_*) and kubectl acting as this identity."""
        return {"K8S_AUTH_KUBECONFIG": str(self.kubeconfig), "KUBECONFIG": str(self.kubeconfig)}


def _rest(lab):
    from .emulator import _rest_for
    return _rest_for(lab)


def _create(rest, path, body):
    """Create, or replace what is there (the same name may be reused by a new test run)."""
    from kubernetes.client.exceptions import ApiException
    try:
        return rest.create(path, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    cur = rest.get(path + "/" + body["metadata"]["name"])
    body = dict(body, metadata=dict(body["metadata"], resourceVersion=cur["metadata"]["resourceVersion"]))
    return rest.replace(path + "/" + body["metadata"]["name"], body)


def ensure_kubevirt_edit(lab):
    """The aggregated ClusterRole that gives the built-in edit (and so admin) KubeVirt's objects."""
    _create(_rest(lab), "/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "metadata": {"name": KUBEVIRT_EDIT, "labels": dict(LABELS, **{
            "rbac.authorization.k8s.io/aggregate-to-edit": "true"})},
        "rules": [{"apiGroups": ["kubevirt.io"],
                   "resources": ["virtualmachines", "virtualmachineinstances", "virtualmachineinstancemigrations"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]}]})


def token_for(lab, namespace, name, seconds=TOKEN_SECONDS):
    """A bound ServiceAccount token (TokenRequest) for namespace/name."""
    data = _rest(lab).create("/api/v1/namespaces/%s/serviceaccounts/%s/token" % (namespace, name),
                             {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                              "spec": {"expirationSeconds": int(seconds)}})
    return data["status"]["token"]


def _kubeconfig(lab, user, token, path):
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "kvqlab", "cluster": {"server": lab.server, "certificate-authority": str(lab.ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "kvqlab", "context": {"cluster": "kvqlab", "user": user}}],
        "current-context": "kvqlab",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(yaml.safe_dump(config, sort_keys=False))


def _wait_authorized(rest, username, namespace, role, timeout=30.0):
    """Wait until the API server's RBAC authorizer, which reads bindings through an informer, grants the new
    binding: right after its create a request of the identity can still be refused (seen under load), and a test
    would take that refusal for the fence's."""
    import time
    if role in ("edit", "admin"):
        attributes = {"namespace": namespace, "verb": "create", "resource": "persistentvolumeclaims"}
    else:
        attributes = {"verb": "patch", "resource": "namespaces", "name": namespace}
    groups = ["system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"]
    deadline = time.monotonic() + timeout
    while True:
        review = rest.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": username, "groups": groups, "resourceAttributes": attributes}})
        if (review.get("status") or {}).get("allowed"):
            return
        if time.monotonic() >= deadline:
            raise RuntimeError("tenant %s: RBAC does not grant %s after %ss" % (username, attributes, timeout))
        time.sleep(0.1)


def make(lab, namespace, project_namespaces=None, roles=ROLES) -> dict:
    """{role: Identity} for namespace (which must exist). project_namespaces: the namespaces of the
    Rancher project the project member belongs to (default: just namespace)."""
    rest = _rest(lab)
    ensure_kubevirt_edit(lab)
    out = {}
    for role in roles:
        if role not in ROLES:
            raise ValueError("unknown tenant role %r (known: %s)" % (role, ", ".join(ROLES)))
        sa = "tenant-" + role
        _create(rest, "/api/v1/namespaces/%s/serviceaccounts" % namespace,
                {"metadata": {"name": sa, "namespace": namespace, "labels": dict(LABELS)}})
        subject = [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]
        if role in ("edit", "admin"):
            _create(rest, "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings" % namespace, {
                "metadata": {"name": "kvqlab-tenant-" + role, "namespace": namespace, "labels": dict(LABELS)},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": subject})
        else:
            members = sorted(set(project_namespaces or [namespace]))
            name = "kvqlab-project-member-" + namespace
            _create(rest, "/apis/rbac.authorization.k8s.io/v1/clusterroles", {
                "metadata": {"name": name, "labels": dict(LABELS)},
                "rules": [{"apiGroups": [""], "resources": ["namespaces"], "resourceNames": members,
                           "verbs": ["get", "patch", "update"]}]})
            _create(rest, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
                "metadata": {"name": name, "labels": dict(LABELS)},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": subject})
        username = "system:serviceaccount:%s:%s" % (namespace, sa)
        _wait_authorized(rest, username, namespace, role)
        token = token_for(lab, namespace, sa)
        path = Path(lab.run_dir) / "tenants" / ("%s-%s.kubeconfig" % (namespace, role))
        _kubeconfig(lab, username, token, path)
        out[role] = Identity(role, namespace, sa, username, token, path)
    return out


def remove(lab, namespace):
    """Delete the cluster-scoped objects make() created for namespace (the rest goes with the namespace)."""
    rest = _rest(lab)
    name = "kvqlab-project-member-" + namespace
    rest.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" + name)
    rest.delete("/apis/rbac.authorization.k8s.io/v1/clusterroles/" + name)
