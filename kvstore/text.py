"""Free text that reaches an operator's terminal: which characters are refused on input and how
the rest is shown.

A terminal acts on control characters (an ESC starts a sequence that can move the cursor,
rewrite the screen or set the window title; a CR overwrites the line) and a bidirectional
override reorders what follows it. Labels a client chooses (a lease holder, a revision's ``who``
and key, a job's owner or batch) are refused when they hold one (``control_character``); texts
that may legitimately span lines (a job's reported error) are kept as given and escaped where
they are shown (``escape_controls``, which ``snapview.terminal`` applies in every renderer).
Ordinary printable text, unicode included, passes both unchanged.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and the bidirectional embeddings, overrides and isolates
# (U+202A-U+202E, U+2066-U+2069: "Trojan Source").
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def control_character(value: str) -> str | None:
    """The first control character in ``value`` as an escape (``'\\x1b'``), or None if none."""
    m = _CONTROL.search(value)
    return None if m is None else _escape(m)


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch) or (
        f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
    )


def escape_controls(text: str) -> str:
    """``text`` with every control character (see the module docstring) replaced by its
    backslash escape; the rest unchanged. The result holds no control character."""
    return _CONTROL.sub(_escape, text)
