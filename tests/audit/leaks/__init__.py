"""Tests of olmax.audit.leaks: the leak audit, its rules and the calibration's plants."""
