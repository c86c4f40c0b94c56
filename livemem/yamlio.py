"""Reading the YAML the product is given: the sources file (with its ``registry`` and ``spatial`` sections) and the
front matter of indexed documents. Safe types only (``yaml.SafeLoader``), and bounded, so a hostile document is a
clear error instead of a wrong value or a crash:

- a key given twice in one mapping (``access: internal`` then ``access: public``) is refused, named at its line
  and column (``unique_keys``; a ``<<`` merge may still be overridden, as YAML means it);
- a document bigger than ``MAX_BYTES``, nested deeper than ``MAX_DEPTH``, or that grows past ``MAX_NODES`` nodes
  when its aliases are expanded (a "billion laughs" document: ten aliases of ten aliases of ... a few bytes that
  every reader walking the data would expand to gigabytes) is refused, as is an alias inside its own anchor.

Every refusal is a ``yaml.MarkedYAMLError`` whose ``problem_mark`` (when there is one) is where the problem is, so a
caller reports ``file:line:column`` the way it reports a syntax error.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 2 * 1024 * 1024  # characters of a document
MAX_DEPTH = 100  # nested collections (the composer recurses: Python's stack ends near 300)
MAX_NODES = 200_000  # nodes of a document with every alias expanded


class YAMLLimitError(yaml.MarkedYAMLError):
    """A document refused for its shape (size, depth, alias expansion), not for its syntax."""


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str, unique_keys: bool) -> None:
        super().__init__(stream)
        self.unique_keys = unique_keys
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YAMLLimitError(None, None, f"collections nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if self.unique_keys and isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:
                    continue  # an unhashable key: SafeConstructor refuses it below
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r} (first given at line {first.start_mark.line + 1}, column "
                        f"{first.start_mark.column + 1}); a key may appear once in a mapping",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


def load(text: str, *, unique_keys: bool = True) -> Any:
    """The data of one YAML document (``load_node`` without the node)."""
    return load_node(text, unique_keys=unique_keys)[0]


def load_node(text: str, *, unique_keys: bool = True) -> tuple[Any, yaml.Node | None]:
    """The data of one YAML document and its node tree (for the line and column of a later error), within the
    limits of this module. Raises ``yaml.YAMLError`` (``YAMLLimitError`` for a refused shape)."""
    if len(text) > MAX_BYTES:
        raise YAMLLimitError(None, None, f"the document is {len(text)} characters, over the {MAX_BYTES} allowed")
    loader = _Loader(text, unique_keys)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_expansion(node)
        return loader.construct_document(node), node
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a node tree that has more than ``MAX_NODES`` nodes with its aliases expanded, or a cycle (an alias
    inside its own anchor). Each distinct node is sized once, so this costs what the document's own size does."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_NODES:
                raise YAMLLimitError(
                    None, None,
                    f"the document grows past {MAX_NODES} nodes when its aliases (*name) are expanded",
                    node.start_mark,
                )  # fmt: skip
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise YAMLLimitError(None, None, "an alias refers to a collection that holds it", node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise YAMLLimitError(None, None, "an alias refers to a collection that holds it", child.start_mark)
            if id(child) not in sizes:
                stack.append((child, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
