"""The web pipeline, for real: WARC and WET files written by warcio (gzip members and an
uncompressed WARC, in ranges of 1 KiB) in a moto bucket on 127.0.0.1, `python -m
workloads.data.web --input s3://… --output s3://…` on local Ray, and the kept documents,
every filter's count, the licences in the shard manifests, the refusals and a byte-identical
rerun checked.

Planted under `raw/`: `cc/a.warc.gz` and `cc/b.warc` (source `crawl`): 10 article pages in
two site templates, an exact copy of one at a second URL, a page on a blocked domain's
subdomain, one with `X-Robots-Tag: noai`, one with `<meta name="robots" content="noai">`,
one with `<meta name="tdm-reservation" content="1">`, a 404 and a PNG, each response after
its request record; `licensed/news.wet.gz` (source `acme-news`, quota 3): five WET
conversion records.
"""

from __future__ import annotations

import importlib.util
import io
import json
import random
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from tests.conftest import reset_moto, use_dummy_credentials
from tests.workloads.data import corpus
from workloads.data.text.shards import Manifest
from workloads.data.web.__main__ import main
from workloads.data.web.warc import byte_ranges, read_range

REPO = Path(__file__).resolve().parents[3]
BUCKET = "llmp-web-s3-test"
SOURCES: list[dict[str, Any]] = [
    {
        "name": "crawl",
        "prefix": "cc/",
        "licence": "Common Crawl terms of use",
        "terms": "https://commoncrawl.org/terms-of-use",
        "approved_by": "data governance",
        "approved_on": "2026-11-28",
    },
    {
        "name": "acme-news",
        "prefix": "licensed/",
        "licence": "contract ACME-2026-017",
        "terms": "legal/ACME-2026-017.pdf",
        "approved_by": "legal",
        "approved_on": "2026-10-02",
        "max_documents": 3,
    },
]
CONFIG: dict[str, Any] = {
    "sources": SOURCES,
    "urls": {"blocklists": {"own": "lists/blocked.txt"}},
    "extract": {"block_size_bytes": 1024},
    "tokenizer": {"train": {"vocab_size": 400, "sample_documents": 100}},
    "shards": {"parts": 2, "shard_tokens": 4_000},
    "shuffle_partitions": 2,
}


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_warc_peer", REPO / "bench/warc_peer.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_warc_peer"] = module
    spec.loader.exec_module(module)
    return module


def _article(rng: random.Random) -> tuple[str, list[str]]:
    sents = corpus.prose_sentences(rng, 18)
    return " ".join(sents[0].split()[:6]), [" ".join(sents[i : i + 3]) for i in range(0, 18, 3)]


def _wet(path: Path, texts: list[str]) -> None:
    from warcio.warcwriter import WARCWriter

    with path.open("wb") as f:
        writer = WARCWriter(f, gzip=True)
        for i, text in enumerate(texts):
            record = writer.create_warc_record(
                f"https://news.acme.example/{i}",
                "conversion",
                payload=io.BytesIO(text.encode()),
                warc_headers_dict={
                    "WARC-Date": "2026-11-01T00:00:00Z",
                    "Content-Type": "text/plain",
                },
            )
            writer.write_record(record)


