"""The console's icons, drawn inline as SVG: a glyph such as U+238C or U+23F0 is missing from the fonts a
plain Debian Chromium has, and shows as an empty box there. Text keeps to characters those fonts cover
(``TEXT_CHARACTERS``; a test checks every page against it)."""

from __future__ import annotations

TEXT_CHARACTERS = frozenset("·×→←⇤…–—●✓")
"""The non-ASCII characters page text may use: all in DejaVu Sans and Liberation Sans."""

_PATHS = {
    # stroked 16x16 outlines
    "redrive": '<path d="M13 8a5 5 0 1 1-1.5-3.6"/><path d="M12 1.5v3h-3"/>',
    "cancel": '<path d="M4 4l8 8M12 4l-8 8"/>',
    "wake": '<circle cx="8" cy="9" r="5"/><path d="M8 6.5V9l1.8 1.2M3 3.5l2-1.5M13 3.5l-2-1.5"/>',
    "event": '<rect x="2" y="4" width="12" height="9" rx="1"/><path d="M2.5 4.5L8 9l5.5-4.5"/>',
    "undo": '<path d="M5 3L2 6l3 3"/><path d="M2 6h7.5a4 4 0 0 1 0 8H6"/>',
    "dot": '<circle cx="8" cy="8" r="3" fill="currentColor"/>',
}


def icon(name: str, label: str = "") -> str:
    """An inline SVG icon; ``label`` is read out by screen readers (else it is decoration)."""
    a11y = f' role="img" aria-label="{label}"' if label else ' aria-hidden="true"'
    return (f'<svg class="icon i-{name}" viewBox="0 0 16 16" width="16" height="16"{a11y}>'
            f"{_PATHS[name]}</svg>")


FAVICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" '
           'fill="#24292f"/><path d="M4 3v10h8" fill="none" stroke="#3fb950" stroke-width="2.2" '
           'stroke-linecap="round" stroke-linejoin="round"/></svg>\n')
