"""The read-only clients of the CLI: AWS (`aws`: boto3 reads and their one-line errors) and
the cluster (`kube`: the Kubernetes API the CLI and the in-cluster watcher share)."""
