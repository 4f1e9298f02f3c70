"""`WebPipelineConfig`: the text pipeline's config, plus what a crawl needs before it.

`python -m workloads.data.web` reads WARC (and WET) files, keeps the HTML responses that
no filter refuses, extracts their main text, and hands the documents to the text
pipeline's stages (cleaning, PII, language, quality, exact and near dedup, tokenizer,
shards), so every field of `TextPipelineConfig` means here what it means there.

What this adds:

- `sources`, the source manifest: every input file belongs to one source (the longest
  `prefix` of its path under `--input`), and every source names its licence, its terms and
  who approved its use. A source without a licence is refused when the config is read
  (`llmp job submit` refuses the job file); an input file that no source covers is refused
  before any work. Each shard manifest carries the sources of the run and how many of its
  part's documents came from each, so a model's training data can be traced to its
  licences.
- `urls`: domain block lists (a domain blocks itself and its subdomains).
- `optout`: the opt-out signals a WARC response carries (the `X-Robots-Tag` header and
  `<meta name="robots">` directives, the TDM Reservation Protocol's `tdm-reservation`).
- `extract`: the main-text extractor and the WARC split size.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from contracts.text_pipeline import TextPipelineConfig

_SOURCE_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_PREFIX = re.compile(r"^([A-Za-z0-9._=-]+/)*[A-Za-z0-9._=-]*$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceEntry(_Model):
    """One source of the source manifest: where its files are, and under what licence."""

    name: str = Field(description="The source's name in the manifests (a-z, 0-9, . _ -).")
    prefix: str = Field(
        description="Its files: those under --input whose relative path starts with this "
        "(`cc/CC-MAIN-2026-49/`, or `` for every file). The longest matching prefix wins."
    )
    licence: str = Field(
        min_length=1,
        description="The licence or agreement the data is used under (`Common Crawl terms "
        "of use`, `CC-BY-4.0`, `contract ACME-2026-017`). Required: no licence, no use.",
    )
    terms: str = Field(
        min_length=1, description="Where its terms are written (a URL or a document's name)."
    )
    approved_by: str = Field(min_length=1, description="Who approved the use (a person, a role).")
    approved_on: dt.date = Field(description="The day of the approval (YYYY-MM-DD).")
    max_documents: int | None = Field(
        None,
        ge=1,
        description="Per-source quota: at most this many of its documents in the output, "
        "those with the smallest xxh64 of their id (a function of the input, not of the "
        "order), chosen after deduplication.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _SOURCE_NAME.match(v):
            raise ValueError(f"{v!r}: 1-63 of a-z, 0-9, '.', '_', '-', starting alphanumeric")
        return v

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if v.startswith("/") or ".." in v.split("/") or not _PREFIX.match(v):
            raise ValueError(f"{v!r}: a relative path prefix under --input (no '..', no '/')")
        return v


class UrlFilterConfig(_Model):
    blocklists: dict[str, str] = Field(
        default_factory=dict,
        description="name -> a file of domains, one a line (`#` comments; relative paths "
        "are under --input). A document whose host is a listed domain or under one is "
        "dropped as `url/<name>`. For the usual categories, give UT1's (Université "
        "Toulouse Capitole's blacklists, CC BY-SA 4.0, the lists datatrove's URLFilter "
        "and FineWeb use): `adult/domains`, `phishing/domains`, `malware/domains`, "
        "`gambling/domains`, placed on S3 or FSx; nothing is downloaded.",
    )

    @field_validator("blocklists")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        for name, path in v.items():
            if not _SOURCE_NAME.match(name) or not path:
                raise ValueError(f"{name!r}: a list's name (a-z, 0-9, . _ -) and a path")
        return v


class OptOutConfig(_Model):
    enabled: bool = Field(True, description="Drop pages whose archive record opts out.")
    robots_directives: tuple[str, ...] = Field(
        ("noai",),
        description='Directives of `X-Robots-Tag` or `<meta name="robots">` that drop a '
        "page (`optout/x_robots_tag`, `optout/meta_robots`). `noai` is the directive "
        "publishers use against AI training; add `noindex` to honour search opt-outs too.",
    )
    tdm_reservation: bool = Field(
        True,
        description="Honour the TDM Reservation Protocol (W3C community report): a "
        "`tdm-reservation: 1` header or meta tag drops the page (`optout/tdm_reservation`).",
    )

    @field_validator("robots_directives")
    @classmethod
    def _lower(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(d.strip().lower() for d in v if d.strip())


class ExtractConfig(_Model):
    extractor: Literal["resiliparse", "trafilatura"] = Field(
        "resiliparse",
        description="Main-text extractor. resiliparse's `extract_plain_text(main_content="
        "True)` (the default: measured in bench/warc_peer.py, as close to the planted main "
        "text as trafilatura's and many times faster) or trafilatura's `extract` with "
        "datatrove's settings (favor_precision, no comments) but deduplicate, a cache per "
        "process that would make a page's text depend on the pages read before it.",
    )
    block_size_bytes: int = Field(
        64 << 20,
        ge=1 << 10,
        description="WARC files are read in byte ranges of this size, one task each: a "
        "range owns the records (gzip members, for .gz) that start in it.",
    )
    max_html_bytes: int = Field(
        2 << 20,
        ge=1 << 10,
        description="Larger payloads are dropped unparsed (`warc/too_large`).",
    )


class WebPipelineConfig(TextPipelineConfig):
    sources: tuple[SourceEntry, ...] = Field(
        description="The source manifest: every input file's source, with its licence."
    )
    urls: UrlFilterConfig = Field(
        default_factory=UrlFilterConfig, description="Domain block lists."
    )
    optout: OptOutConfig = Field(default_factory=OptOutConfig, description="Opt-out signals.")
    extract: ExtractConfig = Field(
        default_factory=ExtractConfig, description="Main-text extraction and WARC splits."
    )

    @field_validator("sources")
    @classmethod
    def _some(cls, v: tuple[SourceEntry, ...]) -> tuple[SourceEntry, ...]:
        if not v:
            raise ValueError("no sources: every input file needs a source with its licence")
        return v

    @model_validator(mode="after")
    def _distinct_sources(self) -> Self:
        for key in ("name", "prefix"):
            seen: set[str] = set()
            for s in self.sources:
                value = getattr(s, key)
                if value in seen:
                    raise ValueError(f"sources: two sources with {key} {value!r}")
                seen.add(value)
        return self

    def source_of(self, rel: str) -> SourceEntry | None:
        """The source of the input file at `rel` (relative to --input): the entry with the
        longest prefix of it, or None."""
        matches = [s for s in self.sources if rel.startswith(s.prefix)]
        return max(matches, key=lambda s: len(s.prefix)) if matches else None
