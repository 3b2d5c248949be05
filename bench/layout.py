"""``python -m bench.layout K MODULE ARGS...``: ``python -m MODULE ARGS...`` with the interpreter's memory
layout shifted by ``K`` (0: unshifted), for instruction counts that do not hang on one layout's luck.

CPython finds a type's attributes through a global cache indexed by the type's version tag and the
address of the attribute's name. Which of a step path's lookups collide there, and miss, depends on how
many types were tagged and how many objects allocated before the engine's own: any change anywhere
(an import, a class more or less) moved one 100-step count by up to 4% in either direction
(``bench/instructions.py`` measured 500 K to 520 K instructions a step for the same code). Counting each
program in a few layouts and taking the mean measures the code, not the layout it landed in.
"""

from __future__ import annotations

import runpy
import sys

_SHIFT: list[object] = []


def shift(k: int) -> None:
    """Tag ``7 * k`` throwaway types and keep ``k`` odd-sized strings alive: later types get other version
    tags and later names other addresses."""
    for i in range(7 * k):
        cls = type(f"_Layout{i}", (), {"tag": i})
        _ = cls.tag  # a lookup assigns the version tag
        _SHIFT.append(cls)
    _SHIFT.extend("." * (97 * (i + 1)) for i in range(k))


if __name__ == "__main__":
    shift(int(sys.argv[1]))
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
