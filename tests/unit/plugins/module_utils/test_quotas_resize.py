# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pod_usage of pods the kubelet reports on: in-place resize (InPlacePodVerticalScaling, beta and on in 1.33, GA in
1.35) makes the pod quota evaluator read status.containerStatuses[].allocatedResources and .resources besides the
spec (pods.go PodUsageFunc: UseStatusResources), by one rule on 1.33 to 1.36 and another on 1.37.

Every expected value is Kubernetes' own. Each case names where it comes from:
- H33 / H37: a case of k8s.io/component-helpers resource/helpers_test.go at v0.33.13 / v0.37.2 (its
  expectedRequests or expectedLimits, for a pod with only that side set);
- P33 / P37: a case of k8s.io/kubernetes pkg/quota/v1/evaluator/core/pods_test.go at v1.33.13 / v1.37.2 (its
  whole usage);
- derived: no Kubernetes test holds that pod; the value is what the real evaluator (pods.go PodUsageFunc, called on
  the pod as JSON, feature gates at their defaults plus PodLevelResources on 1.33) returned on v1.33.13 and v1.37.2;
  so were the pods of the last section, which show what the collection decides from the charge.
Containers and statuses without a name in Kubernetes' case are named "" here, as they are there.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model import quotas as q

PER_CONTAINER = (33, 34, 35, 36)   # each container's maximum, summed
MAX_OF_SUMS = (37,)                # the maximum of the pod's summed spec, allocated and actual resources
RELEASES = PER_CONTAINER + MAX_OF_SUMS


def container(name, requests=None, limits=None, sidecar=False):
    resources = {}
    if requests is not None:
        resources["requests"] = dict(requests)
    if limits is not None:
        resources["limits"] = dict(limits)
    result = {"name": name, "resources": resources}
    if sidecar:
        result["restartPolicy"] = "Always"
    return result


def status(name, allocated=None, requests=None, limits=None, resources=True):
    """A container status; resources=False leaves .resources out (the kubelet has not reported it)."""
    result = {"name": name}
    if allocated is not None:
        result["allocatedResources"] = dict(allocated)
    if resources:
        result["resources"] = {}
        if requests is not None:
            result["resources"]["requests"] = dict(requests)
        if limits is not None:
            result["resources"]["limits"] = dict(limits)
    return result


INFEASIBLE = {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}


def pod(containers=(), init=(), statuses=(), init_statuses=(), conditions=(), pod_level=None, overhead=None,
        phase="Running", with_status=True):
    spec = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if pod_level is not None:
        spec["resources"] = pod_level
    if overhead is not None:
        spec["overhead"] = overhead
    result = {"metadata": {"name": "p", "namespace": "tenant-a"}, "spec": spec}
    if with_status:
        result["status"] = {"phase": phase}
        if statuses:
            result["status"]["containerStatuses"] = list(statuses)
        if init_statuses:
            result["status"]["initContainerStatuses"] = list(init_statuses)
        if conditions:
            result["status"]["conditions"] = list(conditions)
    return result


def usage(requests=None, limits=None):
    """The whole usage the evaluator derives from pod requests and limits (podComputeUsageHelper)."""
    def parsed(rl):
        return dict((name, parse_quantity(value)) for name, value in (rl or {}).items())
    return q.usage_from_requests_limits(parsed(requests), parsed(limits))


def both(requests=None, limits=None):
    """The same expected usage on every supported release."""
    expected = usage(requests, limits)
    return dict((minor, expected) for minor in RELEASES)


def per_rule(per_container, max_of_sums):
    """Expected usage per release: per_container on 1.33 to 1.36, max_of_sums on 1.37."""
    return dict([(minor, per_container) for minor in PER_CONTAINER] + [(minor, max_of_sums) for minor in MAX_OF_SUMS])


def cases(table):
    """pytest parameters (pod, expected) of a table of (id, pod, expected)."""
    return [pytest.param(pod_obj, expected, id=name) for name, pod_obj, expected in table]


def check(pod_obj, expected):
    for minor, value in sorted(expected.items()):
        assert q.pod_usage(pod_obj, kubernetes_minor=minor) == value, "Kubernetes 1.%d" % minor


