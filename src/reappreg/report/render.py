"""The report as one self-contained HTML page (figures as data URIs) and as markdown."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from typing import Any

from reappreg.evidence.formatting import fmt
from reappreg.report.blocks import Details, Figure, Section, Summary, Table


def _text(value: Any) -> str:
    return "—" if value is None or value == "" else fmt(value)


def _inline_html(text: str) -> str:
    """Escape, then the two inline marks the report uses: **bold** and `code`."""
    out = html.escape(text)
    parts = out.split("**")
    out = "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))
    parts = out.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.9em}th,td{border:1px solid #ccc;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#f3f3f3}caption{caption-side:bottom;font-size:.85em;color:#555;
text-align:left}code{background:#f5f5f5;padding:0 .2em}.missing{background:#fff4e5;border-left:4px solid #f0a020;
padding:.4em .8em}figure{margin:1em 0}figcaption{font-size:.85em;color:#555}img{max-width:100%}
.sources{font-size:.85em;color:#555}details{margin:.4em 0 1em}summary{cursor:pointer;color:#335}
table.summary th{white-space:nowrap;vertical-align:top}.verdict{font-weight:bold;padding:0 .3em;border-radius:3px}
.verdict.ok{background:#e3f4e3;color:#155d15}.verdict.bad{background:#fde4e4;color:#9b1111}.verdict.none{background:#eee}"""


def _table_html(block: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in block.columns)
    rows = "".join("<tr>" + "".join(f"<td>{_cell_html(v)}</td>" for v in row) + "</tr>" for row in block.rows)
    caption = f"<caption>{_inline_html(block.caption)}</caption>" if block.caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _cell_html(value: Any) -> str:
    # A multi-line cell (an answer the policy wrote) keeps its line breaks.
    return html.escape(_text(value)).replace("\n", "<br>")


VERDICT_CLASS = {True: "ok", False: "bad", None: "none"}


def _block_html(block: Any) -> str:
    if isinstance(block, str):
        return f"<p>{_inline_html(block)}</p>"
    if isinstance(block, Table):
        return _table_html(block)
    if isinstance(block, Details):
        inner = "".join(_block_html(b) for b in block.blocks)
        return f"<details><summary>{_inline_html(block.summary)}</summary>{inner}</details>"
    if isinstance(block, Summary):
        rows = "".join(
            f'<tr><th><a href="#{html.escape(line.anchor)}">{html.escape(line.title)}</a></th>'
            f'<td><span class="verdict {VERDICT_CLASS[line.ok]}">{html.escape(line.verdict)}</span> '
            + "<br>".join(_inline_html(x) for x in line.sentences)
            + (_table_html(line.table) if line.table is not None else "") + "</td></tr>" for line in block.lines)
        return f'<table class="summary"><tbody>{rows}</tbody></table>'
    assert isinstance(block, Figure)
    uri = "data:image/png;base64," + base64.b64encode(block.png).decode("ascii")
    return (f'<figure><img alt="{html.escape(block.title)}" src="{uri}">'
            f"<figcaption>{_inline_html(block.caption)}</figcaption></figure>")


def render_html(sections: Sequence[Section], title: str, subtitle: str) -> str:
    body = [f"<h1>{html.escape(title)}</h1>", f"<p>{_inline_html(subtitle)}</p>", "<nav><ol>"]
    body += [f'<li><a href="#{html.escape(s.anchor)}">{html.escape(s.title)}</a></li>' for s in sections]
    body.append("</ol></nav>")
    for section in sections:
        body.append(f'<section id="{html.escape(section.anchor)}"><h2>{html.escape(section.title)}</h2>')
        if section.sources:
            body.append('<p class="sources">From ' + ", ".join(f"<code>{html.escape(s)}</code>" for s in section.sources) + "</p>")
        for reason in section.missing:
            body.append(f'<p class="missing">Missing: {_inline_html(reason)}</p>')
        body += [_block_html(block) for block in section.blocks]
        body.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _md_cell(value: Any) -> str:
    return _text(value).replace("|", "\\|").replace("\n", " ")


def _md_table(block: Table) -> list[str]:
    lines = ["| " + " | ".join(block.columns) + " |", "|" + "---|" * len(block.columns)]
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block.rows]
    return lines + (["", f"_{block.caption}_"] if block.caption else []) + [""]


def _md_block(block: Any) -> list[str]:
    if isinstance(block, str):
        return [block, ""]
    if isinstance(block, Table):
        return _md_table(block)
    if isinstance(block, Details):
        # GitHub renders <details> in markdown; the blank lines let the table inside render too.
        inner = [line for b in block.blocks for line in _md_block(b)]
        return [f"<details><summary>{html.escape(block.summary)}</summary>", "", *inner, "</details>", ""]
    if isinstance(block, Summary):
        lines = ["| stage | answer |", "|---|---|"]
        lines += [f"| [{line.title}](#{line.anchor}) | **{line.verdict}**: "
                  + "<br>".join(x.replace("|", "\\|") for x in line.sentences)
                  + (" (table below)" if line.table is not None else "") + " |" for line in block.lines]
        lines.append("")
        # A markdown table cannot hold a table: a line's own table follows the summary, under its title.
        for line in block.lines:
            if line.table is not None:
                lines += [f"**{line.title}** ({line.verdict}):", "", *_md_table(line.table)]
        return lines
    return [f"_Figure: {block.title} (in the HTML report; its numbers are in the tables)._", ""]


def render_markdown(sections: Sequence[Section], title: str, subtitle: str) -> str:
    lines = [f"# {title}", "", subtitle, ""]
    for section in sections:
        # An explicit anchor: the summary's links must not depend on a renderer's slug rules.
        lines += [f'<a id="{section.anchor}"></a>', "", f"## {section.title}", ""]
        if section.sources:
            lines += ["From " + ", ".join(f"`{s}`" for s in section.sources) + ".", ""]
        lines += [f"> **Missing:** {reason}" for reason in section.missing]
        if section.missing:
            lines.append("")
        for block in section.blocks:
            lines += _md_block(block)
    return "\n".join(lines).rstrip() + "\n"
