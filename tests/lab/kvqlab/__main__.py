"""Command line: python3 -m kvqlab up|down|status|env (kvqlab installed from tests/lab by make deps)."""
from __future__ import annotations

import argparse
import importlib
import json
import shlex
import sys
import time

from . import controlplane as cp


def _log(msg: str) -> None:
    # never let a closed stderr (e.g. `| head`) interrupt starting or stopping the lab
    try:
        print(f"[kvqlab] {msg}", file=sys.stderr, flush=True)
    except (BrokenPipeError, OSError):
        pass


def _labels(values: list[str]) -> dict:
    out = {}
    for item in values or []:
        if "=" not in item:
            raise SystemExit(f"--node-label expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def _optional_module(name: str):
    try:
        return importlib.import_module(f"kvqlab.{name}")
    except ModuleNotFoundError as exc:
        if exc.name in (f"kvqlab.{name}", "kvqlab"):
            return None
        raise


def cmd_up(args) -> int:
    t0 = time.monotonic()
    lab = cp.up(run_dir=args.run_dir, nodes=args.nodes, node_cpu=args.node_cpu,
                node_memory=args.node_memory, node_pods=args.node_pods,
                node_labels=_labels(args.node_label), bin_dir=args.bin_dir, log=_log)
    if args.scenario:
        scenarios = _optional_module("scenarios")
        if scenarios is None:
            _log(f"--scenario {args.scenario}: kvqlab.scenarios is not available in this tree; "
                 "the control plane is up without a scenario")
            return 3
        emulator = _optional_module("emulator")
        if emulator is None:
            _log("kvqlab.emulator is not available in this tree; the scenario's VMs would never start; "
                 "nothing emulates KubeVirt")
            return 3
        _log("starting the KubeVirt emulator")
        try:
            emulator.start(lab)
        except Exception as exc:  # noqa: BLE001
            _log(f"the emulator did not start: {type(exc).__name__}: {exc}")
            return 4
        try:
            scenario = scenarios.load(args.scenario)
            _log(f"applying scenario {args.scenario}")
            scenarios.apply(lab, scenario)
        except Exception as exc:  # noqa: BLE001 - report, keep the control plane for inspection
            _log(f"scenario {args.scenario!r} failed: {type(exc).__name__}: {exc}")
            _log(f"the control plane is still up in {lab.run_dir}; `python3 -m kvqlab down --run-dir {lab.run_dir}` stops it")
            return 4
    elapsed = time.monotonic() - t0
    print(f"lab ready in {elapsed:.1f}s (run dir {lab.run_dir})")
    print(f"  server:           {lab.server}")
    print(f"  CA:               {lab.ca_file}")
    print(f"  admin kubeconfig: {lab.admin_kubeconfig}")
    print(f"  user kubeconfig:  {lab.user_kubeconfig}   (user {lab.user_name}, the roles of roles/install/files/*.yml)")
    print(f"  logs:             {lab.run_dir / 'logs'}")
    print(f"  try: kubectl --kubeconfig {lab.admin_kubeconfig} get nodes")
    print(f"  env: eval \"$(python3 -m kvqlab env --run-dir {lab.run_dir})\"")
    return 0


def cmd_down(args) -> int:
    results = cp.down(args.run_dir, log=_log)
    if not results:
        print("no lab processes were running")
    else:
        print("stopped: " + ", ".join(f"{k} ({v})" for k, v in results.items()))
    return 0


def cmd_status(args) -> int:
    st = cp.status(args.run_dir)
    if args.json:
        print(json.dumps(st, indent=1))
    else:
        print(f"run dir: {st['run_dir']}")
        if not st["processes"]:
            print("no lab running here" + (" (stopped)" if st.get("server") else ""))
        for name, p in st["processes"].items():
            print(f"  {name:<26} pid {p['pid']:<8} {'running' if p['alive'] else 'DEAD'}")
        if st.get("server") and st["processes"]:
            print(f"server {st['server']}: {'ready' if st.get('ready') else 'NOT ready'}")
            print(f"admin kubeconfig: {st['admin_kubeconfig']}")
            print(f"user kubeconfig:  {st['user_kubeconfig']}")
            print(f"logs: {st['logs']}")
    return 0 if st.get("ready") else 1


def cmd_env(args) -> int:
    lab = cp.attach(args.run_dir)
    for k, v in lab.env(admin=not args.user).items():
        print(f"export {k}={shlex.quote(v)}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m kvqlab",
                                 description="kvquota lab: a real control plane on 127.0.0.1")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--run-dir", default=None,
                       help="lab state dir (default $KVQ_LAB_RUN_DIR or ~/.cache/kvquota/lab-run)")

    p = sub.add_parser("up", help="start a lab (or report the one already running)")
    common(p)
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--node-cpu", default="32")
    p.add_argument("--node-memory", default="128Gi")
    p.add_argument("--node-pods", default="110")
    p.add_argument("--node-label", action="append", default=[], metavar="KEY=VALUE",
                   help="label for every node (repeatable)")
    p.add_argument("--bin-dir", default=None, help="binaries (default $KVQ_LAB_BIN_DIR or build.sh's cache)")
    p.add_argument("--scenario", default=None, help="apply kvqlab.scenarios NAME and start the emulator")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="stop what the lab started (by pid)")
    common(p)
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("status", help="show processes and readiness; exit 0 when ready")
    common(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("env", help="print shell exports (K8S_AUTH_KUBECONFIG, KUBECONFIG, ...)")
    common(p)
    p.add_argument("--user", action="store_true", help="the least-privilege identity instead of admin")
    p.set_defaults(func=cmd_env)

    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except cp.LabError as exc:
        print(f"kvqlab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
