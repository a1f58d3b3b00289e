"""Benchmarks the project ships (`awm bench ...`, JSON out): each reports ratios against a baseline measured
in the same run, never absolute wall-clock targets baked into tests."""
