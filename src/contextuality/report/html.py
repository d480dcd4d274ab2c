"""The answers as pages Snakemake's report displays: its report shows images, HTML and PDF, and offers anything
else (Markdown, csv) only as a download, so claims.md, summary.md, Table 1 and the per-layer tables are also
written as HTML (``report_pages`` rule).

``markdown_html`` reads the Markdown this project writes (headings, paragraphs, lists, pipe tables, bold,
italics, code and links), not Markdown at large: no third-party parser is needed in the jobs' environments.
Verdicts (HOLDS, FAILS, N/A, ...) are coloured wherever they appear in a table cell.

The report's categories by question (``CATEGORIES``) are here too: the rules file every figure and table
under the question it answers.
"""

from __future__ import annotations

import html
import re

from contextuality.report.markdown import md_escape, md_text

# The question each report item answers: its category in Snakemake's report, by figure or table name.
ANSWERS = "1. The answers"
CATEGORIES = {
    "claims": ANSWERS,
    "summary": ANSWERS,
    "losses": ANSWERS,
    "anisotropy": "2. Anisotropy",
    "self_similarity": "3. Context-specificity",
    "intra_sentence": "3. Context-specificity",
    "mev": "3. Context-specificity",
    "layers": "3. Context-specificity",
    "context_words": "3. Context-specificity",
    "sense_separation": "4. Word senses",
    "sense_baselines": "4. Word senses",
    "logit_lens": "4. Word senses",
    "polysemy": "4. Word senses",
    "geometry": "5. Geometry",
    "rogue_dimensions": "5. Geometry",
    "postprocess": "5. Geometry",
    "table1": "6. Static embeddings",
    "table1_by_layer": "6. Static embeddings",
    "atlas": "7. Across models",  # the atlas table's page, the figure on relative depth, the CKA maps
    "atlas_cka": "7. Across models",
    "similarity": "7. Across models",
    "similarity_pairs": "7. Across models",
}

_VERDICT = re.compile(r"\b(HOLDS|FAILS|PARTLY|MIXED|INCONCLUSIVE|N/A)(?![\w/])")
_STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; font-size: 15px; line-height: 1.45;
       margin: 1.5em; color: #1d1d1f; max-width: 80em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.25em; margin-top: 1.6em; } h3 { font-size: 1.1em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #d0d0d5; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f4; } tr:nth-child(even) td { background: #fafafc; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { background: #f0f0f4; padding: 0 0.2em; border-radius: 3px; }
