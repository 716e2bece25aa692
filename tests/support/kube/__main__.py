"""`python -m support.kube build|up|down|status` (PYTHONPATH=tests; the Makefile's cluster-tools,
cluster-up and cluster-down targets): build the binaries, start the local cluster in
out/cluster (kubeconfig: out/cluster/kubeconfig), stop it by the PIDs it recorded."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mooncake_pd import paths
from support.kube import build
from support.kube.cluster import Cluster, ClusterError

FOLDER = paths.REPO / "out" / "cluster"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m support.kube", description=__doc__)
    parser.add_argument("command", choices=("build", "up", "down", "status"))
    parser.add_argument("--folder", type=Path, default=FOLDER, help="where the cluster lives (default: out/cluster)")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            started = time.monotonic()
            build.build_all()
            print(f"cluster tools ready in {time.monotonic() - started:.0f} s ({build.TOOLS})")
        elif args.command == "up":
            if (args.folder / "state.json").exists() and any(
                Cluster.from_state(args.folder).running(n) for n in Cluster.from_state(args.folder).pids
            ):
                print(f"already up: {args.folder / 'kubeconfig'} (make cluster-down stops it)", file=sys.stderr)
                return 1
            build.build_all()
            cluster = Cluster(args.folder)
            started = time.monotonic()
            cluster.up()
            print(json.dumps(cluster.timings))
            print(f"cluster up in {time.monotonic() - started:.0f} s: KUBECONFIG={cluster.kubeconfig}")
        elif args.command == "down":
            if not (args.folder / "state.json").exists():
                print(f"no cluster recorded in {args.folder}")
                return 0
            Cluster.from_state(args.folder).down()
            print(f"stopped the cluster of {args.folder}")
        else:
            cluster = Cluster.from_state(args.folder)
            for name in cluster.pids:
                print(f"{name}: {'running' if cluster.running(name) else 'stopped'} (pid {cluster.pids[name]})")
    except (build.BuildError, ClusterError, TimeoutError) as e:
        print(f"cluster: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