def build(root: Path) -> dict[str, Any]:
    """The planted input (the module docstring); returns what a run must keep."""
    bench = _bench()
    rng = random.Random(5)
    pages = []
    for i in range(10):
        title, paras = _article(rng)
        html = bench.page_html(i % 2, title, "".join(f"<p>{p}</p>" for p in paras))
        pages.append(
            bench.Page(
                url=f"https://www.site{i % 2}.example.org/a/{i}", html=html, main="\n".join(paras)
            )
        )
    keep = {p.url for p in pages}
    copy = bench.Page(url=pages[3].url + "?amp=1", html=pages[3].html, main=pages[3].main)

    def page(url: str, head: str = "", headers: list[tuple[str, str]] | None = None) -> Any:
        title, paras = _article(rng)
        html = bench.page_html(0, title, "".join(f"<p>{p}</p>" for p in paras), head)
        return bench.Page(url=url, html=html, main="x", headers=headers or [])

    planted = [
        page("https://shop.spam.example.net/deal"),
        page("https://www.site0.example.org/private", headers=[("X-Robots-Tag", "noindex, noai")]),
        page("https://www.site1.example.org/meta", head='<meta name="robots" content="noai">'),
        page("https://www.site1.example.org/tdm", head='<meta name="tdm-reservation" content="1">'),
        bench.Page(
            url="https://www.site0.example.org/gone", html="<p>gone</p>", main="", status=404
        ),
        bench.Page(
            url="https://www.site0.example.org/logo.png",
            html="PNG",
            main="",
            content_type="image/png",
        ),
    ]
    (root / "cc").mkdir(parents=True)
    (root / "licensed").mkdir()
    (root / "lists").mkdir()
    bench.write_warc(root / "cc" / "a.warc.gz", [*pages[:6], copy, *planted[:3]])
    bench.write_warc(root / "cc" / "b.warc", [*pages[6:], *planted[3:]])
    (root / "lists" / "blocked.txt").write_text("# our own list\nspam.example.net\n")
    wet = [corpus.layout(corpus.prose_sentences(rng, 18)) for _ in range(5)]
    _wet(root / "licensed" / "news.wet.gz", wet)
    return {"keep": keep, "responses": 10 + 1 + 6, "wet": 5}


def _objects(s3: Any, prefix: str) -> dict[str, bytes]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]
    return {
        o["Key"].removeprefix(prefix): s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
        for o in listed
    }


