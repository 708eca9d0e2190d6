"""YAML as agpt reads it: PyYAML's SafeLoader (no object construction), duplicate keys refused.

A repeated key in a mapping is almost always an edit that went wrong (two `lr:` lines, the second one
silently winning); PyYAML keeps the last one without a word, so this loader stops at the second with its line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from agpt.errors import ConfigError
from agpt.textfile import read_utf8

MERGE_TAG = "tag:yaml.org,2002:merge"


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping (the error names both lines)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _value in node.value:
                if key_node.tag == MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeLoader refuses it below
                    continue
                line = key_node.start_mark.line + 1
                if first is not None:
                    raise ConstructorError(
                        None, None, f"duplicate key {key!r} on line {line} (first on line {first})", None
                    )
                seen[key] = line
        return super().construct_mapping(node, deep)  # type: ignore[arg-type]


def load(text: str, loader: type[yaml.SafeLoader] = StrictLoader) -> Any:
    """Parse TEXT with LOADER (a StrictLoader subclass); raises yaml.YAMLError."""
    return yaml.load(text, Loader=loader)  # a SafeLoader subclass: builds no objects


def load_file(path: Path, loader: type[yaml.SafeLoader] = StrictLoader) -> Any:
    """A YAML file parsed with LOADER; a file that cannot be read, is not UTF-8 or is not YAML raises
    ConfigError naming it, on one line."""
    text = read_utf8(path, str(path), error=ConfigError)
    try:
        return load(text, loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({first_line(exc)})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML (nested too deeply)") from None


def load_sections(path: Path) -> dict[str, Any]:
    """A config file: a mapping of sections (an empty file is none)."""
    data = load_file(path) or {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    return dict(data)


def first_line(exc: yaml.YAMLError) -> str:
    """PyYAML's message on one line: the problem and where it is."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if problem:
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{problem}{where}"
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
