"""Sample databases and change logs for the demo, tests and benchmarks."""
