"""Splitting files into chunks of at most ``max_chars`` characters.

- Markdown is split by headings (parsed with markdown-it, so ``#`` inside code fences is not a heading); each
  chunk keeps its heading path (``["Fayette County", "SNAP", "Eligibility"]``). A heading with no text of its
  own is kept together with the section that follows it. Sections longer than the limit are split at blank
  lines, then lines, then sentences, then words.
- Code is split at top-level definitions where the language has a known shape (Python), then blank lines,
  then lines.
- Other text is split at blank lines, lines, sentences, words.

Every chunk is an exact substring of the file (stripped of surrounding whitespace), so provenance can be checked
by looking the chunk up in the file at its commit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from markdown_it import MarkdownIt

MARKDOWN_EXTENSIONS = {".md", ".markdown", ".mdx", ".mdown"}
CODE_EXTENSIONS = {
    ".py", ".js", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".kt", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs",
    ".rb", ".php", ".sh", ".bash", ".sql", ".r", ".scala", ".swift", ".lua", ".pl", ".toml", ".yaml", ".yml",
    ".json", ".ini", ".cfg", ".mk", ".dockerfile",
}  # fmt: skip
CODE_FILENAMES = {"Makefile", "Dockerfile", "Justfile"}

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


def file_type(path: str) -> str:
    """``markdown``, ``code`` or ``text``, from the file name."""
    p = PurePosixPath(path)
    suffix = p.suffix.lower()
    if suffix in MARKDOWN_EXTENSIONS:
        return "markdown"
    if suffix in CODE_EXTENSIONS or p.name in CODE_FILENAMES:
        return "code"
    return "text"


def chunk_file(path: str, text: str, max_chars: int = 2000) -> list[Chunk]:
    """Chunks of one file, in file order."""
    kind = file_type(path)
    if kind == "markdown":
        return chunk_markdown(text, max_chars)
    separators = _PYTHON_SEPARATORS if path.endswith(".py") else _CODE_SEPARATORS
    if kind == "text":
        separators = _TEXT_SEPARATORS
    return [Chunk(piece) for piece in split_text(text, max_chars, separators)]


def split_text(text: str, max_chars: int, separators: tuple[str, ...] = _TEXT_SEPARATORS) -> list[str]:
    """Pieces of ``text`` of at most ``max_chars``, cut at the first separator that occurs, then finer ones.

    Returns stripped, non-empty pieces; the unstripped pieces concatenate to ``text``.
    """
    return [p.strip() for p in _split(text, max_chars, separators) if p.strip()]


def _split(text: str, max_chars: int, separators: tuple[str, ...]) -> list[str]:
    if len(text) <= max_chars:
        return [text]
    for i, pattern in enumerate(separators):
        cuts = [m.end() for m in re.finditer(pattern, text) if 0 < m.end() < len(text)]
        if cuts:
            finer = separators[i + 1 :]
            break
    else:
        return [text[i : i + max_chars] for i in range(0, len(text), max_chars)]
    pieces: list[str] = []
    start = 0
    for end in [*cuts, len(text)]:
        piece = text[start:end]
        start = end
        pieces.extend(_split(piece, max_chars, finer) if len(piece) > max_chars else [piece])
    packed: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + len(piece) > max_chars:
            packed.append(current)
            current = piece
        else:
            current += piece
    if current:
        packed.append(current)
    return packed


_MD = MarkdownIt("commonmark")


def chunk_markdown(text: str, max_chars: int = 2000) -> list[Chunk]:
    """Chunks of a markdown document, one or more per heading section, each with its heading path."""
    lines = text.splitlines(keepends=True)
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
    for n, (line, level, title) in enumerate(headings):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        has_body = any(ln.strip() for ln in lines[line + 1 : end])
        sections.append((line, end, [t for _, t in stack], has_body))

    chunks: list[Chunk] = []
    pending_start: int | None = None
    for start, end, path, has_body in sections:
        if not has_body and end < len(lines):
            # A heading directly followed by a sub-heading: keep it with the text that follows.
            pending_start = start if pending_start is None else pending_start
            continue
        if pending_start is not None:
            start, pending_start = pending_start, None
        section = "".join(lines[start:end])
        chunks.extend(Chunk(piece, path) for piece in split_text(section, max_chars, _TEXT_SEPARATORS))
    return chunks
