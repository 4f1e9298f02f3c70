"""Diagnosis of running jobs: what slows a synchronous job, from its step times."""
