# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the VMI (or a VM's template) as KubeVirt's mutating webhook defaults it (DefaultedVmi); an error in what the VM's
owner wrote is a VmInputError that blocks that VM only.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.errors import InputError
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.quantities import Qty, ceil_qty, qty
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    CBT_STATES_NEEDING_STORAGE,
    EMULATOR_THREAD_EVEN_PARITY_ANNOTATION,
    HOOK_SIDECARS_ANNOTATION,
    rule,
)


class VmInputError(InputError):
    """An error in input the VM's owner (a tenant) writes: the VM's or VMI's spec, annotations and labels, or, for
    scope "namespace", its namespace's labels (under Rancher a project member may edit them). It concerns that VM
    (or that namespace's VMs) only: callers sizing many VMs block that one VM, named with its namespace and the
    field, and go on with the others. field: where the bad value is (e.g. metadata.annotations[...])."""

    def __init__(self, message, fix=None, field=None, scope="vm", details=None):
        super(VmInputError, self).__init__(message, fix, details)
        self.field = field
        self.scope = scope


def get_path(obj, *path):
    """obj[path0][path1]... or None."""
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def truthy(value):
    """A YAML-ish boolean."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "on")
    return bool(value)


# ---------------------------------------------------------------- reading the VMI

def _is_vm(obj):
    """obj is a VirtualMachine (sized through its spec.template), not a VMI."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return isinstance(spec, dict) and (obj.get("kind") == "VirtualMachine" or ("template" in spec and "domain" not in spec))


def _vmi_parts(obj):
    """(metadata, spec) of a VMI, or of a VM's spec.template (namespace from the VM)."""
    if not isinstance(obj, dict):
        raise InputError("expected a VirtualMachineInstance or VirtualMachine manifest, got %s" % type(obj).__name__,
                         "pass the object as a mapping (e.g. from kubernetes.core.k8s_info)")
    kind = obj.get("kind")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise VmInputError("%s has no spec" % (kind or "object"), "pass a VirtualMachineInstance or VirtualMachine manifest",
                           field="spec")
    metadata = obj.get("metadata") or {}
    if _is_vm(obj):
        if spec.get("instancetype") or spec.get("preference"):
            raise VmInputError("VirtualMachine %s uses an instancetype or preference that kvquota cannot expand"
                               % metadata.get("name", "?"),
                               "size its running VirtualMachineInstance instead", field="spec.instancetype")
        template = spec.get("template") or {}
        tmeta = dict(template.get("metadata") or {})
        tmeta.setdefault("namespace", metadata.get("namespace"))
        tmeta.setdefault("name", metadata.get("name"))
        spec = template.get("spec")
        metadata = tmeta
        if not isinstance(spec, dict):
            raise VmInputError("VirtualMachine %s has no spec.template.spec" % metadata.get("name", "?"),
                               "pass a complete VirtualMachine or its VirtualMachineInstance", field="spec.template.spec")
    if not isinstance(spec.get("domain"), dict):
        raise VmInputError("%s %s has no spec.domain" % (kind or "VMI", metadata.get("name", "?")),
                           "pass a VirtualMachineInstance or VirtualMachine manifest", field="spec.domain")
    return metadata, spec


def vmi_quantity(value, where):
    """qty of a value the VM's owner wrote (VmInputError naming the field when it is not a quantity)."""
    try:
        return qty(value, where)
    except VmInputError:
        raise
    except InputError as err:
        raise VmInputError(err.message, err.fix or "correct %s of the VM" % where, field=where)


def _resource_list(mapping, where):
    """name -> Qty for a VMI resource mapping."""
    if mapping is not None and not isinstance(mapping, dict):
        raise VmInputError("%s is not a mapping of resource names to quantities" % where,
                           "correct %s of the VM" % where, field=where)
    result = {}
    for name, value in (mapping or {}).items():
        result[str(name)] = vmi_quantity(value, "%s.%s" % (where, name))
    return result


