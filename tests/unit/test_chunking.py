"""Chunking: markdown by headings with heading paths, code and text sensibly, every chunk a substring the embedding
model reads whole (its word pieces, headings included, within the limit)."""

import random
from pathlib import Path

import pytest

from livemem.errors import ConfigError
from livemem.index.records import embed_text
from livemem.ingest import chunking
from livemem.ingest.chunking import (
    chunk_file,
    chunk_files,
    chunk_markdown,
    count_tokens,
    file_type,
    split_text,
    tokenizer,
)
from livemem.sources.config import CHUNKER_VERSION, DEFAULT_CHUNK_TOKENS, MODEL_MAX_TOKENS, load_sources

GUIDE = """# Fayette County Guide

Intro paragraph about benefits in Fayette County.

## SNAP

### Eligibility

Households under 130% of the poverty line qualify.

### How to apply

Apply at the Oak Hill hub.

```bash
# not a heading: inside a code fence
echo apply
```

## WIC

Women, infants and children get nutrition help.
"""


def test_markdown_sections_keep_their_heading_path() -> None:
    chunks = chunk_markdown(GUIDE, 2000)
    paths = [c.heading_path for c in chunks]
    assert paths == [
        ["Fayette County Guide"],
        ["Fayette County Guide", "SNAP", "Eligibility"],
        ["Fayette County Guide", "SNAP", "How to apply"],
        ["Fayette County Guide", "WIC"],
    ]
    # the empty "## SNAP" heading stays with the section that follows it
    assert chunks[1].content.startswith("## SNAP\n\n### Eligibility")
    # a '#' line inside a code fence is not a heading
    assert "# not a heading" in chunks[2].content


def test_every_chunk_is_an_exact_substring_and_within_the_limit() -> None:
    long_section = "# Title\n\n" + "\n\n".join(f"Paragraph {i}. " + "word " * 80 for i in range(30))
    for max_chars in (200, 500, 2000):
        chunks = chunk_markdown(long_section, max_chars)
        assert len(chunks) > 1
        for chunk in chunks:
            assert len(chunk.content) <= max_chars
            assert chunk.content in long_section
            assert chunk.heading_path == ["Title"]


def test_text_without_separators_is_cut_hard() -> None:
    text = "x" * 4500
    pieces = split_text(text, 2000)
    assert [len(p) for p in pieces] == [2000, 2000, 500]


def test_python_code_splits_at_top_level_definitions() -> None:
    funcs = "\n\n".join(f"def f{i}(x):\n    '''Doc {i}.'''\n" + "    x += 1\n" * 20 + "    return x" for i in range(8))
    code = "import os\n\n" + funcs + "\n"
    chunks = chunk_file("pkg/mod.py", code, 600)
    assert len(chunks) > 1
    for chunk in chunks[1:]:
        assert chunk.content.startswith("def f")
    assert all(len(c.content) <= 600 for c in chunks)


def test_file_types() -> None:
    assert file_type("docs/a.md") == "markdown"
    assert file_type("src/client.py") == "code"
    assert file_type("Makefile") == "code"
    assert file_type("NOTES.txt") == "text"
    assert file_type("LICENSE") == "text"


def test_small_file_is_one_chunk_and_blank_file_none() -> None:
    assert [c.content for c in chunk_file("a.txt", "hello world\n", 2000)] == ["hello world"]
    assert chunk_file("b.md", "   \n\n", 2000) == []


# --- word-piece limits (the chunks the embedding model reads whole) ---

NESTED = (
    "# Guide to Fayette County benefits\n\nIntro.\n\n## Supplemental Nutrition Assistance Program (SNAP)\n\n"
    "### Eligibility rules for households with children under eighteen\n\n"
    + "\n\n".join(f"Rule {i}: households earning under {130 + i}% of the poverty line qualify. " * 3 for i in range(40))
    + "\n\n### How to apply\n\n"
    + " ".join(f"Step{i} apply-at-the-Oak-Hill-hub." for i in range(300))
)


def _embedded_tokens(chunk) -> int:
    return count_tokens(embed_text(chunk.content, chunk.heading_path))


@pytest.mark.parametrize("limit", [32, 64, 128, DEFAULT_CHUNK_TOKENS])
def test_every_embedded_chunk_fits_the_token_limit_headings_included(limit: int) -> None:
    chunks = chunk_markdown(NESTED, 20000, limit)
    assert len(chunks) > 1
    assert any(len(c.heading_path) == 3 for c in chunks)  # the heading path is embedded with these
    for chunk in chunks:
        assert _embedded_tokens(chunk) <= limit
        assert chunk.content in NESTED
    # nothing is lost: the chunks cover every word of the document, in order
    assert " ".join(c.content for c in chunks).split() == NESTED.split()


def test_a_heading_path_over_half_the_limit_leaves_the_chunk_half() -> None:
    """Documented floor: deep, long headings cannot shrink chunks to nothing; the content keeps half the limit."""
    for chunk in chunk_markdown(NESTED, 20000, 16):
        assert count_tokens(chunk.content) <= 16
        assert _embedded_tokens(chunk) <= 16 or count_tokens(chunk.content) <= 8


def test_default_limit_is_what_the_model_reads() -> None:
    """254 word pieces plus [CLS] and [SEP] is the model's 256: a default chunk is embedded whole."""
    text = "# Title\n\n" + " ".join(f"sentence{i} about myocardial infarction." for i in range(600))
    chunks = chunk_file("doc.md", text)
    encoded = tokenizer().encode(embed_text(chunks[0].content, chunks[0].heading_path))
    assert len(encoded.ids) <= MODEL_MAX_TOKENS
    assert max(_embedded_tokens(c) for c in chunks) > DEFAULT_CHUNK_TOKENS - 20  # and chunks are filled up