# ---------------------------------------------------------------------------
# pending resize up: the desired spec is above what the kubelet allocated and actuated (quota charges the spec)

PENDING_UP = [
    # P33 and P37 TestPodEvaluatorUsageResourceResize
    # "verify Max(Container.Spec.Requests, ContainerStatus.Resources) for memory resource"
    ("memory-resource", pod([container("", {"memory": "200Mi"}, {"memory": "400Mi"})],
                            statuses=[status("", requests={"memory": "150Mi"})]),
     both({"memory": "200Mi"}, {"memory": "400Mi"})),
    # H33 and H37 TestPodResourceRequests "resized, no resize status"
    ("resized-no-resize-status", pod([container("container-1", {"cpu": "4"})],
                                     statuses=[status("container-1", requests={"cpu": "2"})]),
     both({"cpu": "4"})),
    # H33 and H37 TestPodResourceRequests "resized, restartable init container, no resize status"
    ("sidecar-no-resize-status", pod(init=[container("restartable-init-1", {"cpu": "4"}, sidecar=True)],
                                     init_statuses=[status("restartable-init-1", requests={"cpu": "2"})]),
     both({"cpu": "4"})),
    # H33 and H37 TestPodResourceLimits "pod scaled up"
    ("limits-scaled-up", pod([container("container-1", limits={"memory": "2Gi"})],
                             statuses=[status("container-1", limits={"memory": "1Gi"})]),
     both(limits={"memory": "2Gi"})),
    # H33 and H37 TestPodResourceLimits "pod scaled up with restartable init containers"
    ("sidecar-limits-scaled-up", pod(init=[container("restartable-init-1", limits={"memory": "2Gi"}, sidecar=True)],
                                     init_statuses=[status("restartable-init-1", limits={"memory": "1Gi"})]),
     both(limits={"memory": "2Gi"})),
]


@pytest.mark.parametrize("pod_obj, expected", cases(PENDING_UP))
def test_pending_resize_up_charges_the_desired_spec(pod_obj, expected):
    check(pod_obj, expected)


# ---------------------------------------------------------------------------
# pending resize down: the kubelet still holds more than the new spec asks (quota charges what it holds)

PENDING_DOWN = [
    # P33 and P37 TestPodEvaluatorUsageResourceResize
    # "verify Max(Container.Spec.Requests, ContainerStatus.Resources) for CPU resource"
    ("cpu-resource", pod([container("", {"cpu": "100m"}, {"cpu": "200m"})],
                         statuses=[status("", requests={"cpu": "150m"})]),
     both({"cpu": "150m"}, {"cpu": "200m"})),
    # P33 and P37 TestPodEvaluatorUsageResourceResize
    # "verify Max(Container.Spec.Requests, ContainerStatus.Resources) for CPU and memory resource"
    ("cpu-and-memory-resource", pod([container("", {"cpu": "100m", "memory": "200Mi"},
                                               {"cpu": "200m", "memory": "400Mi"})],
                                    statuses=[status("", requests={"cpu": "150m", "memory": "250Mi"})]),
     both({"cpu": "150m", "memory": "250Mi"}, {"cpu": "200m", "memory": "400Mi"})),
    # H33 and H37 TestPodResourceRequests "resized: per-resource 3-way maximum" (up and down at once, per name)
    ("per-resource-3-way-maximum", pod(
        [container("container-1", {"cpu": "30m", "memory": "20M", "ephemeral-storage": "10G"})],
        statuses=[status("container-1", allocated={"cpu": "20m", "memory": "10M", "ephemeral-storage": "30G"},
                         requests={"cpu": "10m", "memory": "30M", "ephemeral-storage": "20G"})]),
     both({"cpu": "30m", "memory": "30M", "ephemeral-storage": "30G"})),
    # H33 and H37 TestPodResourceLimits "pod scaled down"
    ("limits-scaled-down", pod([container("container-1", limits={"memory": "1Gi"})],
                               statuses=[status("container-1", limits={"memory": "2Gi"})]),
     both(limits={"memory": "2Gi"})),
    # H33 and H37 TestAggregateContainerRequestsAndLimits
    # "regularcontainers with empty requests, but status with non-empty requests"
    ("empty-spec-status-requests", pod([container("container-1")],
                                       statuses=[status("container-1", requests={"cpu": "2"})]),
     both({"cpu": "2"})),
]


