"""Device plumbing shared by the benchmarks: synchronisation, cache flush, CUDA-event and
perf_counter timing, peak memory, and one measurement of a call (warm-up, peak, repetitions)."""
import ctypes
import gc
import math
import os
import statistics
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from _workloads import GB

# torch.OutOfMemoryError (CUDA and CPU allocators) where it exists, else the CUDA one.
OutOfMemoryError = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
FATAL_MARKERS = ("illegal memory access", "device-side assert", "unspecified launch failure",
                 "misaligned address", "illegal instruction")


def short_error(err: BaseException) -> str:
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]


def is_oom(err: BaseException) -> bool:
    return isinstance(err, OutOfMemoryError) or "out of memory" in str(err).lower()


def failure(err: BaseException) -> Dict[str, Any]:
    """The record of a measurement that raised: 'oom' or 'error', and whether the device is
    unusable now ('fatal': the run must stop)."""
    if is_oom(err):
        return {"status": "oom", "message": short_error(err)}
    rec = {"status": "error", "message": short_error(err)}
    if any(m in str(err).lower() for m in FATAL_MARKERS):
        rec["fatal"] = True
    return rec


def _malloc_trim() -> None:
    """Return freed heap memory to the OS, so that RSS growth shows new allocations."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def current_rss() -> Optional[int]:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        try:
            import psutil
            return psutil.Process().memory_info().rss
        except Exception:
            return None


class RssSampler:
    """Peak RSS growth over a block, sampled every ``interval`` seconds by a thread.

    Approximate: the allocator may reuse freed heap memory (below glibc's mmap threshold)
    without the RSS growing, and a spike shorter than the interval can be missed.
    """

    def __init__(self, interval: float = 5e-4) -> None:
        self.interval = interval
        self.base: Optional[int] = None
        self.peak: Optional[int] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = current_rss()
            if rss is not None and (self.peak is None or rss > self.peak):
                self.peak = rss
            time.sleep(self.interval)

    def __enter__(self) -> "RssSampler":
        _malloc_trim()
        self.base = self.peak = current_rss()
        if self.base is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        rss = current_rss()
        if rss is not None and self.peak is not None:
            self.peak = max(self.peak, rss)

    @property
    def peak_extra(self) -> Optional[int]:
        if self.base is None or self.peak is None:
            return None
        return max(0, self.peak - self.base)


class Bench:
    """What differs between CUDA and the CPU: sync, cache flush, clocks and memory figures."""

    def __init__(self, device: torch.device, flush_bytes: int, queue_us: float = 0.0) -> None:
        self.device = device
        self.is_cuda = device.type == "cuda"
        self.flush_bytes = flush_bytes
        # CUDA: a GPU sleep of queue_us queued before each timed repetition, longer than the
        # host takes to queue one call, so that the GPU never waits for the host's launches
        # inside the timed span: at small sizes (W1) the span is then the device's time, not
        # the Python call's (the host-overhead table measures that).
        self.queue_us = queue_us if self.is_cuda else 0.0
        self._cycles_per_us: Optional[float] = None
        self._flush_buf = (torch.empty(flush_bytes // 4, dtype=torch.float32, device=device)
                           if flush_bytes > 0 else None)
        self.memory_kind = ("cuda max_memory_allocated - memory_allocated before the call"
                            if self.is_cuda else
                            "CPU: peak growth of the process RSS, sampled every 0.5 ms "
                            "(approximate)")

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def free(self, collect: bool = False) -> None:
        """Release cached memory; ``collect`` also runs the cycle collector (slow: ~1 s with
        torch.compile loaded), needed only after an exception, whose traceback holds frames."""
        if collect:
            gc.collect()
        if self.is_cuda:
            try:
                torch.cuda.empty_cache()
            except RuntimeError:  # a broken CUDA context: the caller reports and stops
                pass
        else:
            _malloc_trim()

    def flush_cache(self) -> None:
        if self._flush_buf is not None:
            self._flush_buf.zero_()

    def cycles_per_us(self) -> float:
        """The GPU clock as torch.cuda._sleep counts it, measured once (events around a sleep)."""
        if self._cycles_per_us is None:
            cycles = 10_000_000
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            self.sync()
            start.record()
            torch.cuda._sleep(cycles)
            end.record()
            self.sync()
            self._cycles_per_us = cycles / max(start.elapsed_time(end) * 1e3, 1.0)
        return self._cycles_per_us

    def gpu_sleep(self, us: float) -> None:
        """Queue a GPU busy-wait of about ``us`` microseconds on the current stream."""
        torch.cuda._sleep(int(self.cycles_per_us() * us))

    def wall(self, fn: Callable[[], Any]) -> float:
        """Seconds one call takes, synchronised on both sides."""
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - start

    def time_reps(self, fn: Callable[[], Any], before: Callable[[], None],
                  reps: int) -> List[float]:
        """Milliseconds of ``reps`` calls of ``fn``, each after ``before()`` (not timed)."""
        return self.time_reps_flagged(fn, before, reps)[0]

    def time_reps_flagged(self, fn: Callable[[], Any], before: Callable[[], None],
                          reps: int) -> Tuple[List[float], List[bool]]:
        """``time_reps``' milliseconds, and for each repetition whether it was host-bound: on
        CUDA, the GPU had reached the start event before the host queued the call's last
        launch (the sleep did not cover the host's time, e.g. a stall of the shared host, or
        a call that waits for the GPU), so the span may include the GPU's waits for launches.

        The cycle collector is off meanwhile (as in ``timeit``): with torch.compile loaded a
        full collection takes about a second and would land in some repetition.
        """
        gc_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._time_reps(fn, before, reps)
        finally:
            if gc_enabled:
                gc.enable()

    def _time_reps(self, fn, before, reps):
        if self.is_cuda:
            pairs, late = [], []
            for _ in range(reps):
                before()
                if self.queue_us:
                    self.gpu_sleep(self.queue_us)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                late.append(start.query())
                pairs.append((start, end))
            self.sync()
            return [s.elapsed_time(e) for s, e in pairs], late
        times = []
        for _ in range(reps):
            before()
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return times, [False] * reps

    def peak_extra(self, fn: Callable[[], Any]) -> Tuple[Optional[int], float]:
        """Peak bytes allocated during ``fn()`` beyond what was allocated before it, and the
        seconds the call took (synchronised; a rough figure, not a measurement)."""
        if self.is_cuda:
            self.sync()
            base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            start = time.perf_counter()
            fn()
            self.sync()
            seconds = time.perf_counter() - start
            return torch.cuda.max_memory_allocated(self.device) - base, seconds
        with RssSampler() as sampler:
            start = time.perf_counter()
            fn()
            seconds = time.perf_counter() - start
        return sampler.peak_extra, seconds

    def copy_bandwidth(self, nbytes: int, reps: int = 10) -> Dict[str, float]:
        """Device-to-device copy of an ``nbytes`` tensor; counts read + write bytes."""
        src = torch.ones(nbytes // 4, dtype=torch.float32, device=self.device)
        dst = torch.empty_like(src)
        for _ in range(2):
            dst.copy_(src)
        times = self.time_reps(lambda: dst.copy_(src), lambda: None, reps)
        del src, dst
        self.free()
        ms = statistics.median(times)
        return {"bytes": nbytes, "ms": ms, "gbps": 2 * nbytes / (ms * 1e-3) / GB, "reps": reps}




@dataclass
class Options:
    warmups: int = 3
    reps: Optional[int] = None
    min_reps: int = 3
    max_reps: int = 200
    target_s: float = 0.4
    slow_call_s: float = 0.25   # after a warm-up call slower than this, no more warm-ups
    inject_oom: Optional[str] = None
    profile: bool = False       # bench_edge_dot --profile: one more call under torch.profiler


def measure(bench: Bench, call: Callable[[], Any], before: Callable[[], None], opts: Options,
            context: Callable[[], Any] = nullcontext,
            after_peak: Optional[Callable[[], None]] = None) -> Dict[str, Any]:
    """One measurement of ``call``, each call after ``before()`` (untimed); raises what it raises.

    Warm-up 1 takes the one-time costs (torch.compile compiles there) and is no estimate;
    warm-up 2 measures the peak extra memory, and ``after_peak()`` (outside ``context``, e.g. a
    check of that call's output) runs after it; more warm-ups follow unless the calls are slow
    anyway; then ``opts.reps`` repetitions, or as many as take about ``opts.target_s``, of
    which the median, min and max count the device-bound ones (``device_bound``).
    """
    with context():
        before()
        first = bench.wall(call)
        before()
        peak, second = bench.peak_extra(call)
    if after_peak is not None:
        after_peak()
    with context():
        warm = [second]
        while len(warm) < opts.warmups - 1 and warm[-1] < opts.slow_call_s:
            before()
            warm.append(bench.wall(call))
        estimate = max(min(warm), 1e-6)
        reps = opts.reps or int(min(opts.max_reps, max(opts.min_reps,
                                                       math.ceil(opts.target_s / estimate))))
        times, late = bench.time_reps_flagged(call, before, reps)
    kept = device_bound(times, late, opts.min_reps)
    return {"status": "ok", "ms": statistics.median(kept), "min_ms": min(kept),
            "max_ms": max(kept), "reps": len(kept), "host_bound_reps": sum(late),
            "dropped_reps": len(times) - len(kept), "warmups": 1 + len(warm),
            "first_call_s": first, "peak_extra_bytes": peak}


def device_bound(times: List[float], late: List[bool], min_reps: int) -> List[float]:
    """The repetitions whose span is the device's time: those that were not host-bound
    (``Bench.time_reps_flagged``), where at least ``min_reps`` of them are; else all of them
    (a call that waits for the GPU is host-bound every time: its span is what it costs)."""
    kept = [t for t, bound in zip(times, late) if not bound]
    return kept if len(kept) >= min_reps else list(times)


# CUDA runtime calls that block the host until the device catches up
_WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy", "cudaEventSynchronize")


def profile_once(fn: Callable[[], Any], device: torch.device, top: int = 12,
                 before: Optional[Callable[[], None]] = None) -> Dict[str, Any]:
    """One call of fn under torch.profiler (after a warm-up; ``before()`` ahead of each call,
    outside the profile): the rows that take the time (device time by kernel on CUDA, self
    CPU time by op on the CPU) and the blocking calls."""
    from torch.profiler import ProfilerActivity, profile
    if before is not None:
        before()
    fn()  # the warm-up
    if before is not None:
        before()
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    events = prof.key_averages()
    if cuda:
        rows = [e for e in events if e.device_time_total > 0 and e.device_type.name == "CUDA"]
        rows.sort(key=lambda e: -e.device_time_total)
        timed = [{"name": e.key, "count": e.count, "us": e.device_time_total} for e in rows]
    else:
        rows = sorted(events, key=lambda e: -e.self_cpu_time_total)
        timed = [{"name": e.key, "count": e.count, "us": e.self_cpu_time_total} for e in rows
                 if e.self_cpu_time_total > 0]
    waits = [{"name": e.key, "count": e.count, "us": e.cpu_time_total} for e in events
             if e.key.startswith(_WAITS)]
    return {"unit": "kernels" if cuda else "ops", "total_us": sum(r["us"] for r in timed),
            "calls": sum(r["count"] for r in timed), "rows": timed[:top], "waits": waits}


def format_profile(label: str, prof: Dict[str, Any]) -> str:
    """profile_once's result as lines: the total, the waits, then a row per kernel or op."""
    lines = [f"  profile of {label}: {prof['total_us']:,.0f} us in {prof['calls']} {prof['unit']}; "
             + (", ".join(f"{w['name']} x{w['count']}" for w in prof["waits"]) or "no waits")]
    lines += [f"    {r['us']:10.1f} us {r['count']:5d}x  {r['name'][:90]}" for r in prof["rows"]]
    return "\n".join(lines)
