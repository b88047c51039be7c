"""Benchmarks; not part of the installed package. Run them from a checkout, e.g. python benchmarks/decode.py."""
