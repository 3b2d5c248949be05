"""A JSON Schema ``pattern`` as an HTML ``pattern`` attribute, or None when it cannot be said safely.

The two differ: a JSON Schema pattern is matched anywhere in the value (a search), with the syntax the
schema's author wrote (pydantic passes Python's through); a browser anchors the attribute
(``^(?:pattern)$``) and compiles it with the ``v`` flag, which refuses what plain JavaScript takes, e.g.
``[a-z_-]`` (a bare ``-`` or ``(`` in a class) or ``\\-`` outside one. Chromium then ignores the attribute:
the form checks nothing. So the pattern is re-written token by token into what ``v`` accepts, wrapped in
``.*(?:...).*`` for search semantics, and anything outside the small, well-understood subset (inline
flags, possessive quantifiers, backreferences, ``\\A``/``\\Z``, comments) is left to the API, which checks
every start anyway.
"""

from __future__ import annotations

import re

SYNTAX = set("^$\\.*+?()[]{}|/")
"""Characters that must be escaped to stand for themselves outside a class (and may be escaped in one)."""
RESERVED = set("&-!#%,:;<=>@`~")
"""Punctuators a ``v``-flag class reserves (doubled, they are operators): always escaped there."""
_QUANTIFIER = re.compile(r"\{\d+(,\d*)?\}")
_CLASS_ESCAPES = set("dDwWsS")
_CONTROL_ESCAPES = set("nrtfv")


class _Refused(Exception):
    pass


def _escape(pattern: str, i: int, in_class: bool) -> tuple[str, int]:
    """The escape at ``pattern[i] == "\\"``: ``(its v-flag form, the index after it)``."""
    if i + 1 >= len(pattern):
        raise _Refused("a trailing backslash")
    c = pattern[i + 1]
    if c in _CLASS_ESCAPES or c in _CONTROL_ESCAPES:
        return "\\" + c, i + 2
    if c in "bB" and not in_class:
        return "\\" + c, i + 2
    if c == "0" and not (i + 2 < len(pattern) and pattern[i + 2].isdigit()):
        return "\\0", i + 2
    if c in "pP":
        m = re.match(r"[pP]\{[A-Za-z_=]+\}", pattern[i + 1:])
        if m:
            return "\\" + m.group(0), i + 1 + len(m.group(0))
        raise _Refused("a \\p without a {property}")
    if c == "x":
        m = re.match(r"x[0-9A-Fa-f]{2}", pattern[i + 1:])
        if m:
            return "\\" + m.group(0), i + 4
        raise _Refused("a malformed \\x escape")
    if c == "u":
        m = re.match(r"u[0-9A-Fa-f]{4}", pattern[i + 1:])
        if m:
            return "\\" + m.group(0), i + 6
        raise _Refused("a \\u escape that JavaScript reads otherwise")
    if c.isalnum():
        raise _Refused(f"\\{c}, which means something else (or nothing) in a browser")
    if c in SYNTAX or (in_class and c in RESERVED):
        return "\\" + c, i + 2
    return c, i + 2  # an escaped character that is plain in JavaScript (\#, \-, \ ): the character itself


def _class_atom(pattern: str, i: int) -> tuple[str, int]:
    c = pattern[i]
    if c == "\\":
        return _escape(pattern, i, in_class=True)
    if c in SYNTAX or c in RESERVED:
        return "\\" + c, i + 1
    return c, i + 1


def _char_class(pattern: str, i: int) -> tuple[str, int]:
    """The class opening at ``pattern[i] == "["``."""
    out, i = "[", i + 1
    if i < len(pattern) and pattern[i] == "^":
        out, i = "[^", i + 1
    if i < len(pattern) and pattern[i] == "]":
        raise _Refused("a class that starts with ]")
    while True:
        if i >= len(pattern):
            raise _Refused("an unclosed [")
        if pattern[i] == "]":
            return out + "]", i + 1
        atom, i = _class_atom(pattern, i)
        if i + 1 < len(pattern) and pattern[i] == "-" and pattern[i + 1] != "]":
            if atom.startswith("\\") and atom[1:2] in _CLASS_ESCAPES:
                raise _Refused("a range from a class escape")
            end, i = _class_atom(pattern, i + 1)
            out += f"{atom}-{end}"
        else:
            out += atom


def _group(pattern: str, i: int) -> tuple[str, int]:
    """The group opening at ``pattern[i] == "("``: only the kinds JavaScript reads the same way."""
    rest = pattern[i:]
    for opener in ("(?:", "(?=", "(?!", "(?<=", "(?<!"):
        if rest.startswith(opener):
            return opener, i + len(opener)
    m = re.match(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>", rest)
    if m:
        return f"(?<{m.group(1)}>", i + len(m.group(0))
    if rest.startswith("(?"):
        raise _Refused("an inline flag, comment or group kind a browser does not read the same way")
    return "(", i + 1


def translate(pattern: str) -> str:
    """``pattern`` rewritten for the ``v`` flag (raises when it cannot be); still a search, not anchored."""
    out, i, quantifiable = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            if i + 1 < len(pattern) and pattern[i + 1].isdigit() and pattern[i + 1] != "0":
                raise _Refused("a backreference")
            piece, i = _escape(pattern, i, in_class=False)
            quantifiable = True
        elif c == "[":
            piece, i = _char_class(pattern, i)
            quantifiable = True
        elif c == "(":
            piece, i = _group(pattern, i)
            quantifiable = False
        elif c in "*+?" or (c == "{" and _QUANTIFIER.match(pattern, i)):
            if not quantifiable:
                raise _Refused("a quantifier with nothing to repeat")
            m = _QUANTIFIER.match(pattern, i) if c == "{" else None
            piece, i = (m.group(0), m.end()) if m else (c, i + 1)
            if i < len(pattern) and pattern[i] == "?":
                piece, i = piece + "?", i + 1
            elif i < len(pattern) and pattern[i] == "+":
                raise _Refused("a possessive quantifier")
            quantifiable = False
        elif c in "{}]":
            piece, i = "\\" + c, i + 1
            quantifiable = True
        else:
            piece, i = c, i + 1
            quantifiable = c not in "|^$("
        out.append(piece)
    return "".join(out)


def html_pattern(pattern: object) -> str | None:
    """The ``pattern`` attribute for a JSON Schema ``pattern``, or None to leave the check to the API."""
    if not isinstance(pattern, str) or not pattern:
        return None
    try:
        return f".*(?:{translate(pattern)}).*"
    except _Refused:
        return None
