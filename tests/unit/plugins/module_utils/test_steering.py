# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""steering: the upgrade-pending taint is recorded before it is set, written as the node's whole taint list
conditional on its resourceVersion (everyone else's taints kept, a 409 read again), and removed alone, the record
shrinking to nothing; against a fake API that keeps the order of the requests."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import copy
import json

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.state import steering as S
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import (
    ConflictError,
    InputError,
    NotFoundError,
    UnreachableError,
)

OPS = "kvquota-system"
CM_PATH = "/api/v1/namespaces/kvquota-system/configmaps"
RECORD = "rolling-upgrade"
CM = "kvq-steering-rolling-upgrade"
OURS = {"key": "kvquota.io/upgrade-pending", "value": RECORD, "effect": "PreferNoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


def node(name, taints=(), uid=None):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": uid or "uid-" + name, "resourceVersion": "1"},
            "spec": {"taints": [dict(t) for t in taints]} if taints else {}}


class FakeCluster(object):
    """Nodes and the operator namespace's ConfigMaps by path; every write in order in `writes`. `conflicts[name]`
    PATCHes of that node answer 409 after another writer added NOT_READY (or, with `applied`, after the
    lost answer of a patch that did apply); a PATCH of a node in `down` fails as an outage that used up its
    budget."""

    def __init__(self, nodes=(), applied=False):
        self.objects = dict(("/api/v1/nodes/" + n["metadata"]["name"], copy.deepcopy(n)) for n in nodes)
        self.writes = []
        self.conflicts = {}
        self.down = set()
        self.applied = applied
        self.version = 100

    def _bump(self, obj):
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        return obj

    def get(self, path, what):
        if path not in self.objects:
            raise NotFoundError("not found: %s" % path)
        return copy.deepcopy(self.objects[path])

    def exists(self, path, what):
        return copy.deepcopy(self.objects[path]) if path in self.objects else None

    def create(self, path, body, what):
        name = body["metadata"]["name"]
        self.writes.append(("create", name))
        if "%s/%s" % (path, name) in self.objects:
            raise ConflictError("already exists")
        self.objects["%s/%s" % (path, name)] = self._bump(copy.deepcopy(body))
        return copy.deepcopy(self.objects["%s/%s" % (path, name)])

    def replace(self, obj, what=None):
        path = "%s/%s" % (CM_PATH, obj["metadata"]["name"])
        self.writes.append(("update", obj["metadata"]["name"]))
        if self.objects[path]["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise ConflictError("changed")
        self.objects[path] = self._bump(copy.deepcopy(obj))
        return copy.deepcopy(self.objects[path])

    def delete(self, path, what, resource_version=None):
        self.writes.append(("delete", path.rsplit("/", 1)[1]))
        if path not in self.objects:
            raise NotFoundError("gone")
        if resource_version and self.objects[path]["metadata"]["resourceVersion"] != resource_version:
            raise ConflictError("changed")
        del self.objects[path]

    def request(self, method, path, body=None, query=None, content_type=None, what=None):
        assert (method, content_type) == ("PATCH", "application/merge-patch+json"), (method, content_type)
        assert path.startswith("/api/v1/nodes/")
        name = path.rsplit("/", 1)[1]
        if name in self.down:
            raise UnreachableError("the API server did not answer usably for 60 s")
        self.writes.append(("patch", name, copy.deepcopy(body)))
        current = self.objects.get(path)
        if current is None:
            raise NotFoundError("node %s not found" % name)
        if self.conflicts.get(name):
            self.conflicts[name] -= 1
            spec = current.setdefault("spec", {})
            if self.applied:
                spec["taints"] = body["spec"]["taints"]
            else:
                spec["taints"] = list(spec.get("taints") or []) + [NOT_READY]
            self._bump(current)
            raise ConflictError("conflict", "re-read", details={"maybe_applied": self.applied})
        assert body["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
        assert set(body) == {"metadata", "spec"} and set(body["spec"]) == {"taints"}
        current.setdefault("spec", {})["taints"] = copy.deepcopy(body["spec"]["taints"])
        return copy.deepcopy(self._bump(current))

    def taints(self, name):
        return (self.objects["/api/v1/nodes/" + name].get("spec") or {}).get("taints") or []

    def record(self):
        cm = self.objects.get("%s/%s" % (CM_PATH, CM))
        return None if cm is None else json.loads(cm["data"]["nodes"])


def kinds(writes):
    return [(w[0], w[1]) for w in writes]


# -- the taint and the record ------------------------------------------------------------------------------

def test_the_taint_and_the_record_name():
    assert S.steering_taint(RECORD) == OURS
    assert S.record_name(RECORD) == CM
    # a record that is no label value leaves the value empty; its record name is still a valid ConfigMap name
    assert S.steering_taint("Rolling Upgrade!") == {"key": "kvquota.io/upgrade-pending", "effect": "PreferNoSchedule"}
    assert S.steering_taint("x" * 64) == {"key": "kvquota.io/upgrade-pending", "effect": "PreferNoSchedule"}
    assert S.record_name("Rolling Upgrade!").startswith("kvq-steering-rolling-upgrade-")


def test_only_the_key_with_prefer_no_schedule_is_ours():
    theirs = [GPU, {"key": "kvquota.io/upgrade-pending", "effect": "NoSchedule"}]
    assert S.without_taint(theirs) is None
    assert S.without_taint(theirs + [dict(OURS, value="other-run")]) == theirs
    assert S.with_taint(theirs, RECORD) == theirs + [OURS]
    assert S.with_taint([GPU, OURS], RECORD) is None


@pytest.mark.parametrize("text", ['["n1"]', '{"n1": 1}', "not json"])
def test_a_corrupt_record_is_named_with_the_fix(text):
    with pytest.raises(InputError) as err:
        S.parse_record({"metadata": {"name": CM}, "data": {"nodes": text}})
    assert CM in err.value.message and "kubectl taint nodes --all kvquota.io/upgrade-pending:PreferNoSchedule-" \
        in err.value.fix


# -- taint ---------------------------------------------------------------------------------------------------

def test_the_record_is_written_before_any_node_is_tainted_and_other_taints_are_kept():
    api = FakeCluster([node("n1", [GPU]), node("n2")])
    out = S.taint(api, OPS, RECORD, ["n1", "n2"])
    assert kinds(api.writes) == [("create", CM), ("patch", "n1"), ("patch", "n2")]
    assert api.record() == {"n1": "uid-n1", "n2": "uid-n2"}
    # the whole list, conditional on the resourceVersion read
    assert api.writes[1][2] == {"metadata": {"resourceVersion": "1"}, "spec": {"taints": [GPU, OURS]}}
    assert api.taints("n1") == [GPU, OURS] and api.taints("n2") == [OURS]
    assert out == {"changed": True, "tainted": ["n1", "n2"], "record": CM, "warnings": [],
                   "diff": {"before": {"n1": {"spec": {"taints": [GPU]}}, "n2": {"spec": {"taints": []}}},
                            "after": {"n1": {"spec": {"taints": [GPU, OURS]}}, "n2": {"spec": {"taints": [OURS]}}}}}


def test_a_node_carrying_the_taint_is_not_written_and_a_repeat_changes_nothing():
    api = FakeCluster([node("n1", [OURS]), node("n2")])
    out = S.taint(api, OPS, RECORD, ["n1", "n2"])
    assert kinds(api.writes) == [("create", CM), ("patch", "n2")] and out["tainted"] == ["n2"]
    api.writes = []
    out = S.taint(api, OPS, RECORD, ["n2", "n1"])
    assert api.writes == [] and out["changed"] is False and out["tainted"] == []


def test_a_second_call_extends_the_record_conditionally():
    api = FakeCluster([node("n1"), node("n2")])
    S.taint(api, OPS, RECORD, ["n1"])
    S.taint(api, OPS, RECORD, ["n2"])
    assert kinds(api.writes) == [("create", CM), ("patch", "n1"), ("update", CM), ("patch", "n2")]
    assert api.record() == {"n1": "uid-n1", "n2": "uid-n2"}


def test_a_409_reads_the_node_again_and_keeps_the_taint_the_other_writer_added():
    api = FakeCluster([node("n1", [GPU])])
    api.conflicts["n1"] = 1
    out = S.taint(api, OPS, RECORD, ["n1"])
    patches = [w[2] for w in api.writes if w[0] == "patch"]
    assert [p["metadata"]["resourceVersion"] for p in patches] == ["1", "102"]
    assert patches[1]["spec"]["taints"] == [GPU, NOT_READY, OURS]
    assert api.taints("n1") == [GPU, NOT_READY, OURS] and out["tainted"] == ["n1"]


def test_a_lost_answer_of_a_patch_that_applied_counts_as_this_calls_taint():
    api = FakeCluster([node("n1")], applied=True)
    api.conflicts["n1"] = 1
    out = S.taint(api, OPS, RECORD, ["n1"])
    assert len([w for w in api.writes if w[0] == "patch"]) == 1
    assert out["tainted"] == ["n1"] and out["changed"] is True and api.taints("n1") == [OURS]


def test_an_unknown_node_is_one_error_naming_it_before_anything_is_written():
    api = FakeCluster([node("n1")])
    with pytest.raises(InputError) as err:
        S.taint(api, OPS, RECORD, ["n1", "ghost-1", "ghost-2"])
    assert "ghost-1, ghost-2" in err.value.message and "kubectl get nodes" in err.value.fix
    assert api.writes == [] and api.record() is None and api.taints("n1") == []


@pytest.mark.parametrize("args", [(OPS, "", ["n1"]), (OPS, RECORD, "n1"), (OPS, RECORD, [""]), ("Bad_NS", RECORD, ["n1"])])
def test_bad_arguments_are_refused_before_any_request(args):
    api = FakeCluster([node("n1")])
    with pytest.raises(InputError):
        S.taint(api, *args)
    assert api.writes == []


def test_check_mode_writes_nothing_and_says_what_would_change():
    api = FakeCluster([node("n1", [GPU]), node("n2", [OURS])])
    out = S.taint(api, OPS, RECORD, ["n1", "n2"], check_mode=True)
    assert api.writes == [] and api.record() is None
    assert out["changed"] is True and out["tainted"] == ["n1"]
    assert out["diff"]["after"] == {"n1": {"spec": {"taints": [GPU, OURS]}}}
    # recorded and tainted already: nothing would change
    S.taint(api, OPS, RECORD, ["n1", "n2"])
    api.writes = []
    out = S.taint(api, OPS, RECORD, ["n1", "n2"], check_mode=True)
    assert api.writes == [] and out["changed"] is False and out["tainted"] == []


def test_another_runs_taint_is_left_and_said():
    api = FakeCluster([node("n1", [dict(OURS, value="other-run")])])
    out = S.taint(api, OPS, RECORD, ["n1"])
    assert out["tainted"] == [] and api.taints("n1") == [dict(OURS, value="other-run")]
    assert "already carries the taint kvquota.io/upgrade-pending=other-run:PreferNoSchedule" in out["warnings"][0]


# -- untaint -------------------------------------------------------------------------------------------------

def test_untaint_removes_only_ours_and_drops_the_nodes_from_the_record():
    theirs = [GPU, {"key": "kvquota.io/upgrade-pending", "effect": "NoSchedule"}]
    api = FakeCluster([node("n1", theirs), node("n2")])
    S.taint(api, OPS, RECORD, ["n1", "n2"])
    api.writes = []
    out = S.untaint(api, OPS, RECORD, ["n1"])
    assert kinds(api.writes) == [("patch", "n1"), ("update", CM)]
    assert api.writes[0][2]["spec"]["taints"] == theirs
    assert api.taints("n1") == theirs and api.taints("n2") == [OURS]
    assert api.record() == {"n2": "uid-n2"}
    assert out == {"changed": True, "untainted": ["n1"], "record": CM, "warnings": [],
                   "diff": {"before": {"n1": {"spec": {"taints": theirs + [OURS]}}},
                            "after": {"n1": {"spec": {"taints": theirs}}}}}


def test_untaint_of_the_rest_deletes_the_record_and_a_repeat_changes_nothing():
    api = FakeCluster([node("n1"), node("n2")])
    S.taint(api, OPS, RECORD, ["n1", "n2"])
    S.untaint(api, OPS, RECORD, ["n1"])
    api.writes = []
    out = S.untaint(api, OPS, RECORD)
    assert kinds(api.writes) == [("patch", "n2"), ("delete", CM)]
    assert api.record() is None and api.taints("n2") == [] and out["untainted"] == ["n2"]
    api.writes = []
    out = S.untaint(api, OPS, RECORD)
    assert api.writes == [] and out["changed"] is False and out["untainted"] == []


def test_an_interrupted_taint_is_cleaned_by_untaint_of_every_recorded_node():
    api = FakeCluster([node("n1"), node("n2", [GPU]), node("n3")])
    api.down = {"n2"}   # the run ends on n2 (the control plane gone for good): n1 tainted, n2 and n3 only recorded
    with pytest.raises(UnreachableError):
        S.taint(api, OPS, RECORD, ["n1", "n2", "n3"])
    assert api.record() == {"n1": "uid-n1", "n2": "uid-n2", "n3": "uid-n3"}
    assert [api.taints(n) for n in ("n1", "n2", "n3")] == [[OURS], [GPU], []]
    api.down = set()
    api.writes = []
    out = S.untaint(api, OPS, RECORD)
    assert kinds(api.writes) == [("patch", "n1"), ("delete", CM)]
    assert out["untainted"] == ["n1"] and api.record() is None
    assert [api.taints(n) for n in ("n1", "n2", "n3")] == [[], [GPU], []]


def test_a_node_gone_or_not_recorded_is_fine():
    api = FakeCluster([node("n1"), node("n2", [OURS])])
    S.taint(api, OPS, RECORD, ["n1"])
    del api.objects["/api/v1/nodes/n1"]
    api.writes = []
    # n1 gone (404), n2 tainted but not in the record: untainted all the same
    out = S.untaint(api, OPS, RECORD, ["n1", "n2"])
    assert kinds(api.writes) == [("patch", "n2"), ("delete", CM)]
    assert out["untainted"] == ["n2"] and api.taints("n2") == [] and api.record() is None


def test_a_node_recreated_under_its_name_is_untainted_with_a_warning():
    api = FakeCluster([node("n1")])
    S.taint(api, OPS, RECORD, ["n1"])
    api.objects["/api/v1/nodes/n1"] = node("n1", [OURS], uid="uid-new")
    out = S.untaint(api, OPS, RECORD)
    assert out["untainted"] == ["n1"] and api.record() is None
    assert "re-created since it was recorded" in out["warnings"][0] and "uid-new" in out["warnings"][0]


def test_untaint_retries_a_409_from_a_fresh_read():
    api = FakeCluster([node("n1", [GPU])])
    S.taint(api, OPS, RECORD, ["n1"])
    api.conflicts["n1"] = 1
    api.writes = []
    out = S.untaint(api, OPS, RECORD, ["n1"])
    patches = [w[2] for w in api.writes if w[0] == "patch"]
    assert len(patches) == 2 and patches[1]["spec"]["taints"] == [GPU, NOT_READY]
    assert api.taints("n1") == [GPU, NOT_READY] and out["untainted"] == ["n1"]


def test_untaint_in_check_mode_writes_nothing():
    api = FakeCluster([node("n1", [GPU]), node("n2")])
    S.taint(api, OPS, RECORD, ["n1", "n2"])
    api.writes = []
    out = S.untaint(api, OPS, RECORD, check_mode=True)
    assert api.writes == [] and api.record() == {"n1": "uid-n1", "n2": "uid-n2"}
    assert out["changed"] is True and out["untainted"] == ["n1", "n2"]
    assert out["diff"]["after"] == {"n1": {"spec": {"taints": [GPU]}}, "n2": {"spec": {"taints": []}}}


def test_a_corrupt_record_stops_untaint_before_any_write():
    api = FakeCluster([node("n1", [OURS])])
    api.objects["%s/%s" % (CM_PATH, CM)] = {"metadata": {"name": CM, "resourceVersion": "5"},
                                            "data": {"nodes": "[]"}}
    with pytest.raises(InputError):
        S.untaint(api, OPS, RECORD)
    assert api.writes == [] and api.taints("n1") == [OURS]
