"""Timing primitives for microsecond GPU work (definitions in docs/metrics.md).

Kept out of ``ragged``: asv runs today's suite against older builds of the library, and the
ruler must not move with them. Bump ``HARNESS_VERSION`` whenever a definition changes: it is
part of every benchmark's asv version, so a new ruler starts a new series in the history.

torch is imported inside the functions: asv starts one process per benchmark and parameter
set to read a cached result, and importing torch there would cost ~2 s per process.

    call_us   one call bracketed by CUDA events after a device sync (host dispatch + GPU)
    gpu_us    per-call time of a CUDA-graph replay of many calls (GPU only)
    host_us   host wall time per call in a back-to-back loop, synchronised once at the end
    dispatch_us = call_us - gpu_us

``interleaved_rounds`` is the paired runner's loop (``paired``): arms in a fresh random order
every round, so neither a drift of the machine nor a fixed position favours one arm.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

HARNESS_VERSION = 1
# The fixed revision of ragged that every kernel run also times in its own process
# (``measure.kernels``, ``kernel.AnchoredFloor``): host time moves 1.6-2.1x between processes,
# its ratio to the same code in the same process does not. A new anchor starts a new series.
ANCHOR = "dd3528a6b226ac7163dfd9d046749bfd3fd4366b"


@dataclass
class Timing:
    """A median in microseconds with its raw samples (also microseconds)."""

    median: float
    samples: list[float] = field(repr=False)

    def as_dict(self) -> dict:
        return asdict(self)


def _timing(samples: list[float]) -> Timing:
    return Timing(statistics.median(samples), samples)


def warmup(fn: Callable[[], object], calls: int = 20) -> None:
    """Run ``fn`` until compilation and allocator growth are behind us."""
    import torch

    for _ in range(calls):
        fn()
    torch.cuda.synchronize()


def tune(ragged) -> None:
    """A revision's launch configurations tuned for this GPU before anything is timed: its
    ``kernels.tuning.tune()``, a no-op where the table was measured or the sweep is cached
    (a one-time sweep elsewhere, never inside a timed region or a graph capture); nothing for
    a revision without per-device tuning."""
    import importlib

    try:
        tuning = importlib.import_module(f"{ragged.__name__}.kernels.tuning")
    except ImportError:
        return
    tuning.tune()


def spin_up(seconds: float = 0.3) -> None:
    """Keep the GPU busy for ``seconds`` so that its clocks leave the idle state.

    An idle H100 sits at ~400 MHz and needs tens of milliseconds of work to reach its boost
    clock: short timings taken after a host-bound pause (compilation) read up to 2x slow.
    """
    import torch

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()


def gpu_clocks() -> dict:
    """SM clock (MHz) and clock-throttle reasons of GPU 0 read through NVML; {} without NVML."""
    import torch

    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return {
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "throttle_reasons": pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle),
        }
    except Exception:
        return {}


def call_us(fn: Callable[[], object], samples: int = 200) -> Timing:
    """What a caller waits for one call when the GPU is idle: dispatch + device time."""
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(samples):
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1e3)
    return _timing(out)


def host_us(fn: Callable[[], object], calls: int = 200, rounds: int = 7) -> Timing:
    """Host time per call: ``calls`` back-to-back calls per round, one sync after each round.

    The sync stays outside the timed region, so this is the host-side cost alone as long as the
    GPU keeps up (it does for every workload here: the launch queue never fills).
    """
    import torch

    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        out.append((t1 - t0) / calls * 1e6)
    return _timing(out)


def gpu_us(
    fn: Callable[[], object], calls: int = 50, replays: int = 20, warm_s: float = 0.02
) -> Timing:
    """Device time per call: replay a CUDA graph of ``calls`` captured calls.

    Raises RuntimeError if ``fn`` cannot be captured (it synchronises or allocates on the host).
    """
    graph = capture(fn, calls)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:  # clocks up, caches warm
        graph.replay()
        torch.cuda.synchronize()
    return _timing(replay_us(graph, calls, replays))


def replay_us(graph: torch.cuda.CUDAGraph, calls: int, replays: int) -> list[float]:
    """Per-call µs of ``replays`` timed replays of a graph of ``calls`` captured calls."""
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1e3 / calls)
    return out


def capture(fn: Callable[[], object], calls: int) -> torch.cuda.CUDAGraph:
    """A CUDA graph of ``calls`` calls of ``fn``, warmed up on the capture stream first."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up on the capture stream, as torch.cuda.graphs asks
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def synchronises(fn: Callable[[], object]) -> str | None:
    """Why ``fn`` cannot be captured in a CUDA graph (it syncs with the host), or None."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as exc:
        return f"synchronises with the host: {str(exc).splitlines()[0][:100]}"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return None


def measure_interleaved(
    fns: dict[str, Callable[[], object]],
    rounds: int = 5,
    slow: frozenset[str] = frozenset(),
    gpu: bool = True,
) -> dict[str, dict]:
    """call_us, host_us and gpu_us of several functions, measured in alternating rounds.

    Each round measures every function in turn, so a drift of the machine (clocks, a
    neighbour's load) shifts all of them alike and their ratios stay honest. ``slow`` names
    functions that get fewer samples per round (milliseconds per call). A function that cannot
    be captured in a CUDA graph gets ``gpu_us`` None and the reason in ``gpu_us_error``;
    ``gpu=False`` skips ``gpu_us`` (host-only functions).
    """
    out: dict[str, dict] = {name: {"call": [], "host": [], "gpu": []} for name in fns}
    graphs: dict[str, tuple[torch.cuda.CUDAGraph, int] | None] = {}
    for name, fn in fns.items():
        warmup(fn, 3 if name in slow else 20)
        calls = 5 if name in slow else 50
        reason = synchronises(fn) if gpu else "not measured"
        graphs[name] = None if reason else (capture(fn, calls), calls)
        if reason:
            out[name]["gpu_us_error"] = reason
    for _ in range(rounds):
        for name, fn in fns.items():
            few = name in slow
            out[name]["call"] += call_us(fn, samples=4 if few else 40).samples
            out[name]["host"] += host_us(fn, calls=4 if few else 100, rounds=1).samples
            if graphs[name] is not None:
                graph, calls = graphs[name]
                graph.replay()  # one untimed replay: clocks and caches as for the others
                out[name]["gpu"] += replay_us(graph, calls, replays=4)
    result = {}
    for name, m in out.items():
        result[name] = {
            "call_us": _timing(m["call"]).as_dict(),
            "host_us": _timing(m["host"]).as_dict(),
            "gpu_us": _timing(m["gpu"]).as_dict() if m["gpu"] else None,
        }
        if "gpu_us_error" in m:
            result[name]["gpu_us_error"] = m["gpu_us_error"]
    return result


def interleaved_rounds(
    arms: dict[str, Callable[[], dict[str, float]]], rounds: int, rng: random.Random
) -> dict[str, dict[str, list[float]]]:
    """``rounds`` rounds of every arm's sampler in a random order each round.

    A sampler returns one value per metric; -> {arm: {metric: [one value a round]}}. Round
    ``i`` of every arm was taken within the same round, so ratios pair by index. An arm whose
    sampler raises is dropped with the others kept; the exception, as text, is its value of
    the key ``"error"`` instead of a dict of metrics.
    """
    out: dict[str, dict] = {arm: {} for arm in arms}
    live = dict(arms)
    for _ in range(rounds):
        order = list(live)
        rng.shuffle(order)
        for arm in order:
            try:
                values = live[arm]()
            except Exception as exc:
                out[arm] = {"error": failure(exc)}
                del live[arm]
                continue
            for metric, value in values.items():
                out[arm].setdefault(metric, []).append(value)
    return out


def failure(exc: BaseException, limit: int = 200) -> str:
    """What an arm's exception says, in one bounded line for a result document."""
    return f"{type(exc).__name__}: {str(exc)[:limit]}"


def kernel_sampler(fn: Callable[[], object], graph=None, *, host_calls: int = 50,
                   call_samples: int = 10, graph_calls: int = 20):  # fmt: skip
    """A sampler for ``interleaved_rounds``: one round's ``host_us`` (``host_calls``
    back-to-back calls), ``call_us`` (median of ``call_samples``) and, given the CUDA ``graph``
    of ``graph_calls`` calls of ``fn``, ``gpu_us`` from one replay."""

    def sample() -> dict[str, float]:
        values = {
            "host_us": host_us(fn, calls=host_calls, rounds=1).median,
            "call_us": call_us(fn, samples=call_samples).median,
        }
        if graph is not None:
            values["gpu_us"] = replay_us(graph, graph_calls, replays=1)[0]
        return values

    return sample


def spin(seconds: float) -> None:
    """Busy-wait ``seconds`` on this thread: a host slowdown of known size (calibration)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
