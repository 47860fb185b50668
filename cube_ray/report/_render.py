"""A tiny document model rendered to self-contained HTML and to Markdown.

The report is built once as a list of :class:`Section` objects; both outputs
render the same blocks, so ``report.md`` carries exactly the tables of
``report.html``. All data (answers are untrusted model output) goes through
:func:`html.escape`; the page has no script and loads nothing from the network
(images are ``data:`` URIs).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "Figure",
    "HeadlineCard",
    "LongText",
    "Para",
    "Section",
    "Table",
    "Terms",
    "render_html",
    "render_markdown",
]


@dataclass(frozen=True)
class LongText:
    """A table cell holding long untrusted text (an answer, a question)."""

    text: str
    preview: int = 90


Cell = str | LongText


@dataclass(frozen=True)
class Para:
    """A paragraph of plain text."""

    text: str
    kind: Literal["text", "note", "warn", "verdict"] = "text"
    """``verdict``: a headline sentence (the paired comparison), shown above
    the glossary lines of the cards."""


@dataclass(frozen=True)
class Table:
    """A table of plain-text cells; ``numeric`` columns are right-aligned."""

    headers: Sequence[str]
    rows: Sequence[Sequence[Cell]]
    caption: str = ""
    anchor: str = ""
    numeric: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Figure:
    """A PNG plot."""

    anchor: str
    title: str
    png: bytes
    alt: str
    caption: str = ""


@dataclass(frozen=True)
class HeadlineCard:
    """The headline of one system under test."""

    system: str
    cube: str
    spread: str
    interval: str
    details: Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Terms:
    """Glossary lines ``(term, meaning)`` where the terms first appear."""

    entries: Sequence[tuple[str, str]]


Block = Para | Table | Figure | HeadlineCard | Terms


@dataclass
class Section:
    """A titled section (one entry of the table of contents)."""

    anchor: str
    title: str
    blocks: list[Block | Section] = field(default_factory=list)


_CSS = """
:root { --fg:#1b1b1b; --muted:#5f6368; --line:#d9dce0; --accent:#1565c0;
  --bg-soft:#f6f8fa; --warn:#b26a00; }
* { box-sizing: border-box; }
body { margin:0; color:var(--fg); background:#fff;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans",
  "PingFang SC", "Microsoft YaHei", "Noto Sans CJK SC", "WenQuanYi Micro Hei",
  sans-serif; }
header, main, footer { max-width: 1180px; margin: 0 auto; padding: 0 20px; }
header { padding-top: 18px; border-bottom: 1px solid var(--line); }
h1 { font-size: 1.55rem; margin: 0 0 4px; }
h2 { font-size: 1.25rem; margin: 32px 0 10px; padding-bottom: 4px;
  border-bottom: 2px solid var(--accent); }
h3 { font-size: 1.05rem; margin: 22px 0 8px; }
.meta { color: var(--muted); font-size: .9rem; margin: 0 0 12px; }
nav.toc { font-size: .9rem; margin: 8px 0 14px; display: flex;
  flex-wrap: wrap; gap: 2px 14px; }
nav.toc a { color: var(--accent); text-decoration: none; white-space: nowrap; }
.cards { display: grid; gap: 14px;
  grid-template-columns: repeat(auto-fit, minmax(250px, 1fr)); }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 14px 16px;
  background: var(--bg-soft); break-inside: avoid; }
.card .system { font-weight: 600; color: var(--muted); overflow-wrap: anywhere; }
.card .cube { font-size: 2.4rem; font-weight: 700; line-height: 1.1; }
.card .spread { font-size: 1.05rem; color: var(--muted); }
.card .interval { font-size: .95rem; margin: 2px 0 8px; }
.card dl { display: grid; grid-template-columns: auto 1fr; gap: 2px 10px;
  margin: 0; font-size: .9rem; }
.card dt { color: var(--muted); }
.card dd { margin: 0; }
.tablewrap { overflow-x: auto; margin: 8px 0 16px; }
table { border-collapse: collapse; font-size: .86rem; min-width: 40%; }
caption { text-align: left; color: var(--muted); font-size: .85rem;
  padding: 0 0 4px; }
th, td { border: 1px solid var(--line); padding: 4px 8px; vertical-align: top;
  text-align: left; }
th { background: var(--bg-soft); }
td.num { text-align: right; font-variant-numeric: tabular-nums;
  white-space: nowrap; }
td .long { max-width: 46ch; overflow-wrap: anywhere; }
details summary { cursor: pointer; }
details pre { white-space: pre-wrap; overflow-wrap: anywhere; font: inherit;
  margin: 4px 0 0; }
figure { margin: 10px 0 22px; break-inside: avoid; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: .85rem; }
p.note { color: var(--muted); font-size: .9rem; }
p.warn { color: var(--warn); font-weight: 600; }
p.verdict { font-size: 1.05rem; font-weight: 600; margin: 12px 0 4px; }
details.terms { font-size: .85rem; color: var(--muted); margin: 4px 0 12px; }
details.terms summary { color: var(--accent); }
dl.terms { font-size: .85rem; color: var(--muted); margin: 4px 0 12px;
  padding: 4px 10px; border-left: 3px solid var(--line); }
