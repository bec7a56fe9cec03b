"""The pipeline: batching, staging, the apply stage, commits and acknowledgement."""
