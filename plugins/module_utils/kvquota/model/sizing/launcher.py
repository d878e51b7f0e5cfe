# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Size a virt-launcher pod (and so a live-migration target pod) the way KubeVirt does: launcher_pod and
migration_charge, and what quota charges for the pod (pod_charge). The other modules of this package are its parts,
split as KubeVirt's renderresources splits it: rules (the versions and their rules), config (the cluster's
settings), vmi (the VMI as defaulted), overhead, compute (the compute container), support (the other containers and
pods), quantities (values with their formats, Go's float formatting).

The rules follow KubeVirt's pkg/virt-controller/services (template.go up to v0.55, renderresources.go from v0.56,
pkg/hypervisor from v1.8) at every release tag to v1.9.0, and Kubernetes' own pod accounting for ResourceQuota
(component-helpers PodRequests/PodLimits and the quota pod evaluator). docs/docsite/rst/sizing.rst lists every
version-dependent rule and what was checked.

Quantities are exact Fractions; their Kubernetes formats are tracked alongside so the strings printed are the ones
the apiserver would show on the pod.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from dataclasses import dataclass, field
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import DECIMAL_SI
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.resources import add
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.quotas import (
    pod_resources,
    usage_from_requests_limits,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.compute import compute_container
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.config import ClusterConfig
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.overhead import overhead_of
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.quantities import (
    format_qty_list,
    Mi,
    Qty,
    qty,
    qty_add,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    audited_version,
    IMAGE_VOLUME_GATE,
    NEWEST_KNOWN_VERSION,
    rule,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.support import (
    binary_init_resources,
    console_log_container,
    container_disk_resources,
    container_of,
    hotplug_pod_resources,
    sidecar_resources,
    virtiofs_resources,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.vmi import DefaultedVmi, get_path


@dataclass(frozen=True)
class LauncherPod:
    """A launcher pod (or a pod created with it) and what ResourceQuota charges for it."""

    containers: tuple  # ContainerResources, in pod order (compute first)
    init_containers: tuple
    charge: dict  # quota names -> Fraction: requests.cpu, limits.memory, pods, count/pods, ...
    extra_pods: tuple = ()  # LauncherPods created with the target (the hp-volume attachment pod), per container
    extra_charge: dict = field(default_factory=dict)  # extra pods plus PVCs (requests.storage, ...)
    pvc_charge: dict = field(default_factory=dict)  # the PVCs alone (backend storage), also in extra_charge
    formats: dict = field(default_factory=dict, compare=False)  # quota name -> quantity format
    extra_formats: dict = field(default_factory=dict, compare=False)  # the same for extra_charge
    memory_overhead: Fraction = Fraction(0)  # KubeVirt's overhead O for the compute container
    notes: tuple = ()  # what the numbers rest on that the caller may want to know
    name: str = "virt-launcher"

    def formatted_charge(self, which="charge"):
        """The charge (or extra_charge, pvc_charge) as quota names -> canonical quantity strings."""
        formats = self.extra_formats if which in ("extra_charge", "pvc_charge") else self.formats
        return format_qty_list(getattr(self, which), formats)

    def formatted_total(self):
        """total_charge() as canonical strings (the launcher pod's formats first)."""
        return format_qty_list(self.total_charge(), dict(self.extra_formats, **self.formats))

    def total_charge(self):
        """Everything a migration adds to the namespace: this pod plus extra pods and PVCs."""
        return add(self.charge, self.extra_charge)


# ---------------------------------------------------------------- quota accounting

def _sum_into(total, rl):
    """addResourceList: first addend's format wins."""
    for name, q in rl.items():
        total[name] = qty_add(total.get(name), q)


def _max_into(total, rl):
    """maxResourceList: the larger quantity (and its format) wins."""
    for name, q in rl.items():
        if name not in total or q.value > total[name].value:
            total[name] = q


def _as_q(container, which):
    """A container's requests or limits as Qty values."""
    rl = getattr(container, which)
    formats = container.formats or {}
    return dict((k, Qty(val, formats.get("%s.%s" % (which, k), DECIMAL_SI))) for k, val in rl.items())


def _pod_totals(containers, init_containers, which):
    """PodRequests/PodLimits of ContainerResources (quotas.pod_resources), each value with its format."""
    return pod_resources([_as_q(c, which) for c in containers],
                         [(_as_q(c, which), c.restartable) for c in init_containers], _sum_into, _max_into)


def pod_charge(containers, init_containers=(), pod_overhead=None):
    """(charge, formats): what the quota pod evaluator charges for a pod with these containers."""
    requests = _pod_totals(containers, init_containers, "requests")
    limits = _pod_totals(containers, init_containers, "limits")
    for name, value in dict(pod_overhead or {}).items():
        q = value if isinstance(value, Qty) else qty(value, "pod_overhead.%s" % name)
        requests[name] = qty_add(requests.get(name), q)
        if name in limits:
            limits[name] = qty_add(limits[name], q)
    charge = usage_from_requests_limits(requests, limits, one=Qty(Fraction(1), DECIMAL_SI))
    return (dict((k, q.value) for k, q in charge.items()),
            dict((k, q.fmt or DECIMAL_SI) for k, q in charge.items()))


def _pvc_charge(config):
    """The 10Mi backend-storage PVC for persistent TPM/EFI."""
    size = Fraction(10 * Mi)
    charge = {"requests.storage": size, "persistentvolumeclaims": Fraction(1),
              "count/persistentvolumeclaims": Fraction(1)}
    if config.vm_state_storage_class:
        prefix = "%s.storageclass.storage.k8s.io/" % config.vm_state_storage_class
        charge[prefix + "requests.storage"] = size
        charge[prefix + "persistentvolumeclaims"] = Fraction(1)
    return charge


# ---------------------------------------------------------------- public API

def launcher_pod(vmi, config, namespace_labels=None, quota_tracks=frozenset(), network_resources=None):
    """The launcher pod KubeVirt would render now for vmi (a VMI or a VM), with its quota charge.

    namespace_labels: labels of the VMI's namespace (auto memory limits ratio, auto CPU limit selector).
    quota_tracks: resource names in the spec.hard of the namespace's quotas (KubeVirt adds limits only
    when limits.cpu / limits.memory are tracked).
    network_resources: Multus network name -> device-plugin resource of its NetworkAttachmentDefinition
    (annotation k8s.v1.cni.cncf.io/resourceName), for SR-IOV and similar networks.
    """
    if not isinstance(config, ClusterConfig):
        raise InputError("config must be a ClusterConfig, got %s" % type(config).__name__,
                         "build one with ClusterConfig(...) or config_from_cluster(...)")
    v = DefaultedVmi(vmi, config)
    version = config.version
    notes = []
    if version > NEWEST_KNOWN_VERSION:
        notes.append("KubeVirt %s is newer than the newest version kvquota knows (%d.%d); sized with its rules"
                     % ((config.kubevirt_version,) + NEWEST_KNOWN_VERSION[:2]))
    elif audited_version(version) != version:
        notes.append("KubeVirt %s is newer than the newest audited patch release of its minor; sized with v%d.%d.%d's rules"
                     % ((config.kubevirt_version,) + audited_version(version)))
    multus = [n["multus"].get("networkName") for n in v.spec.get("networks") or []
              if isinstance(n, dict) and isinstance(n.get("multus"), dict)]
    network_resources = dict(network_resources or {})
    if v.is_sriov() and any(name not in network_resources for name in multus if name):
        notes.append("SR-IOV networks without a known device-plugin resource are not charged; pass network_resources")
    per_network = [network_resources[name] for name in multus if name in network_resources]

    overhead = overhead_of(v, config)
    requests, limits = compute_container(v, config, overhead, namespace_labels, quota_tracks, per_network)
    containers = [container_of("compute", requests, limits)]
    init_containers = []

    disk_req, disk_lim = container_disk_resources(v, config)
    # With the ImageVolume gate the disks are image volumes: no containers, and no init containers for a
    # migration target, whose image digests are read from the source pod (ExtractImageIDsFromSourcePod).
    image_volumes = bool(rule("image_volume_gate", version)) and config.gate_enabled(IMAGE_VOLUME_GATE)
    disks = [] if image_volumes else v.container_disk_volumes()
    kernel_boot = v.has_kernel_boot_container() and not image_volumes
    if image_volumes and (v.container_disk_volumes() or v.has_kernel_boot_container()):
        notes.append("container disks are image volumes (ImageVolume feature gate): no container-disk containers")
    for volume in disks:
        containers.append(container_of("volume" + str(volume.get("name", "")), disk_req, disk_lim))
    if kernel_boot:
        containers.append(container_of("kernel-boot", disk_req, disk_lim))
    vfs_req, vfs_lim = virtiofs_resources(v, config)
    for volume in v.virtiofs_volumes(version):
        containers.append(container_of("virtiofs-" + str(volume.get("name", "")), vfs_req, vfs_lim))
    console = console_log_container(v, config)
    if console is not None and not console.restartable:
        containers.append(console)
    sidecars = v.hook_sidecars()
    if rule("network_binding_sidecars", version):
        plugins = dict(config.network_bindings)
        used = set(get_path(i, "binding", "name") for i in v.interfaces if isinstance(i, dict))
        sidecars += sum(1 for name in used if name in plugins and get_path(plugins[name], "sidecarImage"))
    if rule("slirp_binding_sidecar", version) and v.has_slirp_interface():
        sidecars += 1  # the registered slirp plugin's image, else KubeVirt's default one
    side_req, side_lim = sidecar_resources(v, config)
    for i in range(sidecars):
        containers.append(container_of("hook-sidecar-%d" % i, side_req, side_lim))

    if console is not None and console.restartable:
        init_containers.append(console)
    if disks or kernel_boot:
        bin_req, bin_lim = binary_init_resources(v, config)
        init_containers.append(container_of("container-disk-binary", bin_req, bin_lim))
        for volume in disks:
            init_containers.append(container_of("volume" + str(volume.get("name", "")) + "-init", disk_req, disk_lim))
        if kernel_boot:
            init_containers.append(container_of("kernel-boot-init", disk_req, disk_lim))

    overhead_list = dict(config.pod_overhead)
    charge, formats = pod_charge(containers, init_containers, overhead_list)

    extra_pods = []
    extra_charge = {}
    extra_formats = {}
    hotplug = v.hotplug_volumes()
    if hotplug:
        hp_req, hp_lim = hotplug_pod_resources(v, config)
        hp_container = container_of("hotplug-disk", hp_req, hp_lim)
        hp_charge, hp_formats = pod_charge([hp_container])
        extra_pods.append(LauncherPod(containers=(hp_container,), init_containers=(), charge=hp_charge,
                                      formats=hp_formats, name="hp-volume"))
        extra_charge = add(extra_charge, hp_charge)
        extra_formats.update(hp_formats)
    pvc_charge = {}
    if rule("backend_storage_pvc", version) and v.needs_backend_storage(version) and not config.backend_storage_rwx:
        pvc_charge = _pvc_charge(config)
        extra_charge = add(extra_charge, pvc_charge)
        notes.append("a 10Mi backend-storage PVC is created for the target (persistent TPM/EFI or CBT, not RWX)")
    return LauncherPod(
        containers=tuple(containers),
        init_containers=tuple(init_containers),
        charge=charge,
        extra_pods=tuple(extra_pods),
        extra_charge=extra_charge,
        pvc_charge=pvc_charge,
        formats=formats,
        extra_formats=extra_formats,
        memory_overhead=overhead.value,
        notes=tuple(notes),
    )


def migration_charge(vmi, config, namespace_labels=None, quota_tracks=frozenset(), network_resources=None):
    """Everything a migration adds to the namespace: target pod + hotplug attachment pod + PVCs."""
    return launcher_pod(vmi, config, namespace_labels, quota_tracks, network_resources).total_charge()
