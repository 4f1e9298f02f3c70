"""Web archives to token shards on Ray: WARC/WET in, the text pipeline's shards out.

`python -m workloads.data.web --config FILE --input DIR_OR_S3 --output DIR_OR_S3`.
`warc` cuts the archives into splits and reads their records, `extract` turns a page into
a document (URL filters, opt-outs, main text), `pipeline` joins them to the text
pipeline's stages and carries the source manifest to the shards.
"""
