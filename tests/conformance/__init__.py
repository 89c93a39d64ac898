"""OpInfo conformance harness (run_opinfo.py, harness.py, report.py)."""
