"""Batch programs that run in a job's pod: promotion of a checkpoint to a served
revision, quantization, and the milestone copier. Their manifests are built in
`manifests.jobs`."""
