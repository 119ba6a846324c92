"""Fault tests: kills, corrupt files and failing stores, through the commands."""
