"""Rule usage: which API requests an identity made (kube-apiserver audit log) against the rules of the
collection's shipped roles (roles/install/files/*.yml).

    from kvqlab import rbacusage
    roles = rbacusage.load_roles()                         # every ClusterRole/Role of roles/install/files/*.yml
    offset = lab.audit_offset()
    ... run modules / playbooks as the lab's least-privilege user ...
    requests = rbacusage.read_audit(lab.audit_log, lab.user_name, offset)
    usage = rbacusage.analyse(requests, roles, features={"rancher"})
    print(usage.summary())
    assert usage.problems() == []

Or from a shell, over everything a lab has recorded so far (e.g. after the role tests):

    python3 -m kvqlab.rbacusage --run-dir RUN_DIR --features rancher,shutdown   # kvqlab installed by make deps

The roles are read from the files, never from this module, so the analysis follows the files when rules
change. A rule is "used" when at least one recorded request matches it (apiGroup, resource[/subresource],
verb, resourceName, and for a Role its namespace); rules are compared per (group, resource, verb) atom.
Roles labelled kvquota.maintenance/feature: <name> are optional: their atoms must be used only when that
feature ran (features=...).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .controlplane import RBAC_DIR, manifest_objects
FEATURE_LABEL = "kvquota.maintenance/feature"
TRANSITIONAL_LABEL = "kvquota.maintenance/transitional"
DEFAULT_OPERATOR_NAMESPACE = "kvquota-system"
# e.g. RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "kvquota-read" to User "kvquota-operator"
_REASON = re.compile(r'of (ClusterRole|Role) "([^"]+)"')


@dataclass(frozen=True)
class Role:
    kind: str                      # ClusterRole or Role
    name: str
    namespace: str | None          # a Role's namespace; None for a ClusterRole
    rules: tuple
    feature: str | None = None     # optional role: bound only when this feature is used
    transitional: bool = False

    @property
    def label(self) -> str:
        return f"Role {self.namespace}/{self.name}" if self.namespace else f"ClusterRole {self.name}"


@dataclass(frozen=True)
class Request:
    """One API request as the audit log recorded it (stage ResponseComplete)."""
    verb: str
    group: str | None              # None for a non-resource URL (/apis, /version, ...)
    resource: str | None           # 'pods/eviction' for a subresource
    namespace: str | None
    name: str | None
    code: int
    decision: str                  # allow / forbid ('' when the apiserver did not authorise, e.g. 401)
    reason: str
    uri: str

    @property
    def is_resource(self) -> bool:
        return self.resource is not None

    def describe(self) -> str:
        if not self.is_resource:
            return f"{self.verb} {self.uri} -> {self.code}"
        where = f" in {self.namespace}" if self.namespace else ""
        named = f" {self.name}" if self.name else ""
        group = self.group or "core"
        return f"{self.verb} {self.resource}.{group}{named}{where} -> {self.code}"


@dataclass(frozen=True)
class Atom:
    """One (role, group, resource, verb) of a rule; resource_names as the rule restricts them."""
    role: str                      # Role.label
    group: str
    resource: str
    verb: str
    resource_names: tuple = ()

    def describe(self) -> str:
        names = f" [{','.join(self.resource_names)}]" if self.resource_names else ""
        return f"{self.role}: {self.verb} {self.resource}.{self.group or 'core'}{names}"


def load_roles(paths=None, operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE) -> list[Role]:
    """Every ClusterRole and Role in the given RBAC files (default: roles/install/files/*.yml). A Role's namespace becomes
    operator_namespace when the file says kvquota-system (the install playbook does the same)."""
    files = [Path(p) for p in paths] if paths else sorted(RBAC_DIR.glob("*.yml"))
    roles = []
    for path in files:
        for doc in manifest_objects(path):
            if not doc or doc.get("kind") not in ("ClusterRole", "Role"):
                continue
            meta = doc.get("metadata") or {}
            labels = meta.get("labels") or {}
            namespace = None
            if doc["kind"] == "Role":
                namespace = meta.get("namespace") or DEFAULT_OPERATOR_NAMESPACE
                if namespace == DEFAULT_OPERATOR_NAMESPACE:
                    namespace = operator_namespace
            roles.append(Role(kind=doc["kind"], name=meta["name"], namespace=namespace,
                              rules=tuple(doc.get("rules") or ()), feature=labels.get(FEATURE_LABEL),
                              transitional=str(labels.get(TRANSITIONAL_LABEL, "")).lower() == "true"))
    return roles


def read_audit(path, user: str, offset: int = 0) -> list[Request]:
    """The requests of user recorded in the audit log at path from byte offset on (Lab.audit_offset())."""
    requests, seen = [], set()
    with open(path, "rb") as fh:
        fh.seek(offset)
        for raw in fh:
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # a line cut by a concurrent write at the end: the next read sees it whole
            if event.get("stage") != "ResponseComplete" or (event.get("user") or {}).get("username") != user:
                continue
            if event.get("auditID") in seen:
                continue
            seen.add(event.get("auditID"))
            requests.append(_request(event))
    return requests


def _request(event: dict) -> Request:
    ref = event.get("objectRef")
    notes = event.get("annotations") or {}
    code = int(((event.get("responseStatus") or {}).get("code")) or 0)
    common = {"verb": event.get("verb", ""), "code": code, "uri": event.get("requestURI", ""),
              "decision": notes.get("authorization.k8s.io/decision", ""),
              "reason": notes.get("authorization.k8s.io/reason", "")}
    if not ref or not ref.get("resource"):
        return Request(group=None, resource=None, namespace=None, name=None, **common)
    resource = ref["resource"] + ("/" + ref["subresource"] if ref.get("subresource") else "")
    return Request(group=ref.get("apiGroup") or "", resource=resource, namespace=ref.get("namespace"),
                   name=ref.get("name"), **common)


def atoms(role: Role) -> list[Atom]:
    out = []
    for rule in role.rules:
        if rule.get("nonResourceURLs"):
            continue
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                for verb in rule.get("verbs") or ():
                    atom = Atom(role.label, group, resource, verb, tuple(rule.get("resourceNames") or ()))
                    if atom not in out:
                        out.append(atom)
    return out


def _matches(atom: Atom, role: Role, request: Request) -> bool:
    if role.namespace is not None and request.namespace != role.namespace:
        return False
    if atom.group not in ("*", request.group):
        return False
    if atom.verb not in ("*", request.verb):
        return False
    if atom.resource != "*" and atom.resource != request.resource:
        base, _slash, sub = request.resource.partition("/")
        if not (sub and atom.resource in (base + "/*", "*/" + sub)):
            return False
    # a rule limited to names never matches create (nor list/watch of a collection): no name in the URL
    return not atom.resource_names or (request.name is not None and request.name in atom.resource_names)


@dataclass
class Usage:
    """What analyse found. problems() is empty when every request was allowed by the shipped roles and every
    rule that had to be used was."""
    requests: list
    roles: list
    features: frozenset
    counts: dict = field(default_factory=dict)       # Atom -> number of requests matching it
    required: list = field(default_factory=list)     # atoms that must be used (optional roles: feature ran)
    denied: list = field(default_factory=list)       # requests the apiserver refused (403 / forbid)
    unmatched: list = field(default_factory=list)    # resource requests no shipped rule allows
    outside: list = field(default_factory=list)      # allowed, but by a role that is not shipped
    discovery: list = field(default_factory=list)    # non-resource requests (discovery, version)

    @property
    def resource_requests(self) -> list:
        return [r for r in self.requests if r.is_resource]

    @property
    def used(self) -> list:
        return [a for a in self.required if self.counts.get(a)]

    @property
    def unused(self) -> list:
        return [a for a in self.required if not self.counts.get(a)]

    def problems(self) -> list[str]:
        out = [f"refused: {r.describe()} ({r.reason or 'no RBAC reason'})" for r in self.denied]
        out += [f"no shipped rule allows: {r.describe()}" for r in self.unmatched]
        out += [f"allowed by a role that is not shipped: {r.describe()} ({r.reason})" for r in self.outside]
        out += [f"rule never used: {a.describe()}" for a in self.unused]
        return out

    def summary(self) -> str:
        """The figures, then one line per rule atom with its request count."""
        optional = sorted({r.feature for r in self.roles if r.feature})
        lines = [
            f"rbac usage: {len(self.requests)} requests ({len(self.resource_requests)} on resources, "
            f"{len(self.discovery)} discovery), {len(self.denied)} refused, {len(self.unmatched)} outside the "
            f"shipped rules; rules used {len(self.used)}/{len(self.required)} "
            f"(optional features run: {', '.join(sorted(self.features)) or 'none'}; "
            f"optional roles: {', '.join(optional) or 'none'})",
        ]
        for role in self.roles:
            flag = " (transitional)" if role.transitional else ""
            if role.feature and role.feature not in self.features:
                flag += f" (optional: {role.feature} did not run)"
            lines.append(f"  {role.label}{flag}")
            for atom in atoms(role):
                names = f" [{','.join(atom.resource_names)}]" if atom.resource_names else ""
                lines.append(f"    {self.counts.get(atom, 0):6d}  {atom.verb} "
                             f"{atom.resource}.{atom.group or 'core'}{names}")
        return "\n".join(lines)


def analyse(requests, roles, features=()) -> Usage:
    """Match each recorded request against the roles' rules; see Usage."""
    features = frozenset(features or ())
    shipped = {r.name for r in roles}
    usage = Usage(requests=list(requests), roles=list(roles), features=features)
    for role in roles:
        for atom in atoms(role):
            usage.counts.setdefault(atom, 0)
            if not role.feature or role.feature in features:
                usage.required.append(atom)
    for request in usage.requests:
        if request.code == 403 or request.decision == "forbid":
            usage.denied.append(request)
        if not request.is_resource:
            usage.discovery.append(request)
            continue
        matched = False
        for role in roles:
            for atom in atoms(role):
                if _matches(atom, role, request):
                    usage.counts[atom] += 1
                    matched = True
        if not matched:
            usage.unmatched.append(request)
        elif request.decision == "allow":
            found = _REASON.search(request.reason)
            if found and found.group(2) not in shipped:
                usage.outside.append(request)
    return usage


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kvqlab.rbacusage",
                                 description="Rule usage of the shipped roles from a lab's audit log.")
    ap.add_argument("--run-dir", default=os.environ.get("KVQ_LAB_RUN_DIR"), required=not os.environ.get(
        "KVQ_LAB_RUN_DIR"))
    ap.add_argument("--user", default="kvquota-operator")
    ap.add_argument("--offset", type=int, default=0, help="start at this byte of the audit log")
    ap.add_argument("--features", default="", help="optional features that ran: rancher,shutdown")
    ap.add_argument("--operator-namespace", default=DEFAULT_OPERATOR_NAMESPACE)
    args = ap.parse_args(argv)
    usage = analyse(read_audit(Path(args.run_dir) / "audit.log", args.user, args.offset),
                    load_roles(operator_namespace=args.operator_namespace),
                    [f for f in args.features.split(",") if f])
    print(usage.summary())
    for problem in usage.problems():
        print("PROBLEM: " + problem)
    return 1 if usage.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
