"""Web extraction against a peer: ours and datatrove's WarcReader + Trafilatura on one WARC.

The corpus is made here (warcio writes it, one gzip member per record, as Common Crawl
does): `--pages` HTML pages of `--sites` made-up sites, each page a site template (a
header with navigation, a cookie banner, a sidebar of related links, share buttons, a
footer; half the sites in semantic tags, `<nav>`/`<aside>`/`<footer>`, half in `<div>`s
with class names) around an article of planted main text (a title and 3-7 paragraphs of
English prose from a seeded RNG). Beside them: a copy of every tenth page at a second URL,
a 404 page per 25, a PNG response per 20, and a request record before every response, as
a crawler writes them. Nothing is read from or written to the network.

Per extractor: records read, documents kept, the agreement of each kept text with its
page's planted main text (word-level F1 of the two bags of words, its mean, and the pages
at F1 >= 0.9), seconds, and documents per second per core (HTML responses / seconds, one
process each: datatrove's LocalPipelineExecutor with one task and one worker, whose
Trafilatura step runs the extraction in a sandbox subprocess, as FineWeb ran it (with a
10 s timeout instead of 1 s: `run_datatrove` says why); ours
reads the same file with `workloads.data.web.warc.read_range` and extracts with
`workloads.data.web.extract.page_document`, in the extractor named).

    .venv/bin/python bench/warc_peer.py [--pages 2000] [--sites 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUBJECTS = [
    "the council",
    "our team",
    "the museum",
    "a local farmer",
    "the new library",
    "the river trust",
    "the school board",
    "a small bakery",
    "the orchestra",
    "the harbour office",
    "the cycling club",
    "an old printer",
]
VERBS = [
    "announced",
    "described",
    "reviewed",
    "questioned",
    "celebrated",
    "delayed",
    "explained",
    "measured",
    "repaired",
    "published",
    "planned",
    "compared",
]
OBJECTS = [
    "the plan for the northern bridge",
    "a report on the water quality",
    "the history of the market square",
    "the results of the spring survey",
    "a proposal to extend the park",
    "the cost of the new tram line",
    "the schedule for the summer festival",
    "the number of visitors this year",
    "a study of the old railway",
    "the design of the community garden",
    "the budget for the coming winter",
    "a list of the rare birds seen",
]
TAILS = [
    "after a long meeting on Tuesday",
    "with the help of many volunteers",
    "and residents were invited to comment",
    "because the weather had changed",
    "while the town waited for the decision",
    "in a letter sent to every household",
    "and the figures surprised most of them",
    "so that the work can start in May",
    "although some questions remain open",
    "and they will share more details soon",
]
NAV = ["Home", "News", "Sport", "Culture", "Weather", "Contact", "About us", "Archive"]
RELATED = [
    "Ten things to do this weekend",
    "Photos from the harvest fair",
    "Letters to the editor",
    "Road closures this week",
    "Meet the new head teacher",
    "Opinion: why parking matters",
]


def sentence(rng: random.Random) -> str:
    s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}."
    return s[0].upper() + s[1:]


def paragraph(rng: random.Random) -> str:
    return " ".join(sentence(rng) for _ in range(rng.randint(3, 6)))


@dataclass
class Page:
    url: str
    html: str
    main: str
    """The planted main text: title and paragraphs, one a line."""
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


def page_html(site: int, title: str, body: str, head: str = "") -> str:
    """A page of site `site`'s template around the article (`body`: its HTML)."""
    name = f"The Valley Courier {site}"
    nav = " ".join(f'<a href="/{n.lower().replace(" ", "-")}">{n}</a>' for n in NAV)
    related = "".join(f'<li><a href="/r/{i}">{t}</a></li>' for i, t in enumerate(RELATED))
    cookie = (
        "We use cookies to improve your experience on our site. By continuing to browse you "
        "accept our use of cookies. <button>Accept all</button> <a href='/privacy'>Privacy</a>"
    )
    footer = (
        f"Copyright 2026 {name}. All rights reserved. Registered in England. "
        "<a href='/terms'>Terms of use</a> <a href='/advertise'>Advertise with us</a>"
    )
    share = "Share this article: <a>Facebook</a> <a>Twitter</a> <a>Email</a>"
    if site % 2 == 0:  # semantic markup
        return (
            f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{head}<title>{title} | "
            f"{name}</title></head><body><header><div class='logo'>{name}</div><nav>{nav}"
            f"</nav></header><div class='cookie-banner'>{cookie}</div><main><article>"
            f"<h1>{title}</h1>{body}<div class='share'>{share}</div></article></main>"
            f"<aside><h3>Related stories</h3><ul>{related}</ul></aside>"
            f"<footer>{footer}</footer></body></html>"
        )
    return (
        f"<html><head>{head}<title>{title} - {name}</title></head><body><div id='top'>"
        f"<div class='site-name'>{name}</div><div class='menu'>{nav}</div></div>"
        f"<div id='cookie-notice'>{cookie}</div><div id='wrapper'><div class='content'>"
        f"<div class='post'><h2 class='post-title'>{title}</h2><div class='entry'>{body}"
        f"</div><div class='social-share'>{share}</div></div></div><div id='sidebar'>"
        f"<div class='widget'><h3>Most read</h3><ul>{related}</ul></div></div></div>"
        f"<div id='footer'>{footer}</div></body></html>"
    )