.verdict { font-weight: 600; padding: 0 0.3em; border-radius: 3px; white-space: nowrap; }
.HOLDS { background: #d7f2dc; color: #12602a; } .FAILS { background: #fbdada; color: #8a1414; }
.PARTLY, .MIXED, .INCONCLUSIVE { background: #fdf0c8; color: #6b4e00; } .NA { background: #ececef; color: #555; }
div.wide { overflow-x: auto; max-width: 100%; } img.figure { max-width: 100%; height: auto; }
blockquote { border-left: 3px solid #d0d0d5; margin-left: 0; padding-left: 1em; color: #444; }
"""


# A backslash escape (what ``tables.md_text`` writes before a label's markup characters) or a code span, whichever
# comes first: an escaped character is text, never markup, and a code span's backslashes are its own.
_ESCAPE_OR_CODE = re.compile(r"\\([!-/:-@\[-`{-~])|(`[^`]*`)")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_HELD = re.compile("\x00(\\d+)\x00")


def safe_href(url: str) -> bool:
    """True for an http(s) link or a relative one; ``javascript:``, ``data:`` and any other scheme are not links
    here, nor is anything with a colon before its first '/' or '?' (a scheme however spelled). A browser drops
    control characters and spaces from a URL before it reads the scheme."""
    bare = "".join(char for char in url if char > " " and char != "\x7f")
    scheme = _SCHEME.match(bare)
    if scheme:
        return scheme.group(1).lower() in ("http", "https")
    return ":" not in re.split(r"[/?]", bare, maxsplit=1)[0]


def _inline(text: str) -> str:
    """Escape, then backslash escapes and code spans, links (http, https and relative only), bold and italics."""
    shown, raw = [], []  # what each held piece shows (HTML) and what it is (text)

    def hold(html_text: str, text: str) -> str:
        shown.append(html_text)
        raw.append(text)
        return f"\x00{len(shown) - 1}\x00"

    def token(match) -> str:
        if match.group(1) is not None:
            return hold(html.escape(match.group(1)), match.group(1))
        return hold(f"<code>{html.escape(match.group(2)[1:-1])}</code>", match.group(0))

    def link(match) -> str:
        url = html.unescape(_HELD.sub(lambda held: raw[int(held.group(1))], match.group(2)))
        if not safe_href(url):
            return match.group(0)  # shown as the text it is
        return f'<a href="{html.escape(url)}">{match.group(1)}</a>'

    text = _ESCAPE_OR_CODE.sub(token, text.replace("\x00", "\ufffd"))
    text = _LINK.sub(link, html.escape(text, quote=False))
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    text = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<em>\1</em>", text)
    return _HELD.sub(lambda held: shown[int(held.group(1))], text)


def _verdicts(cell_html: str) -> str:
    """Verdicts coloured in the text of ``cell_html``, never inside a tag (a link's address)."""
    return "".join(
        part
        if part.startswith("<")
        else _VERDICT.sub(lambda m: f'<span class="verdict {m.group(1).replace("/", "")}">{m.group(1)}</span>', part)
        for part in re.split(r"(<[^>]*>)", cell_html)
    )


def _cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)]


def _is_number(text: str) -> bool:
    return bool(re.fullmatch(r"[-+−]?[\d.,]+(e[-+]?\d+)?%?", text.strip().lstrip("≈")))


def _table(lines: list[str]) -> str:
    header, rows = _cells(lines[0]), [_cells(line) for line in lines[2:]]
    head = "".join(f"<th>{_inline(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=num' if _is_number(cell) else ''}>{_verdicts(_inline(cell))}</td>" for cell in row)
        + "</tr>\n"
        for row in rows
    )
    # in a box of its own that scrolls sideways: a 65-column table is not clipped at the window's edge
    return f'<div class="wide"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody>\n</table></div>'


def markdown_html(text: str) -> str:
    """The body HTML of the Markdown this project writes."""
    lines, blocks, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            i += 1
        elif stripped.startswith("#"):
            level = min(len(stripped) - len(stripped.lstrip("#")), 6)
            blocks.append(f"<h{level}>{_inline(stripped[level:].strip())}</h{level}>")
            i += 1
        elif stripped.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|?[\s:|-]+\|?", lines[i + 1].strip()):
            end = i + 2
            while end < len(lines) and lines[end].strip().startswith("|"):
                end += 1
            blocks.append(_table(lines[i:end]))
            i = end
        elif re.match(r"[-*+] |\d+\. ", stripped):
            tag = "ol" if stripped[0].isdigit() else "ul"
            items = []
            while i < len(lines) and lines[i].strip():
                item = lines[i].strip()
                if re.match(r"[-*+] |\d+\. ", item):
                    items.append(re.sub(r"^([-*+]|\d+\.) ", "", item))
                elif items:
                    items[-1] += " " + item  # a wrapped item
                i += 1
            blocks.append(f"<{tag}>" + "".join(f"<li>{_verdicts(_inline(item))}</li>" for item in items) + f"</{tag}>")
        elif stripped.startswith(">"):
            quote = []
            while i < len(lines) and lines[i].strip().startswith(">"):
                quote.append(lines[i].strip()[1:].strip())
                i += 1
            blocks.append(f"<blockquote><p>{_inline(' '.join(quote))}</p></blockquote>")
        else:
            paragraph, i = [stripped], i + 1  # its first line always (a "|" line that opens no table, too)
            while i < len(lines) and lines[i].strip() and not re.match(r"#|\||[-*+] |\d+\. |>", lines[i].strip()):
                paragraph.append(lines[i].strip())
                i += 1
            blocks.append(f"<p>{_inline(' '.join(paragraph))}</p>")
    return "\n".join(blocks)


def frame_markdown(frame, digits: int = 3) -> str:
    """A table (pandas DataFrame) as a Markdown pipe table, floats to ``digits`` decimals, text shown as written
    (corpus words such as ``massive_top_units``: every markup character backslash-escaped)."""

    def cell(value) -> str:
        if isinstance(value, float):
            return "" if value != value else f"{value:.{digits}f}"
        if isinstance(value, str):  # a cell is one line: a label's line breaks would end the row
            value = md_escape(" ".join(value.split()))
        return str(value).replace("|", "\\|")

    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(value) for value in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def model_page(label: str, layers, senses=None) -> str:
    """The Markdown of a model's page of per-layer tables (``layers``, and ``senses`` when given: DataFrames), its
    label shown as written (``tables.md_text``: no label becomes a heading, link or markup)."""
    shown = md_text(label)
    parts = [f"# {shown}: every layer's measurements", "", frame_markdown(layers)]
    if senses is not None:
        parts += ["", f"## {shown}: word senses by layer", "", frame_markdown(senses)]
    return "\n".join(parts)


def table_page(title: str, table) -> str:
    """The Markdown of a page of one table (a DataFrame) under its title, shown as written (``md_text``)."""
    return "\n".join([f"# {md_text(title)}", "", frame_markdown(table)])


def page(title: str, body_html: str) -> str:
    """A whole HTML document: its own styles, no script, nothing fetched."""
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
        f"<style>{_STYLE}</style>\n</head>\n<body>\n{body_html}\n</body>\n</html>\n"
    )
