"""The asv suite: the benchmark modules kernel, pipeline, numerics and cpu.

``support/`` holds the suite's own parts, which the benchmark modules and ragbench use: the
catalogue and grids, the harness, the workloads, the paired and drift runners. Nothing there
is a benchmark. It is a namespace package (no ``__init__.py``) so that asv does not import it
whole: asv imports every module it walks here twice a run (its discovery, and its forkserver
before it forks), and ``pkgutil.iter_modules`` walks no folder without ``__init__.py``. Those
processes then import what the benchmark modules import, not torch, ragged or the workloads
(4.2 -> 0.4 s of CPU each on the 2-core test machine); each ``setup_cache`` imports them in
its own process, as before (tests/test_benchmarks.py checks both).
"""
