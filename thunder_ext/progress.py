"""A one-line progress display on stderr, shown only when stderr is a terminal.

The gallery and ``check()`` compile many configurations (tens of seconds).  Redirected
output, pipes, CI logs and notebooks get nothing: their output stays exactly as it was.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def _interactive() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def progress(items: Iterable[T], label: str, name=str) -> Iterator[T]:
    """Yield ``items``, writing ``label k/n: name(item)`` over one stderr line while each runs."""
    items = list(items)
    if not _interactive():
        yield from items
        return
    width = 0
    try:
        for k, item in enumerate(items, 1):
            line = f"{label} {k}/{len(items)}: {name(item)}"
            sys.stderr.write("\r" + line.ljust(width))
            sys.stderr.flush()
            width = len(line)
            yield item
    finally:
        sys.stderr.write("\r" + " " * width + "\r")  # leave the terminal as it was
        sys.stderr.flush()
