"""Config text (model labels, identities) carried to the reporting jobs in a form that cannot act as markup.

Snakemake's report.html shows each result's job parameters inside a ``<script>`` element, as they print: a
label holding ``</script>`` would close that element, and what follows it would run as HTML. The reporting
rules therefore take such text as JSON whose ``<``, ``>`` and ``&`` are ``\\u`` escapes, inert in HTML and
read back unchanged by ``from_inert_json``.
"""

from __future__ import annotations

import json

_HTML_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


def inert_json(value) -> str:
    """``value`` as JSON (ASCII) with no character that HTML reads as markup."""
    text = json.dumps(value, sort_keys=True)
    return "".join(_HTML_ESCAPES.get(character, character) for character in text)


def from_inert_json(text: str):
    """The value ``inert_json`` wrote."""
    return json.loads(text)
