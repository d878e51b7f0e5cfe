# -*- coding: utf-8 -*-
# Copyright: kvquota maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""KubeVirt's memory overhead of the compute container (GetMemoryOverhead).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from fractions import Fraction

from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import BINARY_SI, DECIMAL_SI
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.quantities import (
    ceil_qty,
    Mi,
    Qty,
    qty,
    qty_add,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.rules import (
    parse_overhead_ratio,
    rule,
)
from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.model.sizing.vmi import DefaultedVmi, get_path, vmi_quantity


# ---------------------------------------------------------------- KubeVirt's memory overhead

def _fixed_overhead_mi(version):
    """virt-launcher-monitor + virt-launcher + virtlogd + libvirtd/virtqemud + qemu, in Mi."""
    return rule("fixed_overhead_mi", version)


def _ratio_supported(version):
    """additionalGuestMemoryOverheadRatio exists in v0.58.2, v0.59.1+ and v1.0.0+."""
    return bool(rule("overhead_ratio", version))


def _multiply_memory(overhead, ratio):
    """multiplyMemory: + int64(float64(ceil(O/1000)) x (ratio - 1)) x 1000, in float64 like Go."""
    kilo = ceil_qty(overhead.value / 1000)
    addition = int(float(kilo) * (ratio - 1.0))
    return qty_add(overhead, Qty(Fraction(addition * 1000), DECIMAL_SI))


def memory_overhead(vmi, config, _parsed=None):
    """KubeVirt's memory overhead O (a Fraction) added to the compute container for this VMI."""
    return overhead_of(_parsed or DefaultedVmi(vmi, config), config).value


def overhead_of(v, config):
    """GetMemoryOverhead (+ network binding overhead from v1.4) as a Qty."""
    version = config.version
    overhead = Qty(Fraction(0), DECIMAL_SI)
    request = v.spec_requests.get("memory")
    kilo = ceil_qty(request.value / 1000) if request is not None else 0
    overhead = qty_add(overhead, Qty(Fraction(kilo * 1000 // 512), DECIMAL_SI))
    overhead = qty_add(overhead, Qty(Fraction(_fixed_overhead_mi(version) * Mi), BINARY_SI))
    vcpus = v.vcpus  # the mutator always sets a topology (from limits.cpu, else requests.cpu, else 1)
    overhead = qty_add(overhead, Qty(Fraction(8 * Mi * max(vcpus, 1)), BINARY_SI))
    overhead = qty_add(overhead, Qty(Fraction(8 * Mi), BINARY_SI))  # IOThread
    if v.autoattach("autoattachGraphicsDevice"):
        overhead = qty_add(overhead, Qty(Fraction(rule("video_overhead_mi", version) * Mi), BINARY_SI))
    arch = config.arch
    if rule("arch_from_vmi_spec", version) and v.spec.get("architecture"):
        arch = v.spec["architecture"]
    if arch == "arm64":
        overhead = qty_add(overhead, Qty(Fraction(128 * Mi), BINARY_SI))
    if v.is_vfio():
        overhead = qty_add(overhead, Qty(Fraction(1024 * Mi), BINARY_SI))
    if v.has_downward_metrics_volume():
        overhead = qty_add(overhead, Qty(Fraction(Mi), BINARY_SI))
    probes = v.exec_probes()
    if probes:
        overhead = qty_add(overhead, Qty(Fraction(10 * Mi * probes + 100 * Mi), BINARY_SI))
    if v.is_sev(version):
        overhead = qty_add(overhead, Qty(Fraction(256 * Mi), BINARY_SI))
    if v.has_tpm(version):
        overhead = qty_add(overhead, Qty(Fraction(53 * Mi), BINARY_SI))
    if rule("passt_800mi", version):
        for iface in v.interfaces:
            if isinstance(iface, dict) and iface.get("passt") is not None and not iface.get("ports"):
                overhead = qty_add(overhead, Qty(Fraction(800 * Mi), BINARY_SI))
    dedicated_extra = v.dedicated or v.guaranteed
    if dedicated_extra and rule("dedicated_100mi_before_ratio", version):
        overhead = qty_add(overhead, Qty(Fraction(100 * Mi), BINARY_SI))
    added = get_path(v.memory, "reservedOverhead", "addedOverhead")
    if rule("added_overhead_field", version) and added is not None:
        overhead = qty_add(overhead, vmi_quantity(added, "spec.domain.memory.reservedOverhead.addedOverhead"))
    ratio = parse_overhead_ratio(config.overhead_ratio) if _ratio_supported(version) else None
    if ratio is not None:
        overhead = _multiply_memory(overhead, ratio)
    if dedicated_extra and rule("dedicated_100mi_after_ratio", version):
        overhead = qty_add(overhead, Qty(Fraction(100 * Mi), BINARY_SI))
    if rule("network_binding_memory", version):
        overhead = qty_add(overhead, _network_binding_memory(v, config))
    return overhead


def _network_binding_memory(v, config):
    """computeResourceOverhead memory of each network binding plugin used (once per plugin); core passt 250Mi (v1.8+)."""
    total = Qty(Fraction(0), DECIMAL_SI)
    if rule("core_passt_250mi", config.version) and any(
            isinstance(i, dict) and i.get("passtBinding") is not None for i in v.interfaces):
        total = qty_add(total, Qty(Fraction(250 * Mi), BINARY_SI))
    plugins = dict(config.network_bindings)
    seen = set()
    for iface in v.interfaces:
        name = get_path(iface, "binding", "name") if isinstance(iface, dict) else None
        if not name or name in seen or name not in plugins:
            continue
        seen.add(name)
        memory = get_path(plugins[name], "computeResourceOverhead", "requests", "memory")
        if memory is not None:
            total = qty_add(total, qty(memory, "network.binding.%s.computeResourceOverhead" % name))
    return total
