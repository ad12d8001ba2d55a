"""Reading YAML the strict way: `read_yaml(path)` and `parse_yaml(text, source)` refuse, each with one
`ConfigError` naming the file (or `--set` item), the line and the fix, what PyYAML's `safe_load` accepts or
chokes on: duplicate keys (the later silently won), aliases that expand beyond `MAX_NODES` (a 1 KB "billion
laughs" would hang whatever walks the result), recursive aliases, nesting deeper than `MAX_DEPTH`, files
larger than `MAX_BYTES`, text that is not UTF-8, and directories or unreadable paths given as files.

Messages never quote the file's lines (a config or trace may hold a secret): they give the line, the
column and YAML's short description of the problem.

Deliberately not here: resolving file references or validating fields (`loader.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from inferopt.config.systems import ConfigError

MAX_BYTES = 1 << 20  # a config file is a page or two; a megabyte is a mistake (or an attack)
MAX_NODES = 20_000  # YAML nodes after alias expansion
MAX_DEPTH = 64  # nesting of mappings/sequences


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (merge keys `<<` may still be overridden, as YAML says)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:  # an unhashable key: let SafeLoader say so
                continue
            if first != key_node.start_mark.line + 1:
                raise ConfigError(
                    f"{self.name}: duplicate key {_short(key)!r} at line {key_node.start_mark.line + 1} (first at line "
                    f"{first}): YAML would silently keep the later value; fix: give each key once"
                )
        return super().construct_mapping(node, deep=deep)


def _short(value: Any, limit: int = 40) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _expanded_size(root: yaml.Node, source: str) -> None:
    """Refuse a node graph whose tree (aliases expanded) exceeds MAX_NODES or MAX_DEPTH, or that is cyclic.
    Linear in the distinct nodes: each node's expanded size is computed once (iteratively, no recursion)."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        nid = id(node)
        children = _children(node)
        if done:
            on_path.discard(nid)
            size[nid] = 1 + sum(size[id(c)] for c in children)
            if size[nid] > MAX_NODES:
                raise ConfigError(
                    f"{source}: expands to more than {MAX_NODES} YAML nodes (line {node.start_mark.line + 1}): "
                    "anchors and aliases repeat data; fix: write the data out, without aliases that multiply it"
                )
            continue
        if nid in size:
            continue
        if nid in on_path:
            raise ConfigError(
                f"{source}: line {node.start_mark.line + 1}: a recursive alias (a node that contains itself); "
                "fix: remove the alias that points back into its own anchor"
            )
        if depth > MAX_DEPTH:
            raise ConfigError(
                f"{source}: line {node.start_mark.line + 1}: nested deeper than {MAX_DEPTH} levels; fix: flatten it"
            )
        on_path.add(nid)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _yaml_error(source: str, exc: yaml.YAMLError, text: str) -> ConfigError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or type(exc).__name__
    if isinstance(exc, yaml.reader.ReaderError):  # a control character: its position, not the character
        where = f" at line {text[: exc.position].count(chr(10)) + 1}"
        problem = (
            f"control character #x{exc.character:04x} is not allowed" if isinstance(exc.character, int) else problem
        )
    context = getattr(exc, "context", None)
    what = f"{context}: {problem}" if context else problem
    return ConfigError(
        f"{source}: not valid YAML{where} ({_short(what, 120)}); fix: correct the YAML syntax on that line "
        "(indentation, a missing ':' or quote; tabs are not allowed for indentation)"
    )


def parse_yaml(text: str, source: str) -> Any:
    """`text` parsed as YAML with the strict loader; `source` names it in errors (a path, or `--set x=...`)."""
    try:
        loader = _StrictLoader(text)
    except yaml.YAMLError as exc:  # the reader checks every character up front
        raise _yaml_error(source, exc, text) from None
    loader.name = source
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, source)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _yaml_error(source, exc, text) from None
    except RecursionError:
        raise ConfigError(f"{source}: at line 1: nested too deeply to read; fix: flatten it") from None
    finally:
        loader.dispose()


def read_text(path: Path, what: str = "config file", max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of `path`, or a ConfigError naming the path and why it cannot be read."""
    try:
        if path.is_dir():
            raise ConfigError(f"{path}: is a directory, not a {what}; fix: name the YAML file inside it")
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: file not found; fix: check the path (relative paths resolve against the referencing file)"
        ) from None
    except PermissionError:
        raise ConfigError(f"{path}: not readable (permission denied); fix: make the {what} readable") from None
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot be read ({exc.strerror or type(exc).__name__}); fix: check the path"
        ) from None
    if len(data) > max_bytes:
        raise ConfigError(f"{path}: larger than {max_bytes} bytes: not a {what}; fix: check the path")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path}: line {line}: not UTF-8 text (byte {exc.start}); fix: save the {what} as UTF-8"
        ) from None


def read_yaml(path: Path) -> Any:
    """The parsed content of a YAML file (strict: see the module docstring)."""
    return parse_yaml(read_text(path), str(path))