@pytest.mark.parametrize("pod_obj, expected", cases(PENDING_DOWN))
def test_pending_resize_down_charges_what_the_kubelet_holds(pod_obj, expected):
    check(pod_obj, expected)


# ---------------------------------------------------------------------------
# infeasible resize: the desired spec is ignored, quota charges what is allocated and actuated

INFEASIBLE_CASES = [
    # H33 and H37 TestPodResourceRequests "resized, infeasible"
    ("resized-infeasible", pod([container("container-1", {"cpu": "4"})],
                               statuses=[status("container-1", requests={"cpu": "2"})], conditions=[INFEASIBLE]),
     both({"cpu": "2"})),
    # H33 and H37 TestPodResourceRequests "resized, infeasible & in-progress"
    ("resized-infeasible-in-progress", pod([container("container-1", {"cpu": "6"})],
                                           statuses=[status("container-1", allocated={"cpu": "4"},
                                                            requests={"cpu": "2"})], conditions=[INFEASIBLE]),
     both({"cpu": "4"})),
    # H33 and H37 TestPodResourceRequests "resized, restartable init container, infeasible"
    ("sidecar-infeasible", pod(init=[container("restartable-init-1", {"cpu": "4"}, sidecar=True)],
                               init_statuses=[status("restartable-init-1", requests={"cpu": "2"})],
                               conditions=[INFEASIBLE]),
     both({"cpu": "2"})),
    # H37 TestPodRequestsAndLimitsVerticalScalingWrappers "container limits aggregation with infeasible resize"
    # (UseStatusResources only, the evaluator's options); the same on v1.33.13 (derived)
    ("limits-infeasible", pod([container("c1", limits={"cpu": "10"})],
                              statuses=[status("c1", limits={"cpu": "6"})], conditions=[INFEASIBLE]),
     both(limits={"cpu": "6"})),
    # derived: an Infeasible condition whose reason is not Infeasible any more reads as feasible (the first
    # PodResizePending condition decides, IsPodResizeInfeasible)
    ("deferred-is-not-infeasible", pod([container("container-1", {"cpu": "4"})],
                                       statuses=[status("container-1", requests={"cpu": "2"})],
                                       conditions=[dict(INFEASIBLE, reason="Deferred"), INFEASIBLE]),
     both({"cpu": "4"})),
]


@pytest.mark.parametrize("pod_obj, expected", cases(INFEASIBLE_CASES))
def test_infeasible_resize_charges_what_is_allocated_and_actuated(pod_obj, expected):
    check(pod_obj, expected)


# ---------------------------------------------------------------------------
# sidecars (restartable init containers) and regular init containers

SIDECARS = [
    # H33 and H37 TestPodResourceLimits "pod scaled down with restartable init containers"
    ("sidecar-limits-scaled-down", pod(init=[container("restartable-init-1", limits={"memory": "1Gi"},
                                                       sidecar=True)],
                                       init_statuses=[status("restartable-init-1", limits={"memory": "2Gi"})]),
     both(limits={"memory": "2Gi"})),
    # H33 and H37 TestAggregateContainerRequestsAndLimits
    # "always-restart init containers with empty requests, but status with non-empty requests"
    ("sidecar-empty-spec-status-requests", pod(init=[container("container-1", sidecar=True)],
                                               init_statuses=[status("container-1", requests={"cpu": "2"})]),
     both({"cpu": "2"})),
    # derived: a sidecar resized down (the kubelet still holds 3) counts both beside the app container and under
    # the regular init container that starts after it: max(1 + 3, 2 + 3)
    ("sidecar-held-under-later-init", pod([container("app", {"cpu": "1"})],
                                          init=[container("side", {"cpu": "1"}, sidecar=True),
                                                container("setup", {"cpu": "2"})],
                                          statuses=[status("app", allocated={"cpu": "1"}, requests={"cpu": "1"})],
                                          init_statuses=[status("side", allocated={"cpu": "1"},
                                                                requests={"cpu": "3"})]),
     both({"cpu": "5"})),
    # derived: a regular init container's status counts on 1.37 only (1.33 to 1.36 read the status of app
    # containers and sidecars alone)
    ("regular-init-status", pod([container("app", {"cpu": "1"})], init=[container("setup", {"cpu": "2"})],
                                init_statuses=[status("setup", allocated={"cpu": "2"}, requests={"cpu": "3"})]),
     per_rule(usage({"cpu": "2"}), usage({"cpu": "3"}))),
]


