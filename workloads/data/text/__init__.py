"""The text data pipeline on Ray (KubeRay on EKS): raw JSONL/Parquet in, token shards out.

`python -m workloads.data.text --config FILE --input DIR_OR_S3 --output DIR_OR_S3`.
`pipeline` describes the stages and where each shuffle happens, `minhash` the
near-deduplication, `shards` the output contract the trainer reads, `config` every
threshold and where it comes from.
"""
