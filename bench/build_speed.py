"""Full-build speed at scale (issue 13): one ``build_version`` of a generated corpus into a fresh index home.

Builds the git repository ``bench.scale`` generated for a size (``bench/.work/scale/size-<N>/sources.yaml``; run
``python -m bench.scale --sizes N`` once to create it) with ``bench.scale.StandInEmbedder`` (a **stand-in**: only
the pipeline is timed), and prints ``BuildResult.timings``. ``--profile`` adds a cProfile of the build (top
functions by own time and by cumulative time). ``--repeat`` builds several times (each into a fresh home).

    .venv/bin/python -m bench.build_speed --size 123000 --repeat 2 --output bench/results/build-speed.json

The code measured is the one on ``sys.path``: for an A/B comparison with another revision, extract it
(``git archive <rev> | tar -x -C /tmp/old``) and run this file with ``PYTHONPATH=/tmp/old``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import sys
import tempfile
import threading
import time
from pathlib import Path

WORK = Path(__file__).resolve().parent / ".work" / "scale"
TICK = os.sysconf("SC_CLK_TCK")


class WorkerCpu:
    """CPU seconds of the processes this one starts and theirs (the forkserver's workers), sampled twice a second
    from /proc: the build's worker processes are not this process's children, so ``getrusage`` misses them."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WorkerCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            stats = {}
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
            ours = {os.getpid()}
            for _ in range(2):  # children, then grandchildren
                ours |= {pid for pid, (ppid, _) in stats.items() if ppid in ours}
            for pid in ours - {os.getpid()}:
                self.seen[pid] = max(self.seen.get(pid, 0.0), stats[pid][1])


def build_once(size: int, profile: bool) -> dict:
    import livemem
    from bench.scale import StandInEmbedder
    from livemem.ingest.build import build_version
    from livemem.sources.config import load_sources
    from livemem.version.store import IndexHome

    config = load_sources(WORK / f"size-{size}" / "sources.yaml")
    with tempfile.TemporaryDirectory(prefix="build-speed-") as tmp:
        home = IndexHome(Path(tmp) / "index")
        profiler = cProfile.Profile() if profile else None
        cpu0, t0 = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        with WorkerCpu() as others:
            result = build_version(config, home, StandInEmbedder())
        if profiler:
            profiler.disable()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        out = {
            "code": str(Path(livemem.__file__).parent),
            "wall_s": round(wall, 2),
            "cpu_s_this_process": round(cpu, 2),
            # the processes it started: workers (and git, the forkserver); on a quiet machine the build takes about
            # this process's CPU plus the busiest worker's (the build process mostly waits while they run)
            "cpu_s_other_processes": sorted((round(c, 2) for c in others.seen.values() if c >= 0.05), reverse=True),
            "chunks": result.manifest["total_chunks"],
            "timings": result.timings,
            "segments": [s["id"] for s in result.manifest["segments"]],
        }
        if profiler:
            for key in ("tottime", "cumulative"):
                text = io.StringIO()
                pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(35)
                out[f"profile_{key}"] = text.getvalue()
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=123000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    runs = []
    for _ in range(args.repeat):
        run = build_once(args.size, args.profile)
        runs.append(run)
        print(json.dumps({k: v for k, v in run.items() if not k.startswith("profile")}), flush=True)
        for key in ("profile_tottime", "profile_cumulative"):
            if key in run:
                print(run[key])
    if args.output:
        report = {
            "command": " ".join([Path(sys.executable).name, "-m", "bench.build_speed", *(argv or sys.argv[1:])]),
            "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
            "runs": runs,
        }
        args.output.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
