"""Random commit histories over several sources, built incrementally and compared with from-scratch builds.

``IndexHistory`` is a hypothesis state machine. Its world: two real git repositories; the first holds three
sources (``alpha`` under ``a/`` with switchable include and sealed globs, ``beta`` under ``b/`` with a switchable
exclude glob, ``gamma`` selecting ``shared/**`` and ``a/notes/**`` across the others' directories), the second
one source (``delta``, whole repository, domain metadata by path). Rules add, edit, delete, rename (also across
sources), revert files to an earlier text, write binary, non-UTF-8, empty and oversize files, toggle the seal
marker, repeat text inside a file, write documents (text-layer PDFs of one to three pages, DOCX, HTML), replace
one by a scanned PDF (no text layer: reported, not indexed), upgrade a format's extractor, and change the configuration (chunk size, file size cap, globs, vector store, sentence vectors on or off). The ``build``
rule builds incrementally on the previous version, checks it with the blocking completeness check, publishes
it, and compares the published version with a from-scratch build of the same commits in a fresh home that
shares the embedding cache (so vectors are comparable and no text is embedded twice).

Used by ``tests/pipelines/test_differential.py`` (a few examples, in ``make test``) and ``bench/differential.py`` (many).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from livemem.index.records import SEAL_MARKER
from livemem.ingest import documents as extraction
from livemem.ingest.build import build_version
from livemem.ingest.checks import check_index_complete
from livemem.ingest.verify import compare_versions
from livemem.sources.config import load_sources
from livemem.version.store import IndexHome
from support.documents import docx_of, html_of, pdf_of, scanned_pdf
from support.git import GitRepo

WORDS = [
    "snap",
    "wic",
    "lieap",
    "heat",
    "rent",
    "county",
    "clinic",
    "fayette",
    "raleigh",
    "river",
    "valley",
    "memory",
    "seal",
    "steward",
    "record",
    "benefit",
    "office",
    "hours",
    "apply",
    "form",
    "winter",
    "energy",
    "food",
    "infant",
    "school",
    "bus",
]
REPO1_DIRS = ("a", "a/notes", "a/sealed", "a/drafts", "b", "b/drafts", "shared", "other")
REPO2_DIRS = ("", "docs", "county")
EXTENSIONS = (".md", ".md", ".txt", ".py")
DOCUMENT_EXTENSIONS = (".pdf", ".pdf", ".docx", ".html")

sentence = st.lists(st.sampled_from(WORDS), min_size=2, max_size=12).map(lambda w: " ".join(w).capitalize() + ".")
# one to three sentences, or words without a full stop: chunks with and without sentence vectors
paragraph = st.one_of(
    st.lists(sentence, min_size=1, max_size=3).map(" ".join),
    st.lists(st.sampled_from(WORDS), min_size=3, max_size=25).map(" ".join),
)


@st.composite
def documents(draw: st.DrawFn) -> str:
    """Markdown-ish text: a few sections with headings, sometimes a paragraph repeated verbatim."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            parts.append(f"{'#' * draw(st.integers(1, 3))} {draw(paragraph)[:30]}")
        parts.append(draw(paragraph))
    if draw(st.integers(0, 4)) == 0:
        parts.append(parts[-1])  # repeated text: the occurrence counter keeps ids distinct
    return "\n\n".join(parts) + "\n"


