"""The asv suite: the benchmark modules kernel, pipeline, numerics and cpu.

``support/`` holds the suite's own parts, which the benchmark modules and ragbench use: the
catalogue and grids, the harness, the workloads, the paired and drift runners. Nothing there
is a benchmark. It is a namespace package (no ``__init__.py``) so that asv does not import it
whole: asv imports every module it walks here twice a run (its discovery, and its forkserver
before it forks), and ``pkgutil.iter_modules`` walks no folder without ``__init__.py``. Those
processes then import what the benchmark modules import, not torch, ragged or the workloads
(4.2 -> 0.4 s of CPU each on the 2-core test machine); each ``setup_cache`` imports them in
its own process, as before (tests/test_benchmarks.py checks both).

``support/``, a module a job:

    suite.py       asv glue: grid mode, versions, cached grids, sample results
    catalogue.py   what the suite measures, declared once: the backends and pipelines, and
                   the grids each is in
    grids.py       the parameter grids, quick and full
    metrics.py     the ``track_`` methods a GPU class and its CPU twin share
    harness.py     the timing primitives for microsecond GPU work (docs/metrics.md)
    measure.py     each benchmark class's ``setup_cache``: a table of one grid
    workloads.py   the inputs and pipelines, from ragged's public API with fixed seeds
    floor.py       the kernel's GPU time against the GPU's own floor (``kernel.GpuFloor``)
    bound.py       triton's share of the pipeline's bound (``pipeline.BoundShare``)
    promises.py    the API's launch promises (``kernel.LaunchPromise``)
    first_call.py  what a shape's first call costs (``kernel.NewLength``, ``FirstCall``)
    paired.py      the paired runner: base and head in one process, host-time cells
    outputs.py     the drift runner: raw outputs per revision, which ``ragbench.gate.drift``
                   compares
    revision.py    several revisions of ``ragged`` in one process
    inject.py      kernel slowdowns of known size, to calibrate the detector
"""
