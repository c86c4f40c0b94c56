"""Mutated real documents for the fuzz test and its benchmark (``tests/pipelines/test_documents_fuzz.py``,
``bench/fuzz_documents.py``): the PDFs of ``../shared/data/docs/pdf`` and the bundled flyers
(``examples/make_documents.py``), each mutation drawn from a seeded ``random.Random`` so a run is reproducible.

The mutations are the damage a real source holds: bytes flipped, a file cut short, a slice gone or repeated, an
object reference pointed elsewhere (a page tree that contains itself), a zip member's XML damaged, markup nested
deep. ``self_referencing_pdf`` is the 591-byte PDF whose page tree holds itself (pdfium opens it and fails on its
second page).
"""

from __future__ import annotations

import io
import random
import re
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PDFS = ROOT.parent / "shared" / "data" / "docs" / "pdf"
FLYERS = ROOT / "examples" / "corpus" / "benefits" / "flyers"
_REFERENCE = re.compile(rb"\d+ 0 R")


def self_referencing_pdf() -> bytes:
    """A 591-byte PDF whose page tree lists itself as its first kid: one good page, and a second page pdfium fails
    to load (``PdfiumError: Failed to load page.``)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length 49 >>\nstream\nBT /F1 12 Tf 72 720 Td (Page loops) Tj ET\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def originals() -> dict[str, bytes]:
    """name -> bytes of every real document the mutations start from (the password-protected PDF left out: it is
    reported ``encrypted`` whatever is done to it)."""
    found = {path.name: path.read_bytes() for path in sorted(PDFS.glob("*/*.pdf")) if "password" not in path.name}
    for path in sorted(FLYERS.iterdir()):
        found[path.name] = path.read_bytes()
    return found


def _flip(rng: random.Random, raw: bytes) -> bytes:
    out = bytearray(raw)
    for _ in range(rng.randint(1, 64)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def _truncate(rng: random.Random, raw: bytes) -> bytes:
    return raw[: rng.randrange(1, len(raw))]


def _delete(rng: random.Random, raw: bytes) -> bytes:
    start = rng.randrange(len(raw))
    return raw[:start] + raw[start + rng.randint(1, max(1, len(raw) // 8)) :]


def _repeat(rng: random.Random, raw: bytes) -> bytes:
    start = rng.randrange(len(raw))
    piece = raw[start : start + rng.randint(1, 4096)]
    at = rng.randrange(len(raw))
    return raw[:at] + piece * rng.randint(1, 8) + raw[at:]


def _references(rng: random.Random, raw: bytes) -> bytes:
    """Object references pointed at other objects (a page tree or a page then may contain itself)."""
    found = list(_REFERENCE.finditer(raw))
    if not found:
        return _flip(rng, raw)
    numbers = [m.group().split()[0] for m in found]
    out = bytearray(raw)
    for match in sorted(rng.sample(found, min(len(found), rng.randint(1, 8))), key=lambda m: -m.start()):
        target = rng.choice(numbers)
        out[match.start() : match.end()] = target + b" 0 R"
    return bytes(out)


def _zip_member(rng: random.Random, raw: bytes) -> bytes:
    """A DOCX / ODT with one of its parts damaged (bytes flipped, cut or repeated), the zip itself sound."""
    try:
        source = zipfile.ZipFile(io.BytesIO(raw))
        parts = {name: source.read(name) for name in source.namelist()}
    except Exception:  # an earlier mutation broke the zip itself
        return _flip(rng, raw)
    if not parts:
        return _flip(rng, raw)
    victim = rng.choice(sorted(parts))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for name, data in parts.items():
            if name == victim and data:
                data = rng.choice((_flip, _truncate, _delete, _repeat))(rng, data)
            target.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    return out.getvalue()


def _nest(rng: random.Random, raw: bytes) -> bytes:
    """Markup nested deep (HTML), or a dictionary nested deep (PDF)."""
    depth = rng.choice((100, 1000, 20000))
    at = rng.randrange(len(raw))
    piece = b"<div><ul><li>" * depth if raw.lstrip()[:1] == b"<" else b"<< /A [" * depth
    return raw[:at] + piece + raw[at:]


MUTATIONS = {
    "flip": _flip,
    "truncate": _truncate,
    "delete": _delete,
    "repeat": _repeat,
    "references": _references,
    "zip_member": _zip_member,
    "nest": _nest,
}


def mutated(count: int, seed: int = 49) -> list[tuple[str, str, bytes]]:
    """``count`` mutated documents as (file name, mutation, bytes), the same for the same seed: each a random
    original with one to three random mutations (a zip member's damage only for DOCX)."""
    rng = random.Random(seed)
    docs = originals()
    names = sorted(docs)
    out = []
    for i in range(count):
        name = rng.choice(names)
        raw = docs[name]
        applied = []
        for _ in range(rng.randint(1, 3)):
            kinds = [k for k in MUTATIONS if k != "zip_member" or name.endswith((".docx", ".odt"))]
            kind = rng.choice(kinds)
            raw = MUTATIONS[kind](rng, raw) or b"%"  # never empty: the next mutation needs a byte
            applied.append(kind)
        stem, _, suffix = name.rpartition(".")
        out.append((f"{i:04d}-{stem}.{suffix}", "+".join(applied), raw))
    return out


class HashEmbedder:
    """A stand-in for the embedding model (extraction is what the fuzz test is about): a SHAKE-256 hash of each text
    as 384 signed bytes, L2-normalised, as ``bench.scale.StandInEmbedder``."""

    model_id = "test/stand-in-shake256-hash-embedder"
    dim = 384
    batch_size = 64

    def encode(self, texts):
        import hashlib

        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        raw = b"".join(hashlib.shake_256(t.encode("utf-8")).digest(self.dim) for t in texts)
        vectors = np.frombuffer(raw, dtype=np.int8).reshape(len(texts), self.dim).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def encode_one(self, text: str):
        return self.encode([text])[0]


GUIDE = "# Guide\n\n## SNAP\n\nFood help in Oak Hill.\n"
SELF_REFERENCING = "docs/self-referencing-page-tree.pdf"  # sorts before fuzz/: its report is within the cap


def good_files() -> dict[str, bytes | str]:
    """The files that must be indexed whatever sits beside them: markdown, two real PDFs, the bundled flyers."""
    return {
        "guide.md": GUIDE,
        "good/four-pages.pdf": (PDFS / "004-pdflatex-4-pages/pdflatex-4-pages.pdf").read_bytes(),
        "good/multicolumn.pdf": (PDFS / "026-latex-multicolumn/multicolumn.pdf").read_bytes(),
        **{f"good/{path.name}": path.read_bytes() for path in sorted(FLYERS.iterdir())},
    }


def fuzz_build(root: Path, count: int, embedder=None, seed: int = 49, settings=None) -> dict:
    """A real git repository of the good files, the 591-byte self-referencing PDF and ``count`` mutated documents,
    built and published into a fresh index home under ``root``; returns the build's result, the indexed paths, the
    skipped paths with their reasons, the reports and what was committed (``held`` checks the outcome); ``embedder``
    None: ``HashEmbedder``."""
    from livemem.ingest import checks
    from livemem.ingest.build import build_version
    from livemem.sources.config import load_sources
    from livemem.version import connect
    from livemem.version.store import IndexHome
    from support.git import GitRepo

    docs = mutated(count, seed)
    files = {**good_files(), SELF_REFERENCING: self_referencing_pdf()}
    files.update({f"fuzz/{name}": raw for name, _, raw in docs})
    repo = GitRepo(root / "repo")
    repo.commit(files)
    sources = root / "sources.yaml"
    sources.write_text(f"sources:\n  - name: docs\n    repo: {repo.path}\n    collection: docs\n", encoding="utf-8")
    config = load_sources(sources)
    home = IndexHome(root / "index")
    result = build_version(config, home, embedder or HashEmbedder(), settings=settings)
    staged = home.staged_dir(result.version_id)
    complete = checks.check_index_complete(staged, result.manifest, config, None)
    home.publish(result.version_id, result.base_version, config.retention)
    con = connect(home.version_dir(home.current()))
    try:
        indexed = {path for (path,) in con.execute("SELECT path FROM parents").fetchall()}
        skipped = dict(con.execute("SELECT path, reason FROM skipped_files").fetchall())
    finally:
        con.close()
    return {
        "result": result, "files": files, "mutations": {f"fuzz/{n}": how for n, how, _ in docs},
        "indexed": indexed, "skipped": skipped, "complete": complete, "home": home, "config": config,
    }  # fmt: skip


def held(outcome: dict) -> list[str]:
    """What went wrong in a ``fuzz_build`` (empty: it held): a good file not published, a file neither indexed nor
    skipped (or both), the self-referencing PDF not reported ``malformed`` with its error."""
    problems = []
    indexed, skipped, files = outcome["indexed"], outcome["skipped"], outcome["files"]
    problems += [f"{path}: a good file not published" for path in good_files() if path not in indexed]
    problems += [f"{path}: neither indexed nor skipped" for path in files if path not in indexed | set(skipped)]
    problems += [f"{path}: both indexed and skipped" for path in indexed & set(skipped)]
    if not outcome["complete"].passed:
        problems += outcome["complete"].failures
    reports = {r["path"]: r for r in outcome["result"].sources["docs"].skip_reports}
    report = reports.get(SELF_REFERENCING, {})
    if skipped.get(SELF_REFERENCING) != "malformed" or "Failed to load page" not in report.get("error", ""):
        problems.append(f"{SELF_REFERENCING}: not reported malformed with its error ({report})")
    if not str(report.get("extractor", "")).startswith("pypdfium2 "):
        problems.append(f"{SELF_REFERENCING}: the report names no extractor ({report})")
    return problems