class IndexHistory(RuleBasedStateMachine):
    embedder = None  # set by the test before running (the session's one model)

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="livemem-diff-"))
        self.repos = {"one": GitRepo(self.root / "one"), "two": GitRepo(self.root / "two")}
        self.files: dict[str, dict[str, str | bytes]] = {"one": {}, "two": {}}
        self.previous: dict[tuple[str, str], list[str | bytes]] = {}
        self.knobs = {
            "max_chunk_chars": 300, "max_file_bytes": 100_000, "alpha_include": "all", "alpha_sealed": False,
            "beta_exclude": False, "vector_store": "chroma", "sentences": True,
        }  # fmt: skip
        self.home = IndexHome(self.root / "index", cache_dir=self.root / "cache")
        self.builds = itertools.count()
        self.compared = 0
        self.deleted: list[tuple[str, str, str | bytes]] = []
        self.commits = 0
        self.documents = 0  # documents written or scanned
        self.upgrades: dict[str, int] = {}  # extractor upgrades per format (``upgrade_extractor``)
        self._extractor_id = extraction.extractor_id

    def _upgraded_extractor_id(self, fmt: str) -> str:
        return self._extractor_id(fmt) + "+" * self.upgrades.get(fmt, 0)

    # --- the world ---------------------------------------------------------------------------------------
    def sources_yaml(self) -> Path:
        k = self.knobs
        include = '["**/*.md"]' if k["alpha_include"] == "md" else '["**/*"]'
        path = self.root / "sources.yaml"
        path.write_text(
            f"""index:
  max_chunk_chars: {k["max_chunk_chars"]}
  max_file_bytes: {k["max_file_bytes"]}
  retention: 2
  vector_store: {k["vector_store"]}
  sentences: {str(k["sentences"]).lower()}
sources:
  - name: alpha
    repo: {self.repos["one"].path}
    subdir: a
    include: {include}
    sealed: {'["sealed/*.md"]' if k["alpha_sealed"] else "[]"}
    collection: alpha
  - name: beta
    repo: {self.repos["one"].path}
    subdir: b
    include: ["**/*.md", "**/*.txt", "**/*.bin"]
    exclude: {'["drafts/**"]' if k["beta_exclude"] else "[]"}
    collection: beta
    access: internal
  - name: gamma
    repo: {self.repos["one"].path}
    include: ["shared/**", "a/notes/**"]
    collection: gamma
  - name: delta
    repo: {self.repos["two"].path}
    collection: delta
    metadata:
      - set: {{dataset: delta}}
      - paths: ["county/*.md"]
        set: {{county: Fayette}}
""",
            encoding="utf-8",
        )
        return path

    def _write(self, repo: str, path: str, content: str | bytes, message: str) -> None:
        old = self.files[repo].get(path)
        if old == content:
            return  # nothing to commit
        if old is not None:
            self.previous.setdefault((repo, path), []).append(old)
        self.files[repo][path] = content
        self.repos[repo].commit({path: content}, message=message)
        self.commits += 1

    @initialize(content=documents())
    def seed(self, content: str) -> None:
        self._write("one", "a/intro.md", content, "seed one")
        self._write("two", "readme.md", content, "seed two")

    repo_names = st.sampled_from(["one", "two"])

    def _path(self, data: st.DataObject, repo: str) -> str:
        folder = data.draw(st.sampled_from(REPO1_DIRS if repo == "one" else REPO2_DIRS))
        name = data.draw(st.sampled_from(["x", "y", "z", "notes", "guide"])) + data.draw(st.sampled_from(EXTENSIONS))
        return f"{folder}/{name}" if folder else name

    @rule(repo=repo_names, data=st.data(), content=documents())
    def add_or_overwrite(self, repo: str, data: st.DataObject, content: str) -> None:
        self._write(repo, self._path(data, repo), content, "add")

    @precondition(lambda self: any(self.files.values()))
    @rule(data=st.data(), content=documents(), append=st.booleans())
    def edit(self, data: st.DataObject, content: str, append: bool) -> None:
        repo, path = data.draw(st.sampled_from(sorted((r, p) for r, fs in self.files.items() for p in fs)))
        old = self.files[repo][path]
        new = (old if isinstance(old, str) else "") + content if append else content
        self._write(repo, path, new, "edit")

    @precondition(lambda self: any(self.files.values()))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        repo, path = data.draw(st.sampled_from(sorted((r, p) for r, fs in self.files.items() for p in fs)))
        self.deleted.append((repo, path, self.files[repo].pop(path)))
        self.repos[repo].commit(delete=[path], message="delete")
        self.commits += 1

    @precondition(lambda self: any(self.files.values()))
    @rule(data=st.data())
    def rename(self, data: st.DataObject) -> None:
        """Move a file, possibly into another source's directory (or out of every source)."""
        repo, path = data.draw(st.sampled_from(sorted((r, p) for r, fs in self.files.items() for p in fs)))
        target = self._path(data, repo)
        if target == path:
            return
        content = self.files[repo].pop(path)
        self.files[repo][target] = content
        self.repos[repo].commit({target: content}, delete=[path], message="rename")
        self.commits += 1

    @precondition(lambda self: bool(self.deleted))
    @rule(data=st.data(), content=documents(), same=st.booleans())
    def restore_deleted(self, data: st.DataObject, content: str, same: bool) -> None:
        """Bring a deleted path back (its first add lies before the version that saw it deleted)."""
        repo, path, old = data.draw(st.sampled_from(self.deleted))
        if path not in self.files[repo]:
            self._write(repo, path, old if same else content, "restore")

    @precondition(lambda self: bool(self.previous))
    @rule(data=st.data())
    def revert(self, data: st.DataObject) -> None:
        """Give a file back an earlier text (its blob may then equal the one the last build indexed)."""
        repo, path = data.draw(st.sampled_from(sorted(self.previous)))
        self._write(repo, path, data.draw(st.sampled_from(self.previous[(repo, path)])), "revert")

    @rule(repo=repo_names, data=st.data(), kind=st.sampled_from(["binary", "latin1", "empty", "oversize"]))
    def odd_file(self, repo: str, data: st.DataObject, kind: str) -> None:
        content: str | bytes = {
            "binary": b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(40)),
            "latin1": "caf\xe9 au lait, r\xe9sum\xe9".encode("latin-1"),
            "empty": "  \n",
            "oversize": ("# Big\n\n" + " ".join(WORDS) + "\n\n") * 40 + "é" * 50,
        }[kind]
        self._write(repo, self._path(data, repo), content, kind)

    @rule(
        repo=repo_names,
        data=st.data(),
        pages=st.lists(documents(), min_size=1, max_size=3),
        extension=st.sampled_from(DOCUMENT_EXTENSIONS),
    )
    def write_document(self, repo: str, data: st.DataObject, pages: list[str], extension: str) -> None:
        """A PDF (a page per text), DOCX or web page at a new or existing path (an edit, when the path held one)."""
        path = self._path(data, repo).rsplit(".", 1)[0] + extension
        content: str | bytes = {
            ".pdf": lambda: pdf_of(pages),
            ".docx": lambda: docx_of("\n\n".join(pages)),
            ".html": lambda: html_of("\n\n".join(pages)),
        }[extension]()
        self._write(repo, path, content, f"document {extension}")
        self.documents += 1

    @precondition(lambda self: any(p.endswith(".pdf") for fs in self.files.values() for p in fs))
    @rule(data=st.data())
    def scan_document(self, data: st.DataObject) -> None:
        """A PDF replaced by a scanned one: its chunks leave the index, the file is reported ``no_text_layer``."""
        candidates = sorted((r, p) for r, fs in self.files.items() for p in fs if p.endswith(".pdf"))
        repo, path = data.draw(st.sampled_from(candidates))
        self._write(repo, path, scanned_pdf(), "scanned")
        self.documents += 1

    @rule(fmt=st.sampled_from(["pdf", "docx", "html"]))
    def upgrade_extractor(self, fmt: str) -> None:
        """A new extractor version for one format: the next build re-extracts that format's documents only."""
        self.upgrades[fmt] = self.upgrades.get(fmt, 0) + 1
        extraction.extractor_id = self._upgraded_extractor_id

    @precondition(lambda self: any(self.files.values()))
    @rule(data=st.data())
    def toggle_seal(self, data: st.DataObject) -> None:
        candidates = sorted((r, p) for r, fs in self.files.items() for p, c in fs.items() if isinstance(c, str))
        if not candidates:
            return
        repo, path = data.draw(st.sampled_from(candidates))
        text = self.files[repo][path]
        new = text.replace(SEAL_MARKER, "") if SEAL_MARKER in text else f"{text}\nSeal: {SEAL_MARKER}\n"
        self._write(repo, path, new, "seal")

    @rule(
        knob=st.sampled_from(
            [
                "max_chunk_chars",
                "max_file_bytes",
                "alpha_include",
                "alpha_sealed",
                "beta_exclude",
                "vector_store",
                "sentences",
            ]
        ),
        data=st.data(),
    )
    def change_config(self, knob: str, data: st.DataObject) -> None:
        choices = {
            "max_chunk_chars": [200, 300, 2000],
            "max_file_bytes": [1500, 100_000],
            "alpha_include": ["all", "md"],
            "alpha_sealed": [False, True],
            "beta_exclude": [False, True],
            "vector_store": ["chroma", "none"],
            "sentences": [True, False],
        }[knob]
        self.knobs[knob] = data.draw(st.sampled_from(choices))

    # --- the property ------------------------------------------------------------------------------------
    @rule()
    def build(self) -> None:
        config = load_sources(self.sources_yaml())
        result = build_version(config, self.home, self.embedder)
        if result.staged:
            staged = self.home.staged_dir(result.version_id)
            base = self.home.version_dir(result.base_version) if result.base_version else None
            complete = check_index_complete(staged, self.home.manifest(result.version_id), config, base)
            assert complete.passed, complete.failures
            self.home.publish(result.version_id, result.base_version, config.retention)
        reference = IndexHome(self.root / f"scratch-{next(self.builds)}", cache_dir=self.home.cache_dir)
        fresh = build_version(config, reference, self.embedder, force=True)
        assert fresh.staged
        comparison = compare_versions(
            self.home.version_dir(self.home.current()), reference.staged_dir(fresh.version_id)
        )
        shutil.rmtree(reference.root, ignore_errors=True)
        assert comparison.equal, "incremental build differs from a from-scratch build:\n" + "\n".join(
            comparison.lines()
        )
        self.compared += 1

    @rule()
    def build_again(self) -> None:
        """Builds are a quarter of the rules or so: histories then span several incremental builds."""
        self.build()

    def teardown(self) -> None:
        try:
            if any(self.files.values()):
                self.build()  # every history ends with a comparison, whatever the last rule was
        finally:
            extraction.extractor_id = self._extractor_id
            shutil.rmtree(self.root, ignore_errors=True)
            stats = os.environ.get("LIVEMEM_DIFF_STATS")
            if stats:  # bench/differential.py counts histories, commits and comparisons
                with open(stats, "a", encoding="utf-8") as fh:
                    fh.write(
                        json.dumps(
                            {
                                "compared": self.compared,
                                "commits": self.commits,
                                "documents": self.documents,
                                "upgrades": sum(self.upgrades.values()),
                            }
                        )
                        + "\n"
                    )
