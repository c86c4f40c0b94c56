"""An index home with a history (issue 37): three published versions over real commits, for the tests of
``livemem.version.history`` / ``diff``, ``GET /versions`` and the CLI."""

from __future__ import annotations

import json
import uuid
from datetime import date
from pathlib import Path

from livemem.model.embedding import Embedder
from livemem.sources.breath import Breath
from livemem.usage.attention import AttentionConfig, rollup_day, settle_staged_state
from livemem.version import connect
from livemem.version.store import IndexHome
from support.serving import build_and_publish, commit_files, make_workspace

RALEIGH_EDITED = (
    "# Raleigh County\n\n## LIHEAP\n\nHeating bill help (LIHEAP) in Raleigh County now opens in October at the "
    "Beckley office on Neville Street.\n"
)
MINGO = "# Mingo County\n\n## SNAP\n\nSNAP applications in Mingo County go to the Williamson office.\n"
PLAYBOOK_EDITED = "# Caseworker playbook\n\nEscalation: use the walrus protocol for every emergency.\n"


def git_head(repo: Path) -> str:
    return (repo / ".git" / "refs" / "heads" / "main").read_text().strip()


def chunk_ids(home: IndexHome, version: str, path: str) -> list[str]:
    con = connect(home.version_dir(version))
    try:
        rows = con.execute(
            "SELECT chunk_id FROM chunks WHERE path LIKE '%' || ? ORDER BY chunk_index", [path]
        ).fetchall()
    finally:
        con.close()
    return [r[0] for r in rows]


def build_history(root: Path, embedder: Embedder) -> dict:
    """Three published versions over real commits (``support.serving``'s workspace): v1 the corpus; v2 one file
    edited, one added, one deleted and an internal file edited; v3 a nightly attention publish (the edited Raleigh
    chunk and the internal playbook's chunk confirmed useful)."""
    sources = make_workspace(root)
    repo = sources.parent / "repo"
    home = IndexHome(root / "rag_index")
    v1 = build_and_publish(sources, home, embedder)
    commit_files(
        repo,
        {
            "benefits/raleigh-county.md": RALEIGH_EDITED,
            "benefits/mingo-county.md": MINGO,
            "code/client.py": None,
            "internal/caseworker-playbook.md": PLAYBOOK_EDITED,
        },
        "October changes",
    )
    v2 = build_and_publish(sources, home, embedder)
    raleigh = chunk_ids(home, v2, "raleigh-county.md")[-1]
    playbook = chunk_ids(home, v2, "caseworker-playbook.md")[-1]  # internal
    day = "2026-03-01"
    lines = []
    for chunk in (raleigh, playbook):
        trace = str(uuid.uuid4())
        lines += [
            {"timestamp": f"{day}T12:00:00Z", "event": kind, "trace_id": trace, "chunk_id": chunk, "agent": "test",
             "query": "heating help" if kind == "retrieval" else None, "breath_phase": None, "role": "internal",
             "useful": True if kind == "feedback" else None, "index_version": v2, "context": {"related_chunks": []}}
            for kind in ("retrieval", "feedback")
        ]  # fmt: skip
    home.traces.mkdir(parents=True, exist_ok=True)
    (home.traces / f"{day}-host.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    rolled = rollup_day(home, date.fromisoformat(day), AttentionConfig(), Breath("Δ3", "normal"), embedder=embedder)
    assert rolled.staged, rolled
    home.publish(rolled.version_id, rolled.base_version, 10)
    settle_staged_state(home)
    v3 = rolled.version_id
    return {
        "root": root,
        "home": home,
        "repo": repo,
        "v1": v1,
        "v2": v2,
        "v3": v3,
        "raleigh": raleigh,
        "playbook": playbook,
    }