@pytest.mark.parametrize(
    "text",
    [
        "x" * 5000,  # one word the tokenizer reads as a single [UNK]
        "https://example.org/" + "/".join(f"seg{i}-part.{i}" for i in range(900)),  # many pieces, no whitespace
        "東京都は日本の首都です。" * 300,  # CJK: every ideograph is a word of its own, no spaces
        "かたかなカタカナひらがな" * 200,  # kana: no spaces and not split per character
        "👍🏽🎉 " * 300 + "👩‍👩‍👧‍👦" * 200,  # emoji, modifiers and ZWJ sequences
        ("e\u0301te\u0301 n\u0303o " * 400) + "a\u0308\u0301" * 500,  # combining marks
        "word\vword\x1cword\x85word\u3000word\xa0" * 300,  # spaces Python splits on but the tokenizer does not
    ],
)
def test_text_without_separators_is_cut_within_the_limit(text: str) -> None:
    for path in ("notes.txt", "data.json", "doc.md"):
        chunks = chunk_file(path, text, 2000, 64)
        assert chunks
        at = 0
        for chunk in chunks:
            assert count_tokens(chunk.content) <= 64
            assert len(chunk.content) <= 2000
            found = text.find(chunk.content, at)  # exact substrings, in file order
            assert found >= 0
            at = found + len(chunk.content)


def test_span_counts_equal_the_tokenizer_on_random_text() -> None:
    """The whitespace-run arithmetic gives exactly what the tokenizer counts, for any span."""
    rng = random.Random(7)
    alphabet = [*"abcdefghij XYZ.,;!?-'\n\t", "\v", "\x1c", "\x85", "\xa0", "\u3000", "\u2028", "é", "e\u0301"]
    alphabet += ["東", "京", "👍", "🏽", "\u200d", "ß", "İ", "ﬁ", "\x00", "\ufffd"]
    for _ in range(30):
        text = "".join(rng.choice(alphabet) + rng.choice(["", "tion", "ing", "un"]) for _ in range(rng.randint(1, 400)))
        measure = chunking._Measure(text, 10**6, 64)
        chunking._count_new_words(measure.words)
        for _ in range(20):
            a = rng.randint(0, len(text))
            b = rng.randint(a, len(text))
            assert measure.tokens(a, b) == count_tokens(text[a:b]), (text[a:b],)


def test_chunking_is_deterministic_and_batched_equals_one_by_one() -> None:
    files = [(f"docs/{i}.md", NESTED.replace("Rule", f"Rule{i}")) for i in range(5)] + [("a.py", "x = 1\n" * 900)]
    assert chunk_files(files, 2000, 100) == [chunk_file(p, t, 2000, 100) for p, t in files]


def test_chunk_tokens_is_configured_and_part_of_the_fingerprint(tmp_path: Path) -> None:
    def load(index: str):
        path = tmp_path / "sources.yaml"
        path.write_text(
            f"version: 1\nindex:\n{index}sources:\n  - name: docs\n    repo: .\n    collection: docs\n",
            encoding="utf-8",
        )
        return load_sources(path)

    default = load("  retention: 5\n")
    assert default.chunk_tokens == DEFAULT_CHUNK_TOKENS
    small = load("  chunk_tokens: 128\n")
    assert small.chunk_tokens == 128
    assert default.chunking["chunker"] == CHUNKER_VERSION
    docs = default.sources[0]
    assert docs.fingerprint(default.chunking) != docs.fingerprint(small.chunking)  # a new limit re-chunks every file
    with pytest.raises(ConfigError, match=r"sources\.yaml:3:17: index\.chunk_tokens: 1000 is greater than .*254"):
        load("  chunk_tokens: 1000\n")
    with pytest.raises(ConfigError, match=r"index\.chunk_tokens: 'many' is not of type 'integer'"):
        load("  chunk_tokens: many\n")


def test_a_title_is_not_left_alone_before_a_long_paragraph() -> None:
    """A SciFact-like file: the title packs with the first sentences of its one long paragraph."""
    abstract = " ".join(
        f"Finding {i} links statin therapy to lower LDL cholesterol in trial cohort {i}." for i in range(60)
    )
    chunks = chunk_file("docs/1.md", f"# Statins and LDL\n\n{abstract}\n")
    assert len(chunks) > 1
    assert chunks[0].content.startswith("# Statins and LDL\n\nFinding 0 links")
    assert all(count_tokens(c.content) > DEFAULT_CHUNK_TOKENS // 2 for c in chunks[:-1])  # chunks are filled


def test_a_text_measured_before_the_word_memo_is_emptied_is_still_cut(monkeypatch) -> None:
    """The memo of word pieces is bounded: emptied when full, a text counted before still gets its cuts."""
    monkeypatch.setattr(chunking, "_WORD_MEMO_MAX", 50)
    text = " ".join(f"alpha{i}" for i in range(40))
    measure = chunking._Measure(text, 2000, 64)
    chunking._count_new_words(measure.words)
    chunking._count_new_words([f"beta{i}" for i in range(40)])  # over the bound: the memo starts again
    assert any(word not in chunking._WORD_PIECES for word in measure.words)
    assert measure.tokens(0, len(text)) == len(chunking.tokenizer().encode(text, add_special_tokens=False).ids)
