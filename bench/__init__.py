"""Benchmarks of the Living Memory build pipeline (see ``bench/README.md``)."""
