"""``bench.scale``'s measurements after a build, over a home that holds a large version already (what fits where
a full build at the next size does not): a one-file change on the source's branch, built and published; a nightly
attention publish; then serving as ``bench.scale`` measures it (a fresh worker loads the large version, switches
to the change and to the attention version, runs the hybrid queries with the graphs and exactly, recall@10; a
second worker beside it for PSS)::

    .venv/bin/python -m bench.scale_home --size-dir /tmp/scalework/size-2000000 \\
        --repo /tmp/scalework/repos/scifact-1043917-files.git --ref half --files 782633 \\
        --output bench/results/scale-1.5m.json

The home at 1.5M was built by ``bench.scale``'s pipeline (``build_version`` with the structured stand-in) from a
branch of the 2M repository holding copies 0-150 (782,633 files); the 2M full build was killed by the OOM killer.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bench.scale import (
    DEFAULT_CORPUS,
    DEFAULT_QUERIES,
    DEFAULT_WORK,
    attention_publish,
    build_and_publish,
    commit_one_change,
    machine_facts,
    make_embedder,
    project_state,
    read_jsonl,
    serving,
    sources_yaml,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-dir", type=Path, required=True)
    parser.add_argument("--repo", type=Path, required=True)
    parser.add_argument("--ref", default="main")
    parser.add_argument("--files", type=int, required=True, help="files on the branch (the change picks one)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--noise", type=float, default=1.0)
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)

    from livemem.sources.config import load_sources
    from livemem.version.store import IndexHome

    sources = args.size_dir / "sources.yaml"
    text = sources_yaml(args.repo).replace("    ref: main\n", f"    ref: {args.ref}\n")
    sources.write_text(text, encoding="utf-8")
    config = load_sources(sources)
    home_dir = args.size_dir / "index"
    home = IndexHome(home_dir)
    large = (home_dir / "CURRENT").read_text().strip()
    out: dict = {"command": "python -m bench.scale_home " + " ".join(argv or []), "project": project_state(),
                 "machine": machine_facts(), "large_version": large}  # fmt: skip
    embedder = make_embedder("structured", args.noise, args.work)
    docs = read_jsonl(DEFAULT_CORPUS)
    change = out["one_file_change"] = {"path": commit_one_change(args.repo, args.files, docs, args.ref)}
    v_change = build_and_publish(config, home, embedder, change)
    attention = out["attention_publish"] = {}
    v_attention = attention_publish(home, v_change, attention)
    out["serving"] = serving(
        home_dir,
        [large, v_change, v_attention],
        args.queries,
        DEFAULT_QUERIES,
        None,
        ("structured", args.noise, args.work),
    )
    out["loadavg_end"] = os.getloadavg()
    args.output.write_text(json.dumps(out, indent=2, default=str) + "\n", encoding="utf-8")
    print(json.dumps(out["serving"]["worker"], default=str)[:2000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
