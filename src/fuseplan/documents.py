"""Reading and writing the JSON and YAML documents fuseplan keeps, strictly.

Every document a user can hand us (hardware files, sweep configurations,
plan files, sweep indexes and records, caches) is read through
:func:`loads_json` or :func:`loads_yaml`, so the same limits hold everywhere
and each breach is one :class:`FuseplanError` line naming the limit:

* nesting deeper than :data:`MAX_DEPTH` levels (the parsers recurse once per
  level, so a deep file would otherwise end in ``RecursionError``);
* integers longer than Python's digit limit for ``int()`` (4,300 digits by
  default), which would otherwise end in ``ValueError``;
* ``NaN``, ``Infinity`` and numbers too large for a float (``1e400``): no
  figure we read may be non-finite;
* in YAML, aliases whose expansion holds more than :data:`MAX_YAML_NODES`
  nodes ("billion laughs"): the size is counted on the composed node graph
  before any value is built, and integers in any form but plain decimal
  (``0x10``, ``0o20``, ``1_000``, ``1:30``), which YAML 1.1 reads as numbers a
  reader of the file would not expect.

Every document we write goes through :func:`dumps_json`, which refuses
non-finite numbers (``allow_nan=False``) instead of writing ``NaN``.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any

from fuseplan.errors import FuseplanError

#: Deepest nesting of a JSON or YAML input; fuseplan's own files nest fewer than 10 levels.
MAX_DEPTH = 64
#: Most values a YAML input may expand to once its aliases are followed (a billion-laughs file expands to 10^9).
MAX_YAML_NODES = 100_000
_DECIMAL_INT = re.compile(r"^[-+]?(0|[1-9][0-9]*)$")
_TOO_DEEP = f"nested too deeply (more than {MAX_DEPTH} levels)"


def _refused(origin: str, what: str | None, problem: str) -> FuseplanError:
    """One error line: ``origin`` and, when the caller said what the document should have been, that it is not."""
    return FuseplanError(f"{origin}: not a {what} ({problem})" if what else f"{origin}: {problem}")


def _check_depth(value: Any) -> str | None:
    """The problem with a document nested deeper than :data:`MAX_DEPTH`, else ``None`` (iteratively: deep
    values are what is checked)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                return _TOO_DEEP
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return None


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a number")
    return value


def loads_json(data: bytes | str, origin: str, what: str | None = None) -> Any:
    """The JSON document in ``data``; anything malformed, too deep, too long a number or not finite is one line
    naming ``origin`` (and, when given, ``what`` the document should have been)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        document = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except UnicodeDecodeError:
        raise _refused(origin, what, "not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise _refused(origin, what, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise _refused(origin, what, _TOO_DEEP) from None
    except ValueError as exc:  # a number over the integer digit limit, a non-finite one
        raise _refused(origin, what, _number_problem(exc)) from None
    problem = _check_depth(document)
    if problem:
        raise _refused(origin, what, problem)
    return document


def _number_problem(exc: ValueError) -> str:
    text = str(exc)
    if "digits" in text or "Exceeds the limit" in text:
        return "a number has more digits than the 4300 an integer may have"
    return text


def dumps_json(document: Any, **options: Any) -> str:
    """``document`` as strict JSON (no NaN or Infinity: those are refused as a :class:`FuseplanError`)."""
    try:
        return json.dumps(document, allow_nan=False, **options)
    except ValueError as exc:
        raise FuseplanError(f"cannot write a figure that is not a finite number ({exc})") from None


class _Refused(Exception):
    """A limit of this module broken while a YAML document is composed or built; its text is the problem."""


def _expanded_size(root: Any) -> None:
    """Refuse a composed YAML node graph whose tree expansion (aliases copied out) is over the limits."""
    import yaml

    sizes: dict[int, int] = {}
    # iterative post-order over the node graph; shared (aliased) nodes are sized once and counted per use
    stack: list[tuple[Any, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, expanded = stack.pop()
        if depth > MAX_DEPTH:
            raise _Refused(_TOO_DEEP)
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        children = [part for pair in node.value for part in pair] if isinstance(node, yaml.MappingNode) \
            else list(node.value)
        if expanded:
            total = 1 + sum(sizes[id(child)] for child in children)
            if total > MAX_YAML_NODES:
                raise _Refused(f"its aliases expand to more than {MAX_YAML_NODES:,} values; "
                               "write the values out or use fewer aliases")
            sizes[id(node)] = total
        elif id(node) not in sizes:
            stack.append((node, depth, True))
            stack.extend((child, depth + 1, False) for child in children if id(child) not in sizes)


@lru_cache(maxsize=None)
def _strict_loader():
    import yaml

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader whose integers are plain decimal only, refusing documents nested deeper than
        :data:`MAX_DEPTH` while it composes them (its composer recurses once per level)."""

        depth = 0

        def compose_node(self, parent, index):
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise _Refused(_TOO_DEEP)
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    def construct_int(loader, node):
        text = loader.construct_scalar(node)
        if not _DECIMAL_INT.match(text):
            raise _Refused(f"line {node.start_mark.line + 1}: write {text!r} as a plain decimal number "
                           "(hexadecimal, octal, underscores and sexagesimal are not read)")
        return int(text)

    def construct_float(loader, node):
        value = yaml.SafeLoader.construct_yaml_float(loader, node)
        if not math.isfinite(value):
            raise _Refused(f"line {node.start_mark.line + 1}: {loader.construct_scalar(node)!r} is not a "
                           "finite number")
        return value

    StrictLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    StrictLoader.add_constructor("tag:yaml.org,2002:float", construct_float)
    return StrictLoader


def loads_yaml(text: str | bytes, origin: str, what: str | None = None) -> Any:
    """The YAML document in ``text`` (safe tags only), under the limits of this module; ``None`` when empty.
    Any problem is one line naming ``origin`` (and, when given, ``what`` the document should have been)."""
    import yaml

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise _refused(origin, what, "not UTF-8 text") from None
    loader = _strict_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "malformed"
        raise _refused(origin, what, f"not valid YAML{where} ({problem})") from None
    except _Refused as exc:
        raise _refused(origin, what, str(exc)) from None
    except RecursionError:
        raise _refused(origin, what, _TOO_DEEP) from None
    except ValueError as exc:
        raise _refused(origin, what, _number_problem(exc)) from None
    finally:
        loader.dispose()