@pytest.fixture(scope="module")
def web_run(
    ray_local: None, moto_server: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("web-s3")
    planted = build(root / "raw")
    (root / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    with pytest.MonkeyPatch.context() as mp:
        use_dummy_credentials(mp, root)
        mp.setenv("AWS_ENDPOINT_URL", reset_moto(moto_server))
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        for f in sorted(p for p in (root / "raw").rglob("*") if p.is_file()):
            s3.upload_file(str(f), BUCKET, f"raw/{f.relative_to(root / 'raw')}")
        cfg = ["--config", str(root / "config.yaml"), "--input", f"s3://{BUCKET}/raw/"]
        first = main([*cfg, "--output", f"s3://{BUCKET}/tokens/"])
        second = main([*cfg, "--output", f"s3://{BUCKET}/again/"])
        return {
            **planted,
            "root": root,
            "codes": (first, second),
            "objects": _objects(s3, "tokens/"),
            "again": _objects(s3, "again/"),
        }


def _manifests(run: dict[str, Any]) -> list[Manifest]:
    return [
        Manifest.model_validate_json(run["objects"][f"manifest-0000{i}-of-00002.json"])
        for i in range(2)
    ]


def _documents(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for name, data in sorted(run["objects"].items())
        if name.endswith("-docs.jsonl")
        for line in data.decode().splitlines()
    ]


def test_every_record_of_a_warc_belongs_to_exactly_one_range(tmp_path: Path) -> None:
    from warcio.archiveiterator import ArchiveIterator

    build(tmp_path)
    for name in ("a.warc.gz", "b.warc"):
        path = tmp_path / "cc" / name
        size = path.stat().st_size
        with path.open("rb") as f:
            expected = [
                (it.get_record_offset(), r.rec_headers.get_header("WARC-Target-URI"))
                for it in [ArchiveIterator(f)]
                for r in it
                if r.rec_type == "response"
            ]
        got = []
        ranges = byte_ranges(size, 1024)
        assert len(ranges) > 3
        with path.open("rb") as f:
            for start, end in ranges:
                got += [
                    (p.offset, p.url) for p in read_range(f, start, end, size, name.endswith("gz"))
                ]
        assert got == expected, name
        # Ranges cut exactly at each response: each owns its record and no other.
        offsets = [o for o, _ in expected]
        cuts = list(zip([0, *offsets[1:]], [*offsets[1:], size], strict=True))
        with path.open("rb") as f:
            owned = [
                [p.offset for p in read_range(f, a, b, size, name.endswith("gz"))] for a, b in cuts
            ]
        assert owned == [[o] for o in offsets], name


def test_the_kept_documents_are_the_articles_with_their_url_date_and_language(
    web_run: dict[str, Any],
) -> None:
    assert web_run["codes"] == (0, 0)
    docs = _documents(web_run)
    crawl = [d for d in docs if d["source"] == "crawl"]
    assert {d["url"] for d in crawl} == web_run["keep"]
    assert all(d["date"] == "2026-11-30T12:00:00Z" and d["language"] == "en" for d in crawl)
    assert all(d["id"].startswith("cc/") and "@" in d["id"] for d in crawl)
    assert len([d for d in docs if d["source"] == "acme-news"]) == 3  # the quota
    stats = _manifests(web_run)[0].stats
    assert stats.input_files == 3
    assert stats.documents_read == web_run["responses"] + web_run["wet"]
    assert stats.documents_kept == len(docs) == 13
    assert sum(m.documents for m in _manifests(web_run)) == 13


def test_each_filter_drops_its_planted_page(web_run: dict[str, Any]) -> None:
    stats = _manifests(web_run)[0].stats
    assert stats.dropped["warc"] == {"status": 1, "not_html": 1}
    assert stats.dropped["url"] == {"own": 1}
    assert stats.dropped["optout"] == {"x_robots_tag": 1, "meta_robots": 1, "tdm_reservation": 1}
    assert stats.dropped["quota"] == {"acme-news": 2}
    assert stats.exact_duplicates_dropped == 1  # the copy at a second URL


def test_every_manifest_carries_the_licences_and_its_documents_per_source(
    web_run: dict[str, Any],
) -> None:
    docs = _documents(web_run)
    for m in _manifests(web_run):
        assert m.sources is not None
        by = {s.name: s for s in m.sources}
        assert by["crawl"].licence == "Common Crawl terms of use"
        assert by["acme-news"].licence == "contract ACME-2026-017"
        assert by["acme-news"].approved_by == "legal" and by["acme-news"].max_documents == 3
        assert sum(s.documents for s in m.sources) == m.documents
        assert m.documents_file is not None and m.documents_file in web_run["objects"]
    totals = {s: sum(1 for d in docs if d["source"] == s) for s in ("crawl", "acme-news")}
    assert totals == {
        s["name"]: sum(
            x.documents for m in _manifests(web_run) for x in m.sources or [] if x.name == s["name"]
        )
        for s in SOURCES
    }


def test_a_rerun_is_byte_identical(web_run: dict[str, Any]) -> None:
    assert web_run["objects"] == web_run["again"]


def test_a_source_without_a_licence_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build(tmp_path / "raw")
    sources = [dict(SOURCES[0]), SOURCES[1]]
    del sources[0]["licence"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**CONFIG, "sources": sources}))
    args = ["--config", str(tmp_path / "config.yaml"), "--input", str(tmp_path / "raw")]
    assert main([*args, "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sources.0.licence: Field required" in err


def test_a_file_that_no_source_covers_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build(tmp_path / "raw")
    (tmp_path / "raw" / "stray").mkdir()
    (tmp_path / "raw" / "cc" / "a.warc.gz").rename(tmp_path / "raw" / "stray" / "a.warc.gz")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    args = ["--config", str(tmp_path / "config.yaml"), "--input", str(tmp_path / "raw")]
    assert main([*args, "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "stray/a.warc.gz is in no source of the source manifest" in err
    assert not (tmp_path / "out").exists()