@pytest.mark.parametrize("pod_obj, expected", cases(SIDECARS))
def test_sidecars_and_init_containers_with_status(pod_obj, expected):
    check(pod_obj, expected)


# ---------------------------------------------------------------------------
# where 1.33 to 1.36 and 1.37 differ

RELEASE_RULES = [
    # H37 TestPodResourceLimits "aggregate limit resolves max of sums instead of sum of maxes": 3 on 1.37; the
    # per-container rule of 1.33 to 1.36 sums each container's maximum, 2 + 2 (derived on v1.33.13)
    ("aggregate-limit-max-of-sums", pod([container("c1", limits={"cpu": "1"}), container("c2", limits={"cpu": "2"})],
                                        statuses=[status("c1", limits={"cpu": "2"}), status("c2", limits={"cpu": "1"})]),
     per_rule(usage(limits={"cpu": "4"}), usage(limits={"cpu": "3"}))),
    # derived: two containers resized in opposite directions, both pending: 2 + 2 against max(1 + 2, 2 + 1)
    ("aggregate-request-opposite-resizes", pod(
        [container("c1", {"cpu": "1"}), container("c2", {"cpu": "2"})],
        statuses=[status("c1", allocated={"cpu": "2"}, requests={"cpu": "2"}),
                  status("c2", allocated={"cpu": "1"}, requests={"cpu": "1"})]),
     per_rule(usage({"cpu": "4"}), usage({"cpu": "3"}))),
    # H37 TestPodResourceRequests "aggregate request resolves max of sums instead of sum of maxes": 3; 1.33 to 1.36
    # read no status without .resources, so the spec's 1 + 2 (derived on v1.33.13)
    ("aggregate-request-max-of-sums", pod([container("c1", {"cpu": "1"}), container("c2", {"cpu": "2"})],
                                          statuses=[status("c1", allocated={"cpu": "2"}, resources=False),
                                                    status("c2", allocated={"cpu": "1"}, resources=False)]),
     both({"cpu": "3"})),
    # derived: allocatedResources without .resources count on 1.37 only
    ("allocated-without-resources", pod([container("c1", {"cpu": "1"})],
                                        statuses=[status("c1", allocated={"cpu": "2"}, resources=False)]),
     per_rule(usage({"cpu": "1"}), usage({"cpu": "2"}))),
    # derived: an Infeasible resize of a container the kubelet reports nothing for: 1.33 to 1.36 charge its spec,
    # 1.37 charges nothing for it (neither allocated nor actual resources are known)
    ("infeasible-without-status", pod([container("c1", {"cpu": "1"}, {"cpu": "2"})], conditions=[INFEASIBLE]),
     per_rule(usage({"cpu": "1"}, {"cpu": "2"}), usage())),
]


@pytest.mark.parametrize("pod_obj, expected", cases(RELEASE_RULES))
def test_release_rules(pod_obj, expected):
    check(pod_obj, expected)


def test_unknown_release_charges_by_the_rule_of_1_33_to_1_36():
    # the core does not know the cluster's release: pod_usage without one follows 1.33 to 1.36
    for case in RELEASE_RULES:
        assert q.pod_usage(case[1]) == q.pod_usage(case[1], kubernetes_minor=33), case[0]


# ---------------------------------------------------------------------------
# pod-level resources (spec.resources) beside container status

