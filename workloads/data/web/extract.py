"""From a WARC page to a document: decode, honour opt-outs, filter the URL, extract.

`page_document(page, cfg, blocklists)` gives `(text, reason)`: the main text of an HTML
response (or a WET record's text as it is), or "" and the reason it was dropped, as
`stage/reason` like the text pipeline's filters (`warc/status`, `warc/not_html`,
`url/<list>`, `optout/meta_robots`, `extract/empty`), so the run's statistics count them
beside the others.

The extractor (`ExtractConfig.extractor`): Resiliparse's `extract_plain_text` with
`main_content=True` on the DOM that the opt-out check already parsed, or trafilatura's
`extract` with the settings datatrove's `Trafilatura` step uses but its process-wide
paragraph cache (`deduplicate`), which would make a page's text depend on the pages its
worker read before. bench/warc_peer.py
measures both against datatrove on pages of known main text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from contracts.web_pipeline import OptOutConfig, WebPipelineConfig
from workloads.data.web.warc import HTML_TYPES, Page

if TYPE_CHECKING:
    from resiliparse.parse.html import HTMLTree


def host(url: str) -> str:
    """The URL's host, lower-cased, without a port or a trailing dot."""
    try:
        return (urlsplit(url).hostname or "").rstrip(".")
    except ValueError:
        return ""


def parse_domains(text: str) -> frozenset[str]:
    """A block list: one domain a line, `#` comments and blank lines ignored."""
    domains = set()
    for line in text.splitlines():
        entry = line.split("#", 1)[0].strip().lower().rstrip(".")
        if entry:
            domains.add(entry.removeprefix("*.").removeprefix("www."))
    return frozenset(domains)


def blocked_by(url_host: str, blocklists: Mapping[str, frozenset[str]]) -> str | None:
    """The first list (by name) holding the host or a parent domain of it."""
    labels = url_host.split(".")
    suffixes = {".".join(labels[i:]) for i in range(len(labels))}
    for name in sorted(blocklists):
        if not suffixes.isdisjoint(blocklists[name]):
            return name
    return None


def _directives(value: str) -> set[str]:
    """`X-Robots-Tag: otherbot: noindex, noai` -> {"noindex", "noai"}: a directive scoped to
    a user agent counts too (the archive does not say which agent trains)."""
    out = set()
    for part in value.lower().replace(";", ",").split(","):
        token = part.rsplit(":", 1)[-1].strip()
        if token:
            out.add(token)
    return out


def header_optout(headers: Mapping[str, str], cfg: OptOutConfig) -> str | None:
    if not cfg.enabled:
        return None
    tag = headers.get("x-robots-tag")
    if tag and cfg.robots_directives and not _directives(tag).isdisjoint(cfg.robots_directives):
        return "x_robots_tag"
    if cfg.tdm_reservation and headers.get("tdm-reservation", "").strip() == "1":
        return "tdm_reservation"
    return None


def meta_optout(tree: HTMLTree, cfg: OptOutConfig) -> str | None:
    """`<meta name="robots" content="noai">`, `<meta name="tdm-reservation" content="1">`."""
    if not cfg.enabled:
        return None
    head = tree.head
    if head is None:
        return None
    for meta in head.query_selector_all("meta[name]"):
        name = (meta.getattr("name") or "").strip().lower()
        content = meta.getattr("content") or ""
        if name == "robots" and not _directives(content).isdisjoint(cfg.robots_directives):
            return "meta_robots"
        if name == "tdm-reservation" and cfg.tdm_reservation and content.strip() == "1":
            return "tdm_reservation"
    return None


def decode(body: bytes, charset: str | None) -> str:
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    return str(bytes_to_str(body, charset or detect_encoding(body) or "utf-8"))


def main_text(html: str, tree: HTMLTree, extractor: str) -> str:
    if extractor == "trafilatura":
        import trafilatura

        # datatrove's Trafilatura step (favour precision, no comments) but for its
        # `deduplicate`: that is a cache of the paragraphs this process has seen, so what a
        # page keeps would depend on which pages a worker read before it (the pipeline's
        # own exact and near dedup come later, as functions of the input).
        text = trafilatura.extract(
            html, favor_precision=True, include_comments=False, deduplicate=False
        )
        return text or ""
    from resiliparse.extract.html2text import extract_plain_text

    return str(extract_plain_text(tree, main_content=True, alt_texts=False, comments=False))


def page_document(
    page: Page, cfg: WebPipelineConfig, blocklists: Mapping[str, frozenset[str]]
) -> tuple[str, str]:
    """(text, "") of a page the pipeline keeps, or ("", "stage/reason")."""
    from resiliparse.parse.html import HTMLTree

    if not 200 <= page.status < 300:
        return "", "warc/status"
    if blocklists and (name := blocked_by(host(page.url), blocklists)):
        return "", f"url/{name}"
    if why := header_optout(page.headers, cfg.optout):
        return "", f"optout/{why}"
    if page.kind == "conversion":
        text = decode(page.body, "utf-8")
        return (text, "") if text.strip() else ("", "extract/empty")
    if page.content_type.split(";", 1)[0].strip() not in HTML_TYPES:
        return "", "warc/not_html"
    if len(page.body) > cfg.extract.max_html_bytes:
        return "", "warc/too_large"
    html = decode(page.body, page.charset)
    tree = HTMLTree.parse(html)
    if why := meta_optout(tree, cfg.optout):
        return "", f"optout/{why}"
    text = main_text(html, tree, cfg.extract.extractor).strip()
    return (text, "") if text else ("", "extract/empty")
