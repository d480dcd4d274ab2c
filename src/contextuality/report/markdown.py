"""Free text made safe as Markdown: the escapes every report page and table share.

Apart from ``report.tables`` so that ``report.html`` (imported by every Snakemake start, through common.smk) loads
no pandas.
"""

from __future__ import annotations

import re

# Characters that start Markdown or HTML markup anywhere in a line (emphasis, code, links, images, raw HTML and
# entities, headings, math); CommonMark reads a backslash before any of them as the character itself.
_MD_SPECIAL = frozenset("\\`*_[]<>&#!~$")
# What starts a list, a quote or a heading underline at the start of a line: '-', '+', '=', or '1.' / '1)'.
_MD_LINE_START = re.compile(r"^(\d{0,9})([-+=.)])")


def md_text(text) -> str:
    """Free text from the config (a label) shown as written in Markdown: markup characters backslash-escaped
    and line breaks made spaces, so no label becomes a heading, link, image or raw HTML. ``|`` is left to
    ``md_cell`` (in a table cell)."""
    text = md_escape(" ".join(str(text).split()))
    return _MD_LINE_START.sub(lambda match: match[1] + "\\" + match[2], text, count=1)


def md_escape(text: str) -> str:
    """Every markup character of ``text`` backslash-escaped (``md_text`` less its line breaks and line start)."""
    return "".join("\\" + char if char in _MD_SPECIAL else char for char in text)


def md_cell(text) -> str:
    """Make free text safe inside a Markdown table cell: ``|`` escaped, a line break made a space."""
    return str(text).replace("|", "\\|").replace("\n", " ")
