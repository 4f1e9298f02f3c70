"""`python -m workloads.data.web --config FILE --input DIR_OR_S3 --output DIR_OR_S3`.

WARC/WET files under --input (every one covered by a source of the config's source
manifest) to the text pipeline's token shards, with the sources in every manifest. Ray,
exit codes and the summary line as `python -m workloads.data.text`'s: bad config or input
(a file no source covers, a missing block list) is one line on stderr and exit 2, a
failure while the cluster runs one line and exit 1; the last line on stdout is a JSON
summary.
"""

from __future__ import annotations

import sys

from contracts.web_pipeline import WebPipelineConfig
from workloads.data.text.__main__ import command
from workloads.data.web.pipeline import preflight, run

PROG = "python -m workloads.data.web"


def main(argv: list[str] | None = None) -> int:
    return command(PROG, __doc__, WebPipelineConfig, preflight, run, argv)


if __name__ == "__main__":
    sys.exit(main())