POD_LEVEL = [
    # derived from H33/H37 TestPodLevelResourceRequests "pod level memory and container level cpu resources with
    # SkipPodLevelResources false", the container resized down: pod-level memory replaces the containers' (the
    # evaluator does not pass InPlacePodLevelResourcesVerticalScalingEnabled: pod status is not read), the cpu the
    # pod level does not name follows the container's status
    ("pod-level-memory-container-status-cpu", pod(
        [container("c", {"cpu": "2m", "memory": "3Mi"})], pod_level={"requests": {"memory": "15Mi"}},
        statuses=[status("c", allocated={"cpu": "2m", "memory": "3Mi"}, requests={"cpu": "4m", "memory": "3Mi"})]),
     both({"cpu": "4m", "memory": "15Mi"})),
    # derived from H37 TestPodRequestsAndLimitsVerticalScalingWrappers "pod level requests/limits with PLR vertical
    # scaling enabled and status populated", with the evaluator's options: spec.resources, not status.resources
    ("pod-level-status-not-read", dict(pod(
        [container("c1", {"cpu": "1"}, {"cpu": "2"})], pod_level={"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}),
        status={"phase": "Running", "allocatedResources": {"cpu": "3"},
                "resources": {"requests": {"cpu": "3.5"}, "limits": {"cpu": "5"}}}),
     both({"cpu": "2"}, {"cpu": "4"})),
    # H33 and H37 TestPodLevelResourceRequests "pod-level resources, container-level resources, hugepage
    # request/limit single page size": pod-level hugepages replace the containers' too
    ("pod-level-hugepages", pod([container("", {"hugepages-2Mi": "6Mi"}, {"hugepages-2Mi": "6Mi"})],
                                pod_level={"requests": {"cpu": "1", "hugepages-2Mi": "10Mi"},
                                           "limits": {"hugepages-2Mi": "10Mi"}}),
     both({"cpu": "1", "hugepages-2Mi": "10Mi"}, {"hugepages-2Mi": "10Mi"})),
]


@pytest.mark.parametrize("pod_obj, expected", cases(POD_LEVEL))
def test_pod_level_resources_with_status(pod_obj, expected):
    check(pod_obj, expected)


# ---------------------------------------------------------------------------
# pods without status, or whose status carries no resources: the spec, as before

NO_STATUS = [
    # P33 and P37 TestPodEvaluatorUsageResourceResize
    # "verify Max(Container.Spec.Requests, ContainerStatus.Resources==nil) for CPU and memory resource"
    ("status-without-resources", pod([container("", {"cpu": "100m", "memory": "200Mi"},
                                                {"cpu": "200m", "memory": "400Mi"})],
                                     statuses=[{}]),
     both({"cpu": "100m", "memory": "200Mi"}, {"cpu": "200m", "memory": "400Mi"})),
    # P33 and P37 TestPodEvaluatorUsage "count pod overhead as usage" (no status at all)
    ("no-status-overhead", pod([container("", {"cpu": "1"}, {"cpu": "2"})], overhead={"cpu": "1"},
                               with_status=False),
     both({"cpu": "2"}, {"cpu": "3"})),
    # H33 and H37 TestPodResourceRequests "restartable-init, init and regular" (no status)
    ("no-status-sidecar-init-regular", pod([container("container-1", {"cpu": "100"})],
                                           init=[container("restartable-init-1", {"cpu": "10"}, sidecar=True),
                                                 container("init-1", {"cpu": "200"})], with_status=False),
     both({"cpu": "210"})),
    # P33 and P37 TestPodEvaluatorUsage "init container maximums override sum of containers" (no status)
    ("no-status-init-maximums", pod(
        [container("", {"cpu": "1", "memory": "50M", "example.com/dongle": "1"},
                   {"cpu": "2", "memory": "100M", "example.com/dongle": "1"}),
         container("", {"cpu": "2", "memory": "25M", "example.com/dongle": "2"},
                   {"cpu": "5", "memory": "50M", "example.com/dongle": "2"})],
        init=[container("", {"cpu": "4", "memory": "100M", "example.com/dongle": "4"},
                        {"cpu": "8", "memory": "200M", "example.com/dongle": "4"}),
              container("", {"cpu": "1", "memory": "50M", "example.com/dongle": "2"},
                        {"cpu": "2", "memory": "100M", "example.com/dongle": "2"})], with_status=False),
     both({"cpu": "4", "memory": "100M", "example.com/dongle": "4"}, {"cpu": "8", "memory": "200M"})),
    # derived: a Pending pod the kubelet has not reported on yet
    ("pending-no-container-statuses", pod([container("c", {"cpu": "1"}, {"cpu": "2"})], phase="Pending"),
     both({"cpu": "1"}, {"cpu": "2"})),
]


@pytest.mark.parametrize("pod_obj, expected", cases(NO_STATUS))
def test_pods_without_status_resources_charge_the_spec(pod_obj, expected):
    check(pod_obj, expected)


def test_overhead_goes_on_non_zero_limits_only():
    # derived: PodLimits (helpers.go, 1.33 and 1.37) adds the overhead to a limit the pod has and that is not zero
    limited = pod([container("a", {"cpu": "0"}, {"cpu": "0", "memory": "1Gi"})], overhead={"cpu": "1", "memory": "1Mi"})
    check(limited, both({"cpu": "1", "memory": "1Mi"}, {"cpu": "0", "memory": "1025Mi"}))


def test_a_bad_status_quantity_names_the_field():
    bad = pod([container("compute", {"cpu": "1"})], statuses=[status("compute", allocated={"cpu": "lots"})])
    with pytest.raises(InputError) as err:
        q.pod_usage(bad)
    assert "status.containerStatuses[compute].allocatedResources cpu" in err.value.message


# ---------------------------------------------------------------------------
# what the collection decides from it

Gi = 1024 ** 3


def test_a_source_pod_whose_resize_up_is_infeasible_is_planned_at_what_it_is_charged():
    # the tenant asked 4Gi for the running VM's pod, the node cannot give it: quota charges the 2Gi it holds
    # (status.used includes 2Gi, not 4Gi), and its completion gives back 2Gi, not the 4Gi of its spec
    source_pod = pod([container("compute", {"memory": "2Gi"}, {"memory": "4Gi"})],
                     statuses=[status("compute", allocated={"memory": "2Gi"},
                                      requests={"memory": "2Gi"}, limits={"memory": "2Gi"})], conditions=[INFEASIBLE])
    source = q.pod_usage(source_pod)
    assert source["limits.memory"] == 2 * Gi
    quota = {"metadata": {"name": "compute", "namespace": "tenant-a"},
             "spec": {"hard": {"limits.memory": "10Gi"}}, "status": {"hard": {"limits.memory": "10Gi"},
                                                                     "used": {"limits.memory": "9Gi"}}}
    vms = [{"namespace": "tenant-a", "name": "vm1", "charge": {"limits.memory": 2 * Gi}, "source": source,
            "facts": q.pod_facts()},
           {"namespace": "tenant-a", "name": "vm2", "charge": {"limits.memory": 3 * Gi}, "facts": q.pod_facts()}]
    plan = q.plan_quota(quota, vms, [["tenant-a/vm1"], ["tenant-a/vm2"]], source_pods_deleted=True)
    # vm1's target stays at 2Gi where its source held 2Gi: batch 2 starts at 9Gi and needs 2Gi more (its spec's
    # 4Gi would have promised 7Gi and 0 more, and the target pod of vm2 would be refused)
    assert [b.needed for b in plan.batches] == [{"limits.memory": Gi}, {"limits.memory": 2 * Gi}]
    assert plan.needed == {"limits.memory": 2 * Gi}


def test_a_pod_the_kubelet_still_holds_more_for_makes_over_use_lasting_not_lag():
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.ops import release_readiness as RR
    # resized down to 4Gi, the kubelet still holds 6Gi: quota charges 6Gi, above the 5Gi a release restores
    held = pod([container("compute", {"memory": "4Gi"}, {"memory": "4Gi"})],
               statuses=[status("compute", allocated={"memory": "6Gi"}, requests={"memory": "6Gi"},
                                limits={"memory": "6Gi"})])
    charged = q.pod_usage(held)
    assert charged["limits.memory"] == 6 * Gi
    used, target = {"limits.memory": 6 * Gi}, {"limits.memory": 5 * Gi}
    # lasting (the release restores and reports it), where the spec's 4Gi read as the quota controller lagging
    assert RR.usage_verdict(used, target, ["limits.memory"], charged, {"limits.memory"}, {}) == (["limits.memory"], [])
