"""Output formats: a report is a list of blocks (heading, paragraph, list, table, image) rendered to Markdown or to
one self-contained HTML page (images embedded as base64 PNG)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Paragraph:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass
class Image:
    title: str
    path: Path


Block = Heading | Paragraph | Bullets | Table | Image

HTML_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 80rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; }
"""


def markdown_cell(text: str) -> str:
    """A table cell safe for Markdown (pipes escaped, no line breaks)."""
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block]) -> str:
    """The report as Markdown; images are linked by file name (they sit next to report.md)."""
    parts = []
    for block in blocks:
        match block:
            case Heading(text, level):
                parts.append(f"{'#' * level} {text}")
            case Paragraph(text):
                parts.append(text)
            case Bullets(items):
                parts.append("\n".join(f"- {item}" for item in items))
            case Table(headers, rows):
                lines = [headers, ["---"] * len(headers), *rows]
                parts.append("\n".join("| " + " | ".join(markdown_cell(c) for c in line) + " |" for line in lines))
            case Image(title, path):
                parts.append(f"![{title}]({path.name})")
    return "\n\n".join(parts) + "\n"


def to_html(blocks: list[Block], title: str) -> str:
    """The report as one HTML page with its images inlined."""
    body = []
    for block in blocks:
        match block:
            case Heading(text, level):
                body.append(f"<h{level}>{html.escape(text)}</h{level}>")
            case Paragraph(text):
                body.append(f"<p>{html.escape(text)}</p>")
            case Bullets(items):
                body.append("<ul>" + "".join(f"<li>{html.escape(item)}</li>" for item in items) + "</ul>")
            case Table(headers, rows):
                head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
                cells = ["".join(f"<td>{html.escape(c)}</td>" for c in row) for row in rows]
                body.append(f"<table><tr>{head}</tr>" + "".join(f"<tr>{row}</tr>" for row in cells) + "</table>")
            case Image(title_text, path):
                data = base64.b64encode(path.read_bytes()).decode("ascii")
                alt = html.escape(title_text)
                body.append(
                    f'<figure><img alt="{alt}" src="data:image/png;base64,{data}"><figcaption>{alt}</figcaption></figure>'
                )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{HTML_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