dl.terms dt { display: inline; font-weight: 600; color: var(--fg); }
dl.terms dd { display: inline; margin: 0; }
dl.terms dd::after { content: ""; display: block; }
footer { color: var(--muted); font-size: .8rem; padding: 24px 20px; }
@media print {
  body { font-size: 10.5pt; }
  header, main, footer { max-width: none; padding: 0; }
  nav.toc { display: none; }
  h2 { break-after: avoid; }
  section { break-inside: auto; }
  figure, .card, tr { break-inside: avoid; }
  .tablewrap { overflow: visible; }
}
@media print {
  a { color: inherit; text-decoration: none; }
  table { width: 100%; }
  td .long { max-width: none; }
}
@supports selector(details::details-content) {
  @media print {
    /* Closed <details> print their full text instead of the preview. */
    details::details-content { content-visibility: visible; display: block; }
    details summary { display: none; }
  }
}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _cell_html(cell: Cell, numeric: bool) -> str:
    if isinstance(cell, LongText):
        text = cell.text
        if len(text) <= cell.preview:
            return f'<td><div class="long">{_e(text)}</div></td>'
        preview = text[: cell.preview] + "…"
        return (
            f'<td><div class="long"><details><summary>{_e(preview)}</summary>'
            f"<pre>{_e(text)}</pre></details></div></td>"
        )
    cls = ' class="num"' if numeric else ""
    return f"<td{cls}>{_e(cell)}</td>"


def _block_html(block: Block | Section, level: int) -> str:
    if isinstance(block, Section):
        inner = "\n".join(_block_html(b, level + 1) for b in block.blocks)
        tag = f"h{min(level, 6)}"
        return (
            f'<section id="{_e(block.anchor)}"><{tag}>{_e(block.title)}</{tag}>\n'
            f"{inner}</section>"
        )
    if isinstance(block, Para):
        cls = "" if block.kind == "text" else f' class="{block.kind}"'
        return f"<p{cls}>{_e(block.text)}</p>"
    if isinstance(block, Table):
        anchor = f' id="{_e(block.anchor)}"' if block.anchor else ""
        head = "".join(f"<th>{_e(h)}</th>" for h in block.headers)
        body = "\n".join(
            "<tr>"
            + "".join(_cell_html(c, i in block.numeric) for i, c in enumerate(row))
            + "</tr>"
            for row in block.rows
        )
        caption = f"<caption>{_e(block.caption)}</caption>" if block.caption else ""
        return (
            f'<div class="tablewrap"><table{anchor}>{caption}<thead><tr>{head}'
            f"</tr></thead><tbody>\n{body}\n</tbody></table></div>"
        )
    if isinstance(block, Figure):
        data = base64.b64encode(block.png).decode("ascii")
        caption = (
            f"<figcaption>{_e(block.caption)}</figcaption>" if block.caption else ""
        )
        return (
            f'<figure class="plot" id="{_e(block.anchor)}" '
            f'data-plot="{_e(block.anchor)}"><h4>{_e(block.title)}</h4>'
            f'<img alt="{_e(block.alt)}" src="data:image/png;base64,{data}">'
            f"{caption}</figure>"
        )
    if isinstance(block, Terms):
        lines = "".join(
            f"<dt>{_e(term)}:</dt> <dd>{_e(meaning)}</dd>"
            for term, meaning in block.entries
        )
        names = ", ".join(term for term, _ in block.entries)
        return (
            f'<details class="terms"><summary>Terms used above: {_e(names)}'
            f'</summary><dl class="terms">{lines}</dl></details>'
        )
    details = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in block.details)
    return (
        f'<div class="card" data-system="{_e(block.system)}">'
        f'<div class="system">{_e(block.system)}</div>'
        f'<div class="cube">{_e(block.cube)}</div>'
        f'<div class="spread">{_e(block.spread)}</div>'
        f'<div class="interval">{_e(block.interval)}</div>'
        f"<dl>{details}</dl></div>"
    )


def render_html(
    *, title: str, meta: Sequence[str], sections: Sequence[Section], footer: str
) -> str:
    """The whole self-contained page."""
    toc = "".join(f'<a href="#{_e(s.anchor)}">{_e(s.title)}</a>' for s in sections)
    body = []
    for section in sections:
        cards = [b for b in section.blocks if isinstance(b, HeadlineCard)]
        others = [b for b in section.blocks if not isinstance(b, HeadlineCard)]
        inner = ""
        if cards:
            inner += (
                '<div class="cards">'
                + "".join(_block_html(c, 3) for c in cards)
                + "</div>"
            )
        inner += "\n".join(_block_html(b, 3) for b in others)
        body.append(
            f'<section id="{_e(section.anchor)}"><h2>{_e(section.title)}</h2>\n'
            f"{inner}</section>"
        )
    meta_html = "".join(f'<p class="meta">{_e(m)}</p>' for m in meta)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{_e(title)}</h1>{meta_html}"
        f'<nav class="toc">{toc}</nav></header>'
        f"<main>{''.join(body)}</main>"
        f"<footer>{_e(footer)}</footer></body></html>\n"
    )