def make_pages(pages: int, sites: int, seed: int = 0) -> list[Page]:
    """The HTML pages with their planted main text, then the copies, 404s and PNGs."""
    rng = random.Random(seed)
    out: list[Page] = []
    for i in range(pages):
        site = i % sites
        title = sentence(rng).rstrip(".")
        paras = [paragraph(rng) for _ in range(rng.randint(3, 7))]
        body = "".join(f"<p>{p}</p>" for p in paras)
        html = page_html(site, title, body)
        url = f"https://www.courier{site}.example.org/news/{i:06d}-story"
        out.append(Page(url=url, html=html, main="\n".join([title, *paras])))
    copies = [
        Page(url=p.url.replace("/news/", "/amp/news/"), html=p.html, main=p.main) for p in out[::10]
    ]
    missing = [
        Page(
            url=f"https://www.courier{i % sites}.example.org/gone/{i}",
            html="<html><body><h1>Not found</h1><p>The page you asked for is gone.</p></body>"
            "</html>",
            main="",
            status=404,
        )
        for i in range(0, pages, 25)
    ]
    images = [
        Page(
            url=f"https://www.courier{i % sites}.example.org/img/{i}.png",
            html="\x89PNG\r\n\x1a\n" + "\x00" * 64,
            main="",
            content_type="image/png",
        )
        for i in range(0, pages, 20)
    ]
    return out + copies + missing + images


def write_warc(path: Path, pages: Iterable[Page], date: str = "2026-11-30T12:00:00Z") -> None:
    """One WARC of a request and a response record per page, one gzip member each, with
    Common Crawl's WARC-Identified-Payload-Type on responses."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    reason = {200: "OK", 404: "Not Found"}
    with path.open("wb") as f:
        writer = WARCWriter(f, gzip=path.name.endswith(".gz"))
        for page in pages:
            request = writer.create_warc_record(
                page.url,
                "request",
                payload=io.BytesIO(f"GET {page.url} HTTP/1.1\r\n\r\n".encode()),
                warc_headers_dict={"WARC-Date": date},
            )
            writer.write_record(request)
            headers = [("Content-Type", page.content_type), *page.headers]
            http = StatusAndHeaders(
                f"{page.status} {reason.get(page.status, 'OK')}", headers, protocol="HTTP/1.1"
            )
            payload_type = page.content_type.split(";", 1)[0]
            record = writer.create_warc_record(
                page.url,
                "response",
                payload=io.BytesIO(page.html.encode("utf-8", errors="surrogateescape")),
                http_headers=http,
                warc_headers_dict={"WARC-Date": date, "WARC-Identified-Payload-Type": payload_type},
            )
            writer.write_record(record)


# --- agreement ---------------------------------------------------------------------------

_WORD = re.compile(r"\w+")


def f1(extracted: str, planted: str) -> float:
    """Word-level F1 of two bags of words (lower-cased)."""
    a = Counter(_WORD.findall(extracted.lower()))
    b = Counter(_WORD.findall(planted.lower()))
    common = sum((a & b).values())
    if not common:
        return 0.0
    precision, recall = common / sum(a.values()), common / sum(b.values())
    return 2 * precision * recall / (precision + recall)


# --- the two sides -----------------------------------------------------------------------


def run_ours(path: Path, extractor: str) -> tuple[dict[str, str], int, float]:
    """(url -> text kept, records read, seconds) of our reader and extraction."""
    from contracts.web_pipeline import WebPipelineConfig
    from workloads.data.web.extract import page_document
    from workloads.data.web.warc import read_range

    cfg = WebPipelineConfig.model_validate(
        {
            "sources": [
                {
                    "name": "bench",
                    "prefix": "",
                    "licence": "made here",
                    "terms": "bench/warc_peer.py",
                    "approved_by": "nobody",
                    "approved_on": "2026-12-04",
                }
            ],
            "extract": {"extractor": extractor},
        }
    )
    kept: dict[str, str] = {}
    records = 0
    size = path.stat().st_size
    started = time.perf_counter()
    with path.open("rb") as f:
        for page in read_range(f, 0, size, size, path.name.endswith(".gz")):
            records += 1
            text, _ = page_document(page, cfg, {})
            if text:
                kept[page.url] = text
    return kept, records, time.perf_counter() - started


def run_datatrove(folder: Path, workdir: Path) -> tuple[dict[str, str], float]:
    """(url -> text kept, seconds) of datatrove's WarcReader and Trafilatura, one task."""
    from datatrove.data import Document
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.readers import WarcReader
    from datatrove.utils.logging import logger

    logger.remove()  # its per-step log lines and stats; the figures are ours
    # Its sandbox forks a child per extractor and gives it `timeout` to start: trafilatura
    # imported here first, the child has it at once (a cold import on a busy machine takes
    # longer than the 1 s default and loses documents to a start-up the figures are not
    # about); 10 s per document for the same reason.
    import trafilatura  # noqa: F401

    out = workdir / "kept.jsonl"

    def collect(data: Iterable[Document], rank: int = 0, world_size: int = 1) -> Iterator[Any]:
        with out.open("w") as f:
            for doc in data:
                f.write(json.dumps({"url": doc.metadata.get("url"), "text": doc.text}) + "\n")
        yield from ()

    executor = LocalPipelineExecutor(
        pipeline=[
            WarcReader(str(folder), glob_pattern="*.warc.gz"),
            Trafilatura(timeout=10),
            collect,
        ],
        tasks=1,
        workers=1,
        logging_dir=str(workdir / "logs"),
        skip_completed=False,
    )
    started = time.perf_counter()
    with open(os.devnull, "w") as null, redirect_stdout(null), redirect_stderr(null):
        executor.run()
    seconds = time.perf_counter() - started
    kept = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        kept[row["url"]] = row["text"]
    return kept, seconds


