"""MkDocs hook: the pages that mark a place for it get the reference written from lmlab's own parsers."""

from lmlab.cli.reference import cli_reference, flag_vocabulary

MARKERS = {"<!-- lmlab:cli-reference -->": cli_reference, "<!-- lmlab:flag-vocabulary -->": flag_vocabulary}


def on_page_markdown(markdown: str, **kwargs) -> str:
    for marker, write in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, write())
    return markdown
