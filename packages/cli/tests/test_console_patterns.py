"""JSON Schema patterns turned into HTML pattern attributes a browser compiles (``console/patterns.py``);
test_console_browser.py compiles them in Chromium."""

from __future__ import annotations

import re

import pytest

from loom_cli.console.patterns import html_pattern, translate


@pytest.mark.parametrize("pattern, expected", [
    ("^[A-Z]{2}-[a-z0-9_-]+$", r"^[A-Z]{2}-[a-z0-9_\-]+$"),      # a bare "-" in a class is escaped
    (r"^\-?\d+$", r"^-?\d+$"),                                  # "\-" outside a class is a plain "-"
    (r"^(?P<year>\d{4})$", r"^(?<year>\d{4})$"),                 # Python's named group, JavaScript's way
    ("[(]x[)]", r"[\(]x[\)]"),
    ("a{b}", r"a\{b\}"),                                          # braces that are no quantifier
    ("[&&]", r"[\&\&]"),                                          # a doubled punctuator is an operator in v
    (r"^\w+@\w+\.com$", r"^\w+@\w+\.com$"),
])
def test_translate_rewrites_what_the_v_flag_refuses(pattern, expected):
    assert translate(pattern) == expected


@pytest.mark.parametrize("pattern", [r"(?i)^abc$", r"^a*+$", r"(a)\1", r"\Aabc\Z", "(?#comment)a", "[]a]", "[a",
                                     r"^\p$", r"a\q"])
def test_patterns_a_browser_would_read_otherwise_are_left_to_the_api(pattern):
    assert html_pattern(pattern) is None


@pytest.mark.parametrize("pattern, value, matches", [
    ("^[A-Z]{2}-[a-z0-9_-]+$", "AB-x_1-", True), ("^[A-Z]{2}-[a-z0-9_-]+$", "ab-x", False),
    (r"\d{3}", "call 555 now", True),                               # a search: anywhere in the value
    (r"\d{3}", "call 55 now", False),
])
def test_the_attribute_matches_a_whole_value_as_the_schema_matches_it_anywhere(pattern, value, matches):
    attribute = html_pattern(pattern)
    assert (re.fullmatch(f"(?:{attribute})", value) is not None) is matches
    assert (re.search(pattern, value) is not None) is matches


def test_no_pattern_no_attribute():
    assert html_pattern(None) is None and html_pattern("") is None and html_pattern(3) is None
