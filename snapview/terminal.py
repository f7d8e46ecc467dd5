"""What the CLI prints of text it did not write itself (lease holders, job errors, revisions'
``who``, table names): escaped, so that no control character in it reaches the terminal.

Every renderer passes such text through ``shown``; the server refuses control characters in
labels on input (``kvstore.text``), but a job's reported error may hold newlines, and records
written before that check may hold anything.
"""

from __future__ import annotations

from kvstore.text import escape_controls


def shown(value: object) -> str:
    """``value`` as text for a terminal: ``str(value)`` with every control character (ESC, CR,
    newline, DEL, C1, bidirectional overrides) replaced by its backslash escape."""
    return escape_controls(value if isinstance(value, str) else str(value))
