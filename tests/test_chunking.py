"""Chunking: markdown by headings with heading paths, code and text sensibly, every chunk a substring."""

from livemem.chunking import chunk_file, chunk_markdown, file_type, split_text

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
