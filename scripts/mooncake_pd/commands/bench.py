"""`mooncake-pd bench`: the result of a release's benchmark Job as a table, saved as JSON,
compared side by side with other saved runs, optionally plotted."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mooncake_pd import bench, cli, release_io
from mooncake_pd.commands import SUMMARIES

HELP = """\
Read the result of a release's benchmark Job (values: benchmark.enabled=true; it runs
`vllm bench serve` against the release's router) and print request throughput, output token
throughput, time to first token, time per output token, inter-token and end-to-end latency
(mean, p50, p90, p99) and the successful and failed requests.

  mooncake-pd bench --release deepseek-pd -n llm --json 1p1d.json           # wait for the Job, report, save
  mooncake-pd bench --release deepseek-pd -n llm --restart --json 2p1d.json # run the same workload again
  mooncake-pd bench --from 2p1d.json --compare 1p1d.json --plot runs.png

Two values files are judged on the same workload (benchmark.workload): save one run per
deployment with --json and compare them; the change column marks each difference better or worse.
Exit 0 with a report, 1 when the Job failed, 2 when there is no cluster, release, Job or result.
RBAC: get/list/create jobs, list pods, get pods/log in the release's namespace
(examples/rbac/mooncake-pd-tool.yaml).
"""


def _progress(line: str) -> None:
    print(f"... {line}", file=sys.stderr, flush=True)


def _from_cluster(args: argparse.Namespace) -> dict:
    core, _ = release_io.load_clients(args.context)
    from kubernetes import client

    batch = client.BatchV1Api(core.api_client)
    job = bench.find_job(batch, args.release, args.namespace)
    if args.restart:
        job = bench.restart(batch, job, args.namespace)
        _progress(f"started Job {job.metadata.name}")
    job = bench.wait(batch, job, args.namespace, args.timeout, _progress)
    lines = bench.job_log(core, job, args.namespace)
    if bench.job_state(job) == "failed":
        tail = "\n".join(lines[-20:])
        raise bench.JobFailed(f"Job {job.metadata.name} failed; the end of its log:\n{tail}")
    workload = json.loads((job.metadata.annotations or {}).get("mooncake-pd/benchmark-workload", "null"))
    return bench.saved(
        bench.parse_log(lines), release=args.release, namespace=args.namespace, job=job.metadata.name, workload=workload
    )


def release_of(args: argparse.Namespace) -> str | None:
    """The release named by --release or by the deprecated positional word (bench took its
    release positionally while render and verify take --release; scripts may still give it so)."""
    if args.release_word is None:
        return args.release
    if args.release not in (None, args.release_word):
        raise bench.BenchError(
            f"release: named twice, --release {args.release} and {args.release_word}; give it once, as --release"
        )
    print(
        f"mooncake-pd bench: the release as a positional word is deprecated; give --release {args.release_word}",
        file=sys.stderr,
    )
    return args.release_word


def run(args: argparse.Namespace) -> int:
    args.release = release_of(args)
    if args.from_file:
        result = bench.load(args.from_file)
    elif args.release:
        result = _from_cluster(args)
    else:
        raise bench.BenchError("release: none named; give --release NAME, or --from a saved result")
    runs = [(bench.label_of(o, Path(p).stem), o) for p, o in ((p, bench.load(p)) for p in args.compare)]
    runs.append((bench.label_of(result, "this run"), result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    print(bench.workload_line(result))
    for warning in bench.workload_warnings(runs):
        print(warning, file=sys.stderr)
    print(bench.table(runs))
    if args.plot:
        from mooncake_pd import benchplot

        benchplot.latency_plot(runs, Path(args.plot))
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "bench",
        help=SUMMARIES["bench"],
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cli.add_release_options(parser, what="the release whose benchmark Job to read")
    parser.add_argument(
        "release_word",
        nargs="?",
        metavar="RELEASE",
        help="deprecated: the release as a positional word, as bench took it before; give --release NAME, "
        "as render and verify do (still accepted, for existing scripts)",
    )
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--restart", action="store_true", help="run the release's benchmark Job again first")
    parser.add_argument("--timeout", type=float, default=7200, help="seconds to wait for the Job (default: 7200)")
    parser.add_argument("--from", dest="from_file", metavar="RESULT.json", help="report a saved result instead")
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="OTHER.json",
        help="a saved result to show beside this one (repeatable; the first is the baseline)",
    )
    parser.add_argument("--json", metavar="OUT.json", help="save this run's result (vLLM's JSON and its origin)")
    parser.add_argument("--plot", metavar="OUT.png", help="plot the latency percentiles of every run shown")
    # bench.JobFailed exits 1, its other errors (and verify's: no cluster) 2.
    parser.set_defaults(func=run, error_label="mooncake-pd bench")