_MD_SPECIAL = re.compile(
    r"[\\`|<>*~$]|\](?=[(\[])|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])|&(?=#?\w+;)"
)
"""What would start Markdown or HTML syntax inside a cell: emphasis (``*``,
``_`` at a word's edge), code, tables, tags and autolinks, strikethrough, math
(``$``), entities, and a ``]`` that closes link text (before ``(`` or ``[``).
With that ``]`` escaped no link or image can form (``![x](http://…)`` stays
text and fetches nothing); a lone ``[x]`` or ``(y)`` is inert, so it is left
as written."""
_MD_LINE_START = re.compile(r"^(?:[#+=\[-]|\d{1,9}(?=[.)](?:\s|$)))")
"""What starts a heading, list, rule or link definition when it opens a line."""


def _md_cell(cell: Cell, limit: int = 160, *, line: bool = False) -> str:
    r"""One table cell (or line) of plain text as Markdown: one line, literal.

    Newlines collapse to spaces and Markdown/HTML syntax is backslash-escaped
    (not HTML-escaped: ``&lt;`` would show as such in a text viewer), so a
    pipe, a tag, a backtick, a link or an image in an answer cannot break the
    table or fetch anything. ``line``: the text opens a line (a paragraph),
    where a leading ``#``, ``-``, ``+``, ``=``, ``[`` or ``1.`` is escaped too.

    >>> print(_md_cell("<question>\nA | B `x` &amp; *y*"))
    \<question\> A \| B \`x\` \&amp; \*y\*
    >>> print(_md_cell("![x](http://t.example/p.png) [a][r] ~~s~~ $x$ _e_ a_b"))
    ![x\](http://t.example/p.png) [a\][r] \~\~s\~\~ \$x\$ \_e\_ a_b
    >>> print(_md_cell("[0.12, 0.50]"), _md_cell("judge(s)"))
    [0.12, 0.50] judge(s)
    >>> [_md_cell(t, line=True) for t in ("# h", "- x", "12. y", "1.5 z", "[r]: u")]
    ['\\# h', '\\- x', '12\\. y', '1.5 z', '\\[r]: u']
    >>> _md_cell("-0.25")  # a table cell: only a line start is escaped
    '-0.25'
    """
    text = cell.text if isinstance(cell, LongText) else str(cell)
    if isinstance(cell, LongText) and len(text) > limit:
        text = text[:limit] + "…"
    text = _MD_SPECIAL.sub(lambda m: "\\" + m.group(), " ".join(text.split()))
    # A leading "#", "-", "+", "=", "[" or "1." would make a heading, a list, a
    # rule or a link definition (which would turn a later "[x]" into a link).
    m = _MD_LINE_START.match(text) if line else None
    if m:
        end = m.end()
        text = (
            "\\" + text
            if end == 1 and not text[0].isdigit()
            else text[:end] + "\\" + text[end:]
        )
    return text or " "


def _block_md(block: Block | Section, level: int) -> list[str]:
    if isinstance(block, Section):
        out = [f"{'#' * min(level, 6)} {_md_cell(block.title)}", ""]
        for b in block.blocks:
            out.extend(_block_md(b, level + 1))
        return out
    if isinstance(block, Para):
        prefix = "> " if block.kind not in ("text", "verdict") else ""
        return [prefix + _md_cell(block.text, line=True), ""]
    if isinstance(block, Table):
        out = []
        if block.caption:
            out += [f"*{_md_cell(block.caption)}*", ""]
        out.append("| " + " | ".join(_md_cell(h) for h in block.headers) + " |")
        out.append(
            "|"
            + "|".join(
                "---:" if i in block.numeric else "---"
                for i in range(len(block.headers))
            )
            + "|"
        )
        out.extend(
            "| " + " | ".join(_md_cell(c) for c in row) + " |" for row in block.rows
        )
        return [*out, ""]
    if isinstance(block, Figure):
        return [f"*Figure: {_md_cell(block.title)} (see report.html).*", ""]
    if isinstance(block, Terms):
        return [
            *(f"> **{_md_cell(t)}**: {_md_cell(m)}  " for t, m in block.entries),
            "",
        ]
    return []


def render_markdown(
    *, title: str, meta: Sequence[str], sections: Sequence[Section], footer: str
) -> str:
    """The same sections as Markdown (plots are listed, tables kept)."""
    lines = [f"# {_md_cell(title)}", ""]
    lines += [*(f"{_md_cell(m, line=True)}  " for m in meta), ""]
    for section in sections:
        lines += [f"## {_md_cell(section.title)}", ""]
        for b in section.blocks:
            lines.extend(_block_md(b, 3))
    lines += ["---", _md_cell(footer, line=True), ""]
    return "\n".join(lines)
