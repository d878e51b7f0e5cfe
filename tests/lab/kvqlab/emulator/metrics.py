"""virt-controller's metrics endpoint, as far as the lab needs it: `kubevirt_vmi_launcher_memory_overhead_bytes`.

KubeVirt v1.9.0's VMI stats collector (pkg/monitoring/metrics/virt-controller/vmistats_collector.go,
collectVMILauncherMemoryOverhead) reports, per VMI in virt-controller's cache, `status.memory.memoryOverhead`'s
Value() (0 when the field is not set), labelled namespace and name. The metric is a copy of that status field, so
it is no more a control plane's own number than the field is (a VMI has no status subresource and kubevirt.io:edit
may update it): the lab serves it so that its tests can show that, and kvquota reads neither for an amount.

Served over plain HTTP on a loopback port (GET /metrics, the Prometheus text format); the emulator writes the port
to the file --metrics-port-file names.
"""
import logging
import math
from http.server import BaseHTTPRequestHandler

from . import collection
from .webhook import LoopbackServer

log = logging.getLogger("virt-controller-metrics")

METRIC = "kubevirt_vmi_launcher_memory_overhead_bytes"
HELP = "Estimation of the memory amount required for virt-launcher's infrastructure components (e.g. libvirt, QEMU)."


def _value(text):
    """Quantity.Value() of a status field (rounded up to a whole number), or None for a value the Go client could
    not decode (virt-controller's informer would not hold such a VMI)."""
    if text is None:
        return 0
    collection.ensure_importable()
    from ansible_collections.kvquota.maintenance.plugins.module_utils.kvquota.base.quantity import parse_quantity
    try:
        return int(math.ceil(parse_quantity(str(text))))
    except Exception:  # pylint: disable=broad-except
        return None


def go_float(value):
    """value as client_golang's text exposition writes a sample (strconv.FormatFloat(v, 'g', -1, 64)): the shortest
    digits, in exponent form for an exponent of 6 and more or below -4 (Go's 'g' decides with precision 6 when the
    precision is the shortest), else plain: 2.34881024e+08, 123456, 1.5."""
    value = float(value)
    if value == 0:
        return "0"
    for digits in range(17):
        text = "%.*e" % (digits, value)
        if float(text) == value:
            break
    mantissa, exponent = text.split("e")
    exp = int(exponent)
    if exp < -4 or exp >= 6:
        return "%se%s%02d" % (mantissa, "-" if exp < 0 else "+", abs(exp))
    plain = repr(value)
    return plain[:-2] if plain.endswith(".0") else plain


def _label(text):
    return str(text).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(vmis):
    """The metric's lines in the Prometheus text format for vmis (VMI objects as the informer holds them)."""
    lines = ["# HELP %s %s" % (METRIC, HELP), "# TYPE %s gauge" % METRIC]
    for vmi in sorted(vmis, key=lambda v: (v["metadata"].get("namespace") or "", v["metadata"].get("name") or "")):
        value = _value(((vmi.get("status") or {}).get("memory") or {}).get("memoryOverhead"))
        if value is None:
            continue
        md = vmi["metadata"]
        labels = 'name="%s",namespace="%s"' % (_label(md.get("name")), _label(md.get("namespace")))
        lines.append("%s{%s} %s" % (METRIC, labels, go_float(value)))
    return "\n".join(lines) + "\n"


class MetricsServer(LoopbackServer):
    """GET /metrics with exposition(list_vmis()), on a daemon thread."""

    def __init__(self, list_vmis, port=0):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                data = exposition(list_vmis()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, fmt, *args):
                log.debug(fmt, *args)

        LoopbackServer.__init__(self, Handler, "metrics", port)
