"""python3 -m kvqlab.emulator --kubeconfig K --namespace-of-knobs kvqlab-system [...]"""
import argparse
import logging
import os
import signal
import sys
import threading

from . import install_crds, install_identities
from .controller import DEFAULT_KV_VERSION, run
from .knobs import parse_knobs
from .metrics import MetricsServer
from .rest import Rest, make_api_client


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kvqlab.emulator",
                                 description="KubeVirt (virt-controller/virt-handler), Rancher and Harvester "
                                             "emulation for the kvquota lab. Tests only.")
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--namespace-of-knobs", default="kvqlab-system",
                    help="namespace of the ConfigMap emulator-knobs (default %(default)s)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--kubevirt-version", default=DEFAULT_KV_VERSION,
                    help="version reported when the KubeVirt CR has no status.observedKubeVirtVersion")
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                    help="default knob value (the ConfigMap overrides it); repeatable")
    ap.add_argument("--log-file")
    ap.add_argument("--pid-file")
    ap.add_argument("--ready-file", help="written once caches are synced and workers run")
    ap.add_argument("--metrics-port-file",
                    help="serve virt-controller's VMI overhead metric on a loopback port and write the port here")
    ap.add_argument("--no-install-crds", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    handlers = [logging.FileHandler(args.log_file)] if args.log_file else [logging.StreamHandler(sys.stderr)]
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, handlers=handlers,
                        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s",
                        datefmt="%Y-%m-%dT%H:%M:%S")
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    defaults = parse_knobs(dict(kv.split("=", 1) for kv in args.set))
    if not args.no_install_crds:
        install_crds(Rest(make_api_client(args.kubeconfig)))
        install_identities(Rest(make_api_client(args.kubeconfig)))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    emu = run(args.kubeconfig, args.namespace_of_knobs, workers=args.workers, default_knobs=defaults,
              default_version=args.kubevirt_version, pid_file=args.pid_file)
    served = None
    if args.metrics_port_file:
        served = MetricsServer(emu.vmis.list).start()
        with open(args.metrics_port_file, "w") as fh:
            fh.write(str(served.port))
    if args.ready_file:
        with open(args.ready_file, "w") as fh:
            fh.write(str(os.getpid()))
    done.wait()
    logging.getLogger("kvqlab.emulator").info("stopping (counters %s)", emu.counters)
    emu.stop()
    if served is not None:
        served.stop()
    if args.ready_file and os.path.exists(args.ready_file):
        os.unlink(args.ready_file)
    if args.pid_file and os.path.exists(args.pid_file):
        os.unlink(args.pid_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
