"""Data preparation that runs on the platform's Ray clusters (KubeRay): `text` turns raw
text corpora into the token shards the trainer reads; each modality has its own package."""
