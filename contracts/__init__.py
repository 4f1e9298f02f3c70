"""The configs the CLI writes and the pods read, and the layouts both sides agree on.

Pydantic models and pure functions only: the job configs of the trainers and the
data pipelines, the quantization schemes, the revision layout of published models,
checkpoint completeness and restore points, evaluation gates, S3 URI helpers. The
Pulumi program, the manifests and the operator CLI import them to check a job
before it runs; the programs inside the pods import them to read it. Nothing heavy
here (a contract in pyproject.toml): no Pulumi, boto3, torch, Ray, DeepSpeed or
transformers.
"""