class DefaultedVmi(object):
    """The facts about a VMI that sizing needs, after KubeVirt's mutating-webhook defaults."""

    def __init__(self, obj, config):
        metadata, spec = _vmi_parts(obj)
        self.metadata = metadata
        self.spec = spec
        self.status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        self.annotations = dict(metadata.get("annotations") or {})
        domain = spec["domain"]
        self.domain = domain
        self.devices = domain.get("devices") or {}
        resources = domain.get("resources") or {}
        self.requests = _resource_list(resources.get("requests"), "spec.domain.resources.requests")
        self.limits = _resource_list(resources.get("limits"), "spec.domain.resources.limits")
        self.overcommit_guest_overhead = truthy(resources.get("overcommitGuestOverhead"))
        self.memory = domain.get("memory") or {}
        self.guest = vmi_quantity(self.memory["guest"], "spec.domain.memory.guest") if self.memory.get("guest") is not None else None
        self.cpu = dict(domain.get("cpu")) if isinstance(domain.get("cpu"), dict) else None
        self._apply_defaults(config)
        if _is_vm(obj):
            self._copy_cr_annotations(config)

    def _copy_cr_annotations(self, config):
        """The VMI mutator (v1.1.1+) copies the even-parity annotation of the KubeVirt CR onto a new VMI.

        Only for a VM: its next VMI is created now; a running VMI already carries what was copied
        when it was created, and a later change of the CR does not reach it.
        """
        cr_annotations = dict(config.kubevirt_annotations)
        if (rule("cr_annotation_copied_to_vmi", config.version) and self.cpu and self.cpu.get("isolateEmulatorThread")
                and EMULATOR_THREAD_EVEN_PARITY_ANNOTATION in cr_annotations and "AlignCPUs" in config.feature_gates):
            self.annotations[EMULATOR_THREAD_EVEN_PARITY_ANNOTATION] = ""

    def _apply_defaults(self, config):
        """setDefaultResourceRequests and SetDefaultGuestCPUTopology (idempotent on mutated VMIs).

        Up to v1.6.3 the mutating webhook writes the memory request into the VMI spec, so the
        overhead's page tables and the Guaranteed-QoS test see it; from v1.6.4 the renderer sets
        it on the pod only (WithMemoryRequests), and the VMI spec keeps what the user wrote.
        v1.6.2 alone wrote memory.guest unscaled and applied memoryOvercommit to whatever
        memory request the pod got, an explicit one too (reverted in v1.6.3).
        self.requests is what the renderer starts from; self.spec_requests is the VMI spec.
        """
        version = config.version
        cpu_limit, cpu_req = self.limits.get("cpu"), self.requests.get("cpu")
        if cpu_limit is not None and cpu_limit.value != 0 and (cpu_req is None or cpu_req.value == 0):
            self.requests["cpu"] = cpu_limit
        if rule("webhook_writes_memory_request", version):
            self._default_memory_request(config, scale=not rule("webhook_guest_request_ignores_overcommit", version))
            self.spec_requests = dict(self.requests)
        else:
            self.spec_requests = dict(self.requests)
            self._default_memory_request(config)
        overcommit = int(config.memory_overcommit or 100)
        if rule("overcommit_applied_to_every_request", version) and overcommit != 100 and "memory" in self.requests:
            memory = self.requests["memory"]
            self.requests["memory"] = Qty(Fraction(ceil_qty(memory.value) * 100 // overcommit), memory.fmt)
        self._default_cpu(config)

    def _default_memory_request(self, config, scale=True):
        """Memory request from the limit, else from memory.guest (or the hugepage size), scaled by memoryOvercommit."""
        mem_limit, mem_req = self.limits.get("memory"), self.requests.get("memory")
        if mem_limit is not None and mem_limit.value != 0 and (mem_req is None or mem_req.value == 0):
            self.requests["memory"] = mem_limit
        if "memory" not in self.requests:
            memory = self.guest
            if memory is None and isinstance(self.memory.get("hugepages"), dict):
                try:
                    memory = qty(self.memory["hugepages"].get("pageSize"))
                except InputError:
                    memory = None
            if memory is not None and ceil_qty(memory.value) > 0:
                overcommit = int(config.memory_overcommit or 100) if scale else 100
                if overcommit == 100:
                    self.requests["memory"] = memory
                else:
                    self.requests["memory"] = Qty(Fraction(ceil_qty(memory.value) * 100 // overcommit), memory.fmt)

    def _default_cpu(self, config):
        """The cluster's cpuRequest default and the guest CPU topology (sockets from limits/requests.cpu)."""
        if config.cpu_request and "cpu" not in self.requests and not self.dedicated:
            default = qty(config.cpu_request, "cpu_request")
            if default.value != Fraction(1, 10):
                self.requests["cpu"] = default
        if self.cpu is None or not any(self.cpu.get(k) for k in ("cores", "sockets", "threads")):
            self.cpu = dict(self.cpu or {})
            sockets = 1
            if "cpu" in self.limits:
                sockets = ceil_qty(self.limits["cpu"].value)
            elif "cpu" in self.requests:
                sockets = ceil_qty(self.requests["cpu"].value)
            self.cpu.update(sockets=sockets, cores=1, threads=1)

    # predicates, named after KubeVirt's
    @property
    def dedicated(self):
        return bool(self.cpu and self.cpu.get("dedicatedCpuPlacement"))

    @property
    def guaranteed(self):
        """WantsToHaveQOSGuaranteed: memory and cpu requests non-zero and equal to the limits."""
        def same(name):
            req, lim = self.spec_requests.get(name), self.limits.get(name)
            return req is not None and req.value != 0 and req.value == (lim.value if lim is not None else 0)
        return same("memory") and same("cpu")

    @property
    def vcpus(self):
        """GetNumberOfVCPUs: product of the non-zero topology fields."""
        result = 0
        for key in ("cores", "sockets", "threads"):
            n = int(self.cpu.get(key) or 0) if self.cpu else 0
            if n:
                result = n if result == 0 else result * n
        return result

    @property
    def interfaces(self):
        return self.devices.get("interfaces") or []

    @property
    def volumes(self):
        return self.spec.get("volumes") or []

    def has_hugepages(self):
        return isinstance(self.memory.get("hugepages"), dict)

    def gpus(self):
        return self.devices.get("gpus") or []

    def host_devices(self):
        return self.devices.get("hostDevices") or []

    def is_sriov(self):
        return any(isinstance(i, dict) and i.get("sriov") is not None for i in self.interfaces)

    def is_vfio(self):
        return bool(self.gpus() or self.host_devices() or self.is_sriov())

    def is_sev(self, version):
        """util.IsSEVVMI (SEV-ES is launchSecurity.sev with policy.encryptedState, so always counted)."""
        security = self.domain.get("launchSecurity") or {}
        if not isinstance(security, dict):
            return False
        if rule("snp_counted_as_sev", version) and security.get("snp") is not None:
            return True
        return security.get("sev") is not None

    def has_tpm(self, version):
        tpm = self.devices.get("tpm")
        if tpm is None:
            return False
        if rule("tpm_enabled_false_honoured", version) and isinstance(tpm, dict) and tpm.get("enabled") is False:
            return False
        return True

    def needs_backend_storage(self, version):
        """IsBackendStorageNeeded: a persistent TPM or EFI, from v1.7.0 also changed block tracking in the status."""
        tpm = self.devices.get("tpm")
        persistent_tpm = isinstance(tpm, dict) and self.has_tpm(version) and truthy(tpm.get("persistent"))
        efi = get_path(self.domain, "firmware", "bootloader", "efi")
        persistent_efi = isinstance(efi, dict) and truthy(efi.get("persistent"))
        cbt = rule("cbt_needs_backend_storage", version) and \
            get_path(self.status, "changedBlockTracking", "state") in CBT_STATES_NEEDING_STORAGE
        return bool(persistent_tpm or persistent_efi or cbt)

    def autoattach(self, key):
        """devices.<key> is unset or true."""
        value = self.devices.get(key)
        return value is None or truthy(value)

    def needs_tun(self):
        return bool(self.interfaces) or self.autoattach("autoattachPodInterface")

    def wants_virtio_net(self):
        return any(isinstance(i, dict) and i.get("model", "") in ("", "virtio") for i in self.interfaces)

    def exec_probes(self):
        return sum(1 for key in ("livenessProbe", "readinessProbe")
                   if isinstance(self.spec.get(key), dict) and self.spec[key].get("exec") is not None)

    def has_downward_metrics_volume(self):
        return any(isinstance(v, dict) and v.get("downwardMetrics") is not None for v in self.volumes)

    def has_persistent_reservation(self):
        for disk in self.devices.get("disks") or []:
            if isinstance(disk, dict) and truthy(get_path(disk, "lun", "reservation")):
                return True
        return False

    def container_disk_volumes(self):
        return [v for v in self.volumes if isinstance(v, dict) and v.get("containerDisk") is not None
                and v.get("name") != "kernel-boot-volume"]

    def has_kernel_boot_container(self):
        return bool(get_path(self.domain, "firmware", "kernelBoot", "container", "image"))

    def virtiofs_volumes(self, version):
        """Volumes shared through virtiofs that get their own virtiofsd container (containerPath ones not, v1.8+)."""
        if not rule("virtiofs_container", version):
            return []
        names = set(fs.get("name") for fs in self.devices.get("filesystems") or [] if isinstance(fs, dict))
        skip_container_path = rule("virtiofs_skips_container_path", version)
        return [v for v in self.volumes if isinstance(v, dict) and v.get("name") in names
                and not (skip_container_path and v.get("containerPath") is not None)]

    def has_slirp_interface(self):
        return any(isinstance(i, dict) and i.get("slirp") is not None for i in self.interfaces)

    def hotplug_volumes(self):
        result = []
        for volume in self.volumes:
            if not isinstance(volume, dict):
                continue
            pvc = volume.get("persistentVolumeClaim") or {}
            dv = volume.get("dataVolume") or {}
            if truthy(pvc.get("hotpluggable")) or truthy(dv.get("hotpluggable")) or volume.get("memoryDump"):
                result.append(volume.get("name"))
        return result

    def supplemental_iothreads(self):
        return int(get_path(self.domain, "ioThreads", "supplementalPoolThreadCount") or 0)

    def io_threads_policy_supplemental(self):
        return self.domain.get("ioThreadsPolicy") == "supplementalPool"

    def hook_sidecars(self):
        text = self.annotations.get(HOOK_SIDECARS_ANNOTATION)
        if not text:
            return 0
        field = "metadata.annotations[%s]" % HOOK_SIDECARS_ANNOTATION
        try:
            sidecars = json.loads(text)
        except (ValueError, RecursionError):
            # RecursionError: valid JSON nested deeper than Python's decoder goes ("[" * 5000 + "]" * 5000)
            raise VmInputError("annotation %s is not valid JSON (or nested too deeply to read)" % HOOK_SIDECARS_ANNOTATION,
                               "fix the VM's hook sidecar annotation (KubeVirt cannot start its target pod either)",
                               field=field)
        # KubeVirt reads it as a list of sidecar objects ([{"image": ...}, ...]); anything else starts no pod
        if not isinstance(sidecars, list) or not all(isinstance(item, dict) for item in sidecars):
            raise VmInputError("annotation %s is not a JSON list of hook sidecar objects (got %s)"
                               % (HOOK_SIDECARS_ANNOTATION, _json_shape(sidecars)),
                               "fix the VM's hook sidecar annotation to a list such as [{\"image\": \"...\"}] "
                               "(KubeVirt cannot start its target pod either)", field=field)
        return len(sidecars)


def _json_shape(value):
    """What a decoded JSON value is, for a message (never the value: it is tenant input of any size)."""
    if isinstance(value, list):
        kinds = sorted(set(_json_shape(item) for item in value if not isinstance(item, (list, dict))) |
                       set("a list" if isinstance(item, list) else "an object" for item in value
                           if isinstance(item, (list, dict))))
        return "a list of %s" % " and ".join(kinds) if kinds else "an empty list"
    return {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")
