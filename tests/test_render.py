"""vllm_stress.analysis.report.render: a report's blocks as Markdown and as one self-contained HTML page."""

import base64

from vllm_stress.analysis.report.render import (
    Bullets,
    Heading,
    Image,
    Paragraph,
    Table,
    markdown_cell,
    to_html,
    to_markdown,
)


def blocks(tmp_path):
    png = tmp_path / "throughput.png"
    png.write_bytes(b"\x89PNG fake image bytes")
    return [
        Heading("Report <1>", 1),
        Paragraph("Peak: 1,200 tok/s & more"),
        Bullets(["first", "second"]),
        Table(["Users", "Note"], [["10", "a|b"], ["20", "two\nlines"]]),
        Image("Throughput", png),
    ]


def test_markdown(tmp_path):
    assert to_markdown(blocks(tmp_path)) == (
        "# Report <1>\n\n"
        "Peak: 1,200 tok/s & more\n\n"
        "- first\n- second\n\n"
        "| Users | Note |\n| --- | --- |\n| 10 | a\\|b |\n| 20 | two lines |\n\n"
        "![Throughput](throughput.png)\n"
    )
    assert markdown_cell("x|y\nz") == "x\\|y z"


def test_html_escapes_text_and_inlines_images(tmp_path):
    page = to_html(blocks(tmp_path), "Title & <co>")
    assert page.startswith(
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Title &amp; &lt;co&gt;</title>'
    )
    assert "<h1>Report &lt;1&gt;</h1>" in page and "<p>Peak: 1,200 tok/s &amp; more</p>" in page
    assert "<ul><li>first</li><li>second</li></ul>" in page
    assert "<table><tr><th>Users</th><th>Note</th></tr><tr><td>10</td><td>a|b</td></tr>" in page
    data = base64.b64encode(b"\x89PNG fake image bytes").decode()
    assert f'<img alt="Throughput" src="data:image/png;base64,{data}">' in page
    assert "href=" not in page and page.endswith("</body></html>\n")
