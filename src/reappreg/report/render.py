"""The report as one self-contained HTML page (figures as data URIs) and as markdown."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from typing import Any

from reappreg.card.build import fmt
from reappreg.report.blocks import Section, Table


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
.sources{font-size:.85em;color:#555}"""


def render_html(sections: Sequence[Section], title: str, subtitle: str) -> str:
    body = [f"<h1>{html.escape(title)}</h1>", f"<p>{_inline_html(subtitle)}</p>", "<nav><ol>"]
    body += [f'<li><a href="#s{i}">{html.escape(s.title)}</a></li>' for i, s in enumerate(sections)]
    body.append("</ol></nav>")
    for i, section in enumerate(sections):
        body.append(f'<section id="s{i}"><h2>{html.escape(section.title)}</h2>')
        body.append('<p class="sources">From ' + ", ".join(f"<code>{html.escape(s)}</code>" for s in section.sources) + "</p>")
        for reason in section.missing:
            body.append(f'<p class="missing">Missing: {_inline_html(reason)}</p>')
        for block in section.blocks:
            if isinstance(block, str):
                body.append(f"<p>{_inline_html(block)}</p>")
            elif isinstance(block, Table):
                head = "".join(f"<th>{html.escape(c)}</th>" for c in block.columns)
                rows = "".join("<tr>" + "".join(f"<td>{html.escape(_text(v))}</td>" for v in row) + "</tr>" for row in block.rows)
                caption = f"<caption>{_inline_html(block.caption)}</caption>" if block.caption else ""
                body.append(f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
            else:
                uri = "data:image/png;base64," + base64.b64encode(block.png).decode("ascii")
                body.append(f'<figure><img alt="{html.escape(block.title)}" src="{uri}">'
                            f"<figcaption>{_inline_html(block.caption)}</figcaption></figure>")
        body.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _md_cell(value: Any) -> str:
    return _text(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(sections: Sequence[Section], title: str, subtitle: str) -> str:
    lines = [f"# {title}", "", subtitle, ""]
    for section in sections:
        lines += [f"## {section.title}", "", "From " + ", ".join(f"`{s}`" for s in section.sources) + ".", ""]
        lines += [f"> **Missing:** {reason}" for reason in section.missing]
        if section.missing:
            lines.append("")
        for block in section.blocks:
            if isinstance(block, str):
                lines += [block, ""]
            elif isinstance(block, Table):
                lines.append("| " + " | ".join(block.columns) + " |")
                lines.append("|" + "---|" * len(block.columns))
                lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block.rows]
                lines += (["", f"_{block.caption}_"] if block.caption else []) + [""]
            else:
                lines += [f"_Figure: {block.title} (in the HTML report; its numbers are in the tables)._", ""]
    return "\n".join(lines).rstrip() + "\n"