def judge(pages: list[Page], kept: dict[str, str]) -> dict[str, float]:
    """Agreement over the pages that have main text: mean F1 (a page not kept scores 0) and
    the share at F1 >= 0.9; and the pages kept that have none (404s, images)."""
    planted = {p.url: p.main for p in pages if p.main}
    scores = [f1(kept.get(url, ""), main) for url, main in planted.items()]
    return {
        "mean_f1": sum(scores) / len(scores),
        "good": sum(s >= 0.9 for s in scores) / len(scores),
        "junk_kept": sum(1 for url in kept if url not in planted),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pages", type=int, default=2000, help="HTML pages with main text")
    parser.add_argument("--sites", type=int, default=40, help="site templates")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    pages = make_pages(args.pages, args.sites, args.seed)
    html = sum(1 for p in pages if p.content_type.startswith("text/html"))
    work = Path(tempfile.mkdtemp(prefix="warc-peer-"))
    try:
        folder = work / "warc"
        folder.mkdir()
        path = folder / "bench-00000.warc.gz"
        write_warc(path, pages)
        copies = sum("/amp/" in p.url for p in pages)
        print(
            f"corpus: {len(pages):,} responses ({html:,} HTML, {args.pages:,} with planted "
            f"main text, {copies:,} copies at a second URL), "
            f"{path.stat().st_size / 2**20:.1f} MiB of gzipped WARC"
        )
        # datatrove first: its sandbox is forked from this process, and a trafilatura that
        # has already run here would hand the child its cache of paragraphs seen.
        theirs, seconds = run_datatrove(folder, work)
        rows = [("datatrove, Trafilatura", len(pages), theirs, seconds)]
        for extractor in ("resiliparse", "trafilatura"):
            kept, records, seconds = run_ours(path, extractor)
            rows.insert(-1, (f"llmp, {extractor}", records, kept, seconds))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(
        f"{'':24} {'records':>8} {'kept':>6} {'mean F1':>8} {'F1>=0.9':>8} {'junk':>5} "
        f"{'seconds':>8} {'docs/s/core':>12}"
    )
    for name, records, kept, seconds in rows:
        j = judge(pages, kept)
        print(
            f"{name:24} {records:>8,} {len(kept):>6,} {j['mean_f1']:>8.3f} {j['good']:>8.1%} "
            f"{j['junk_kept']:>5,} {seconds:>8.2f} {html / seconds:>12,.0f}"
        )
    print()
    with_main = sum(1 for p in pages if p.main)
    print(f"docs/s/core: HTML responses / seconds, one process each ({os.cpu_count()} cores);")
    print(f"agreement over the {with_main:,} pages with main text, copies included (a page")
    print("not kept scores 0); junk: pages kept that have none (the 404s)")


if __name__ == "__main__":
    main()
