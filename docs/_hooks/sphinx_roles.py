"""MkDocs hook: show the docstrings' Sphinx roles as plain code.

The docstrings are written for Sphinx-style readers (``:class:`Memory```,
``:meth:`~Memory.read```). mkdocstrings renders them as Markdown, where the
role would show up as literal text before the code span. This hook drops the
role and, for a ``~`` target, keeps only its last component, as Sphinx does.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const|term|ref):"
    r"(?:<code>|`)(~?)([^<`]*)(?:</code>|`)"
)


def _plain(match: re.Match[str]) -> str:
    tilde, target = match.group(1), match.group(2)
    if tilde:
        target = target.rsplit(".", 1)[-1]
    return f"<code>{target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_plain, html)
