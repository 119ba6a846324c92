"""The demo: a script over the library (pipeline.py) and its report (report.py)."""
