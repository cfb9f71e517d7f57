"""Example experiments for docs/experiment.md, imported from the working directory (not installed)."""
