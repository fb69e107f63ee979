"""Shared helpers for the CuTe DSL kernels in ``cute_kernels``.

Generic, kernel-agnostic pieces (nothing Mamba-2 specific lives here):

* dtype maps: torch dtype / string name -> cutlass numeric type, and back to a stable
  string (compile-cache keys must be plain picklable scalars, never tensors or types);
* arch detection that never initialises CUDA when ``CUTE_DSL_ARCH`` is set (CPU-only
  compile tests set ``CUTE_DSL_ARCH=sm_90a``);
* fake-tensor / fake-stream builders for tensor-free compilation (TVM-FFI path);
* :class:`CompiledKernel`, a small wrapper that owns one compiled function and knows how
  to call it on the fast TVM-FFI path (``compiled.__tvm_ffi_object__()``: torch tensors
  in, the current torch stream taken from the TVM-FFI environment) or on the classic
  ``from_dlpack`` + ``CUstream`` path when ``tvm_ffi`` is not importable;
* :class:`KernelCache`, a thread-safe dict cache (``cute.compile`` never caches and is
  not thread-safe, so compiles are serialised behind one lock);
* an opt-in on-disk cache of compiled kernels shared by processes (``REPLAYSSM_KERNEL_CACHE_DIR``,
  :class:`DiskEntry`): TVM-FFI kernels are exported as object files and reloaded in ~ms;
* the two compile paths every kernel module shares: :func:`compile_tvm_ffi_cached` (cached,
  tensor-free, TVM-FFI) and :func:`compile_keep_ptx` (uncached, keeps the PTX);
* PTX helpers for compile-only tests (:class:`dump_ptx`, :func:`ptx_stats`);
* :func:`fp32_regs`, a device helper (fp32 register copy of a register tensor).

Importing this module imports cutlass (and torch lazily where needed) but never touches
the GPU.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import hashlib
import json
import os
import platform
import re
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T

# --------------------------------------------------------------------------------------
# Optional dependencies
# --------------------------------------------------------------------------------------

try:  # TVM-FFI fast call path
    import tvm_ffi  # noqa: F401

    HAS_TVM_FFI = os.environ.get("REPLAYSSM_DISABLE_TVM_FFI", "0") != "1"
except Exception:  # pragma: no cover - depends on the environment
    HAS_TVM_FFI = False


# --------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------

#: stable string name -> cutlass numeric type (the names double as cache-key parts)
NAME_TO_CUTE: Dict[str, Any] = {
    "float32": cutlass.Float32,
    "float16": cutlass.Float16,
    "bfloat16": cutlass.BFloat16,
    "float8_e4m3fn": cutlass.Float8E4M3FN,
    "float8_e5m2": cutlass.Float8E5M2,
    "int32": cutlass.Int32,
    "int64": cutlass.Int64,
    "uint8": cutlass.Uint8,
    "int8": cutlass.Int8,
    "uint32": cutlass.Uint32,
}

_ALIASES = {
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp8": "float8_e4m3fn",
    "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
}


def dtype_name(dtype: Any) -> str:
    """Canonical string name for a torch dtype, a cutlass numeric type or a string.

    ``dtype_name(torch.bfloat16) == dtype_name(cutlass.BFloat16) == dtype_name("bf16")
    == "bfloat16"``. Used to build compile-cache keys.
    """
    if isinstance(dtype, str):
        name = dtype.lower().replace("torch.", "")
        name = _ALIASES.get(name, name)
        if name not in NAME_TO_CUTE:
            raise ValueError(f"unsupported dtype name {dtype!r}; known: {sorted(NAME_TO_CUTE)}")
        return name
    for name, ct in NAME_TO_CUTE.items():
        if dtype is ct:
            return name
    # torch dtype (checked by name to avoid importing torch here)
    s = str(dtype)
    if s.startswith("torch."):
        return dtype_name(s[len("torch."):])
    raise ValueError(f"unsupported dtype {dtype!r}")


def to_cute_dtype(dtype: Any):
    """torch dtype / cutlass type / name -> cutlass numeric type."""
    return NAME_TO_CUTE[dtype_name(dtype)]


def to_torch_dtype(dtype: Any):
    """cutlass type / torch dtype / name -> torch dtype (imports torch)."""
    import torch

    return getattr(torch, dtype_name(dtype))


def vec_elems(dtype: Any, bits: int = 128) -> int:
    """Elements of ``dtype`` in one ``bits``-wide vector access (16 B by default)."""
    return bits // to_cute_dtype(dtype).width


# --------------------------------------------------------------------------------------
# arch / device facts (cheap, cached, never initialise CUDA when overridden)
# --------------------------------------------------------------------------------------


def _parse_arch(s: str) -> Tuple[int, int]:
    m = re.match(r"^(?:sm_?)?(\d+)(\d)([af]?)$", s.strip(), re.IGNORECASE)
    if not m:
        raise ValueError(f"cannot parse arch {s!r} (expected e.g. 'sm_90a', '90')")
    return int(m.group(1)), int(m.group(2))


@functools.lru_cache(maxsize=None)
def get_arch(device_index: Optional[int] = None) -> Tuple[int, int]:
    """(major, minor) compute capability of the target.

    ``CUTE_DSL_ARCH`` (e.g. ``sm_90a``) overrides and lets kernels compile without a
    GPU; otherwise torch is asked (which initialises CUDA).
    """
    env = os.environ.get("CUTE_DSL_ARCH")
    if env:
        return _parse_arch(env)
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            "no CUDA device: set CUTE_DSL_ARCH (e.g. sm_90a) to compile without a GPU"
        )
    return tuple(torch.cuda.get_device_capability(device_index))  # type: ignore[return-value]


def arch_key() -> str:
    """A string naming the compile target, for cache keys (e.g. 'sm_90')."""
    major, minor = get_arch()
    return f"sm_{major}{minor}"


@functools.lru_cache(maxsize=None)
def num_sms(device_index: Optional[int] = None) -> int:
    """SM count of the current (or given) CUDA device; 132 (H100/H200 SXM) if no GPU."""
    try:
        import torch

        if torch.cuda.is_available():
            idx = torch.cuda.current_device() if device_index is None else device_index
            return int(torch.cuda.get_device_properties(idx).multi_processor_count)
    except Exception:  # pragma: no cover
        pass
    return 132


# --------------------------------------------------------------------------------------
# fake tensors / streams for tensor-free compilation
# --------------------------------------------------------------------------------------


def sym(divisibility: int = 1, width: int = 32):
    """A symbolic (runtime) integer for shapes (32-bit) or strides (``width=64``)."""
    return cute.sym_int(width, divisibility=divisibility)


def fake_tensor(
    dtype: Any,
    shape: Sequence[Any],
    stride: Sequence[Any],
    align_bytes: Optional[int] = None,
):
    """A fake tensor with explicit (possibly symbolic) shape and stride.

    ``stride`` entries may be ints, SymInts, or the string ``"dyn"`` / ``("dyn", d)``
    meaning a fresh 64-bit symbolic stride divisible by ``d`` elements.
    ``align_bytes`` is the assumed base-pointer alignment (TVM-FFI checks it at call time).
    """
    ct = to_cute_dtype(dtype)
    st = []
    for s in stride:
        if isinstance(s, str) and s == "dyn":
            st.append(cute.sym_int64())
        elif isinstance(s, tuple) and len(s) == 2 and s[0] == "dyn":
            st.append(cute.sym_int64(divisibility=int(s[1])))
        else:
            st.append(s)
    if align_bytes is None:
        align_bytes = max(ct.width // 8, 1)
    return cute.runtime.make_fake_tensor(ct, tuple(shape), stride=tuple(st), assumed_align=align_bytes)


def fake_stream():
    """Fake stream; with TVM-FFI the real stream is the caller's current torch stream."""
    return cute.runtime.make_fake_stream(use_tvm_ffi_env_stream=True)


# --------------------------------------------------------------------------------------
# compiled-kernel wrapper (TVM-FFI fast path, classic fallback)
# --------------------------------------------------------------------------------------


class CompiledKernel:
    """One compiled CuTe function plus the information needed to call it.

    * TVM-FFI path (``self.ffi is not None``): call ``self.ffi(*args)`` with raw torch
      tensors / Python scalars / ``None`` for absent optional tensors, no stream argument:
      the stream is the current torch stream (TVM-FFI env stream), so launches follow
      ``torch.cuda.stream(...)`` contexts and CUDA-graph capture.
    * classic path (``self.ffi is None``): ``self.compiled(*args, stream)`` with tensors
      converted by :func:`from_dlpack_dynamic` and a ``CUstream`` (:func:`current_cu_stream`).

    ``meta`` is a free dict for kernel-specific facts (e.g. alignments the launcher needs).
    A kernel loaded from the on-disk cache (:meth:`loaded`) has ``from_disk`` set; its
    ``compile_seconds`` are those of the original compile.
    """

    def __init__(self, compiled: Any, key: Hashable, compile_seconds: float, use_ffi: bool,
                 meta: Optional[Dict[str, Any]] = None):
        self.compiled = compiled  # keep the JIT wrapper alive (owns the module)
        self.ffi = compiled.__tvm_ffi_object__() if use_ffi else None
        self.compile_seconds = compile_seconds
        self.key = key
        self.meta: Dict[str, Any] = dict(meta or {})
        self.from_disk = False
        self._ptx: Optional[str] = None  # filled by compile-only helpers that dump PTX

    @classmethod
    def loaded(cls, module: Any, function: Any, key: Hashable, compile_seconds: float,
               meta: Optional[Dict[str, Any]] = None) -> "CompiledKernel":
        """A kernel loaded from an exported object file: ``function`` (a bare TVM-FFI function,
        same calling convention as ``__tvm_ffi_object__()``) is the fast path, ``module`` (the
        loaded module that owns the code) is kept alive as ``compiled``."""
        k = cls(module, key, compile_seconds, use_ffi=False, meta=meta)
        k.ffi = function
        k.from_disk = True
        return k

    @property
    def ptx(self) -> Optional[str]:
        """PTX text when the compile dumped it (compile-only helpers), else None."""
        return self._ptx

    @ptx.setter
    def ptx(self, text: Optional[str]) -> None:
        self._ptx = text

    def __repr__(self) -> str:
        path = "tvm-ffi" if self.ffi is not None else "classic"
        if self.from_disk:
            path += ", from disk"
        return f"CompiledKernel({self.key!r}, {path}, {self.compile_seconds:.2f}s)"


class KernelCache:
    """A dict of compiled kernels keyed by picklable scalars; compiles under one lock.

    ``disk_hits`` / ``disk_stores`` count the kernels of this cache loaded from / written to
    the on-disk cache (:func:`compile_tvm_ffi_cached`; process totals: :func:`disk_cache_counts`)."""

    _global_lock = threading.RLock()  # cute.compile is not thread-safe: one lock for all
    instances: List["KernelCache"] = []

    def __init__(self, name: str):
        self.name = name
        self._d: Dict[Hashable, CompiledKernel] = {}
        self.disk_hits = 0
        self.disk_stores = 0
        KernelCache.instances.append(self)

    def get(self, key: Hashable) -> Optional[CompiledKernel]:
        return self._d.get(key)

    def get_or_compile(self, key: Hashable, build: Callable[[], CompiledKernel]) -> CompiledKernel:
        k = self._d.get(key)
        if k is not None:
            return k
        with KernelCache._global_lock:
            k = self._d.get(key)
            if k is None:
                k = build()
                self._d[key] = k
        return k

    def __len__(self) -> int:
        return len(self._d)

    def keys(self):
        return list(self._d.keys())

    def clear(self) -> None:
        self._d.clear()


def cute_compile(
    fn: Callable,
    *args: Any,
    use_tvm_ffi: Optional[bool] = None,
    options: str = "",
    dump: Optional["dump_ptx"] = None,
):
    """``cute.compile`` with the TVM-FFI option when available; returns (compiled, seconds).

    ``dump``: a :class:`dump_ptx` whose directory receives the PTX (and CUBIN).
    """
    import time

    if use_tvm_ffi is None:
        use_tvm_ffi = HAS_TVM_FFI
    opts = options
    if dump is not None:
        opts = (opts + " " + dump.options()).strip()
    if use_tvm_ffi:
        opts = (opts + " --enable-tvm-ffi").strip()
    t0 = time.perf_counter()
    if opts:
        compiled = cute.compile(fn, *args, options=opts)
    else:
        compiled = cute.compile(fn, *args)
    return compiled, time.perf_counter() - t0


def require_tvm_ffi(hint: str = "") -> None:
    """Raise unless the TVM-FFI (tensor-free) compile path is available."""
    if not HAS_TVM_FFI:
        raise RuntimeError("tensor-free compile needs apache-tvm-ffi" + hint)


def compile_tvm_ffi_cached(cache: "KernelCache", key: Hashable, make_op: Callable[[], Any],
                           fake_args: Callable[[Any], Sequence[Any]],
                           meta: Callable[[Any], Dict[str, Any]] = lambda op: {},
                           dump: Optional["dump_ptx"] = None) -> "CompiledKernel":
    """The kernel of ``key`` in ``cache``, compiled at the first request: ``make_op()``
    compiled on the TVM-FFI path against ``fake_args(op)``, with ``meta(op)`` as its meta.
    With ``dump`` (a :class:`dump_ptx`) it is compiled afresh, uncached, dumping its PTX.

    With ``REPLAYSSM_KERNEL_CACHE_DIR`` set, the compiled code is first looked up in that
    directory and written there after a compile (:class:`DiskEntry`), so later processes load
    it instead of compiling. ``meta`` is rebuilt from ``make_op()`` either way (constructing
    the op is cheap, and its meta may hold objects that do not serialise)."""

    def compile_op(op) -> CompiledKernel:
        compiled, secs = cute_compile(op, *fake_args(op), use_tvm_ffi=True, dump=dump)
        return CompiledKernel(compiled, key, secs, use_ffi=True, meta=meta(op))

    if dump is not None:
        return compile_op(make_op())

    def build() -> CompiledKernel:
        op = make_op()
        entry = DiskEntry.for_key(cache.name, key)
        if entry is None:
            return compile_op(op)
        k = entry.load(key, meta(op))  # no lock needed: entries appear by atomic renames
        if k is None:
            with entry.locked():  # one process compiles a missing entry, the others wait
                k = entry.load(key, meta(op))  # written while this process waited?
                if k is None:
                    entry.remove()  # an unreadable leftover, if any
                    k = compile_op(op)
                    if entry.store(k.compiled, k.compile_seconds, key):
                        cache.disk_stores += 1
        if k.from_disk:
            cache.disk_hits += 1
        return k

    return cache.get_or_compile(key, build)


# --------------------------------------------------------------------------------------
# on-disk cache of compiled kernels (opt-in, shared by processes)
# --------------------------------------------------------------------------------------

#: Directory of the on-disk kernel cache; unset (the default) keeps every compile in-process.
KERNEL_CACHE_DIR_ENV = "REPLAYSSM_KERNEL_CACHE_DIR"

#: Packages whose Python sources fingerprint every disk entry (any edit invalidates them all).
_FINGERPRINTED_PACKAGES = ("cute_kernels", "replayssm_lp")


def kernel_cache_dir() -> Optional[str]:
    """The on-disk cache directory, or None when the disk cache is off: the variable is unset
    or empty, or the classic (non-TVM-FFI) path is in use (only TVM-FFI functions reload)."""
    d = os.environ.get(KERNEL_CACHE_DIR_ENV)
    return d if d and HAS_TVM_FFI else None


def hash_sources(roots: Sequence[Path]) -> str:
    """sha256 over the relative paths and contents of every ``*.py`` under ``roots``."""
    h = hashlib.sha256()
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            data = path.read_bytes()
            h.update(path.relative_to(Path(root).parent).as_posix().encode())
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def source_fingerprint() -> str:
    """Fingerprint of the kernel sources this process runs (read once: later edits on disk do
    not change the code already imported)."""
    base = Path(__file__).resolve().parent.parent
    return hash_sources([base / name for name in _FINGERPRINTED_PACKAGES])


@functools.lru_cache(maxsize=None)
def toolchain_fingerprint() -> Tuple[str, ...]:
    """Versions the exported code depends on: cutlass-dsl, tvm_ffi, Python, and the DSL runtime
    library in use (the DSL ships cu12 and cu13 flavours and picks one per machine)."""
    import tvm_ffi
    from cutlass.base_dsl.env_manager import get_prefix_dsl_libs

    return (cutlass.__version__, tvm_ffi.__version__, platform.python_version(),
            str(get_prefix_dsl_libs("CUTE_DSL")))


def codegen_environment() -> Tuple[Any, ...]:
    """The compile target and every ``REPLAYSSM_*`` / ``CUTE_DSL_*`` variable (but the cache
    directory): several switch kernel variants or tuning knobs without entering every key."""
    env = sorted((k, v) for k, v in os.environ.items()
                 if k.startswith(("REPLAYSSM_", "CUTE_DSL_")) and k != KERNEL_CACHE_DIR_ENV)
    return (arch_key(), tuple(env))


def disk_cache_counts() -> Tuple[int, int]:
    """(kernels loaded from the disk cache, kernels compiled and written to it) by this process."""
    return (sum(c.disk_hits for c in KernelCache.instances),
            sum(c.disk_stores for c in KernelCache.instances))


def entry_digest(cache_name: str, key: Hashable) -> str:
    """Name of the disk entry of ``key`` in the kernel cache ``cache_name``."""
    parts = (cache_name, repr(key), source_fingerprint(), toolchain_fingerprint(),
             codegen_environment())
    return hashlib.sha256(repr(parts).encode()).hexdigest()


class DiskEntry:
    """One compiled kernel in the on-disk cache directory:

    * ``<digest>.o``: the exported object file (host code plus the embedded cubin);
    * ``<digest>.json``: compile seconds, the object's sha256 and, for people, the key; written
      last, so its presence marks a complete entry;
    * ``<digest>.lock``: ``flock``-ed while one process compiles and writes the entry.

    Files are written to temporaries and renamed into place, so readers never see a partial
    entry. A missing, corrupt or unloadable entry is never fatal: it is recompiled."""

    def __init__(self, directory: str, digest: str):
        self.dir = directory
        self.digest = digest
        self.function_name = "replayssm_" + digest[:24]  # unique symbols per loaded module
        base = os.path.join(directory, digest)
        self.object_path, self.info_path, self.lock_path = base + ".o", base + ".json", base + ".lock"

    @classmethod
    def for_key(cls, cache_name: str, key: Hashable) -> Optional["DiskEntry"]:
        """The entry of ``key`` in the kernel cache ``cache_name``; None when the disk cache is off."""
        d = kernel_cache_dir()
        return None if d is None else cls(d, entry_digest(cache_name, key))

    def exists(self) -> bool:
        return os.path.exists(self.info_path)

    def load(self, key: Hashable, meta: Dict[str, Any]) -> Optional[CompiledKernel]:
        """The kernel, or None when the entry is missing or unreadable (digest mismatch, load
        failure); the object's bytes are checked before they reach the linker."""
        if not self.exists():
            return None
        try:
            with open(self.info_path) as f:
                info = json.load(f)
            with open(self.object_path, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != info["object_sha256"]:
                    raise ValueError("the object file does not match its recorded sha256")
            module = cute.runtime.load_module(self.object_path, enable_tvm_ffi=True)
            function = module[self.function_name]
        except Exception as e:  # noqa: BLE001 - any failure means: compile instead
            warnings.warn(f"kernel cache: entry {self.object_path} unreadable "
                          f"({type(e).__name__}: {e}); recompiling")
            return None
        return CompiledKernel.loaded(module, function, key, float(info["compile_seconds"]), meta)

    def store(self, compiled: Any, compile_seconds: float, key: Hashable) -> bool:
        """Export ``compiled`` into this entry; False (with a warning) when the export or a
        write fails: the kernel still runs from memory."""
        tmp_paths = []
        try:
            os.makedirs(self.dir, exist_ok=True)
            fd, tmp_object = tempfile.mkstemp(dir=self.dir, prefix=self.digest, suffix=".o.tmp")
            os.close(fd)
            tmp_paths.append(tmp_object)
            compiled.export_to_c(tmp_object, function_name=self.function_name)
            with open(tmp_object, "rb") as f:
                info = dict(key=repr(key), compile_seconds=compile_seconds,
                            object_sha256=hashlib.sha256(f.read()).hexdigest(),
                            written=time.strftime("%Y-%m-%d %H:%M:%S"))
            fd, tmp_info = tempfile.mkstemp(dir=self.dir, prefix=self.digest, suffix=".json.tmp")
            tmp_paths.append(tmp_info)
            with os.fdopen(fd, "w") as f:
                json.dump(info, f, indent=1)
            os.replace(tmp_object, self.object_path)
            os.replace(tmp_info, self.info_path)
            return True
        except Exception as e:  # noqa: BLE001 - the disk cache is an optimisation only
            warnings.warn(f"kernel cache: could not write {self.object_path} "
                          f"({type(e).__name__}: {e})")
            for path in tmp_paths:
                if os.path.exists(path):
                    os.remove(path)
            return False

    def remove(self) -> None:
        for path in (self.info_path, self.object_path):  # marker first: never half-visible
            if os.path.exists(path):
                os.remove(path)

    @contextlib.contextmanager
    def locked(self):
        """Exclusive ``flock`` of this entry (released by the OS if the process dies)."""
        os.makedirs(self.dir, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock


def compile_keep_ptx(op: Any, args: Sequence[Any], key: Hashable, meta: Dict[str, Any],
                     dump_dir: Optional[str] = None) -> Tuple["CompiledKernel", Optional[str]]:
    """Uncached compile of ``op`` against ``args`` that keeps the PTX: ``(kernel, ptx)``
    (compile-only tests). With ``dump_dir`` the PTX and CUBIN files stay in that directory,
    otherwise the temporary dump directory is removed."""
    with dump_ptx(cubin=dump_dir is not None, dir=dump_dir) as d:
        compiled, secs = cute_compile(op, *args, dump=d)
        k = CompiledKernel(compiled, key, secs, use_ffi=HAS_TVM_FFI, meta=meta)
        k.ptx = d.read() or None
        if dump_dir is None:
            d.cleanup()
    return k, k.ptx


def memo_launch(memo: dict, name: str, key, make, *args):
    """``memo[name][key]``: the launch of one call signature in a cache plan's memo, built by
    ``make(*args)`` on the signature's first call (the launchers' hot path: two dict lookups)."""
    launches = memo.get(name)
    if launches is None:
        launches = memo[name] = {}
    launch = launches.get(key)
    if launch is None:
        launch = launches[key] = make(*args)
    return launch


#: programmatic dependent launch of the step kernels (read at compile time, part of every key):
#: ``0`` off; ``1`` each CTA lets the next grid launch, then waits for the previous one; ``2``
#: waits first, then lets the next grid launch (at most one grid waiting behind); unset: 2 for
#: the decode kernels, 0 for verify / snapshot (:func:`pdl_default`)
PDL_ENV = "REPLAYSSM_PDL"


def _pdl_reader():
    from replayssm_lp._validate import env_reader
    return env_reader((PDL_ENV,))


#: ``pdl_env()`` -> the raw value of REPLAYSSM_PDL in a tuple, for launch-memo keys (~25 ns)
pdl_env = _pdl_reader()


def philox_rounds_for(pair, rounds: Optional[int] = None) -> int:
    """The Philox rounds a build for precision ``pair`` (name or PrecisionPair) bakes in: the
    cache's ``rounds`` (None: the default, 10) where the pair rounds a side stochastically, else
    the default (RN builds draw no words: one build, one key, whatever the cache asks)."""
    from replayssm_lp.formats import PHILOX_ROUNDS
    from replayssm_lp.pairs import parse_pair
    p = parse_pair(pair)
    sr = any(r == "sr" and f != "fp32" for f, r in ((p.rec_fmt, p.rec_rounding),
                                                  (p.read_fmt, p.read_rounding)))
    if not sr or rounds is None:
        return PHILOX_ROUNDS
    return check_philox_rounds(rounds)


def check_philox_rounds(rounds) -> int:
    """``rounds`` checked as the caches check it (an int in ``formats.PHILOX_ROUNDS_RANGE``, else
    their TypeError / ValueError): for builds made without a cache."""
    from replayssm_lp.cache import _check_int
    from replayssm_lp.formats import PHILOX_ROUNDS_RANGE
    return _check_int("philox_rounds", rounds, *PHILOX_ROUNDS_RANGE)


def pdl_default(verify: bool = False) -> int:
    """The programmatic-dependent-launch mode of a step kernel (``REPLAYSSM_PDL``, 0 / 1 / 2, see
    :data:`PDL_ENV`): with it the grid may start while the previous kernel in the stream
    finishes; it waits (``griddepcontrol.wait``) for that grid's completion and memory flush
    before its first global access, so only launch latency and block scheduling overlap. Unset:
    2 for the decode kernels (replay and standard: batch 1 0.4-0.7 µs faster, within 1.6 % from
    batch 32 on, bench/results/session7_gpu/call1), 0 for the verify and snapshot kernels (no gain
    measured there)."""
    v = os.environ.get(PDL_ENV, "")
    if v in ("0", "1", "2"):
        return int(v)
    return 0 if verify else 2


def pdl_mode(pdl: Optional[int], verify: bool = False) -> int:
    """A kernel's PDL mode: ``pdl`` as given, else :func:`pdl_default`."""
    return pdl_default(verify) if pdl is None else int(pdl)


def pdl_prologue(mode: int) -> None:
    """Device code at the very top of a kernel launched with ``use_pdl`` (mode != 0): see
    :data:`PDL_ENV` (everything the step kernels read may come from the previous grid)."""
    if mode == 1:
        cute.arch.griddepcontrol_launch_dependents()
    if mode:
        cute.arch.griddepcontrol_wait()
    if mode == 2:
        cute.arch.griddepcontrol_launch_dependents()


#: bits per stored element of each storage format
FMT_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "nvfp4": 4}


def prefetch_l2_bulk(ptr, nbytes: int) -> None:
    """``cp.async.bulk.prefetch.L2.global``: the TMA unit brings ``nbytes`` (a multiple of 16;
    ``ptr`` 16-byte aligned) from global ``ptr`` into L2 -- one instruction from one thread, no
    register or barrier held; loads issued later hit L2 instead of DRAM."""
    _bulk_prefetch_l2(ptr.toint(), Int32(nbytes))


def _bulk_prefetch_l2(addr, nbytes) -> None:
    """``cp.async.bulk.prefetch.L2.global [addr], nbytes`` (Int64 address, Int32 bytes)."""
    llvm.inline_asm(None, [addr.ir_value(), nbytes.ir_value()],
                    "cp.async.bulk.prefetch.L2.global [$0], $1;", "l,r",
                    has_side_effects=True, is_align_stack=False)


def pf_early_applies(env_name: str, batch: int, row_elems: int, read_fmt: str,
                     max_bytes: int) -> bool:
    """The decode kernels' ``pf_early`` rule (L2 prefetches before the PDL wait, launches without
    a row order): ``env_name`` = 0 / 1 forces; else on while the launch's read copy (``batch``
    rows of ``row_elems`` elements at ``read_fmt``'s width) is at most ``max_bytes`` -- past
    that the prefetches queue behind the running grid's own reads (H200: Mamba-2 fp32 at 16 MiB
    3-5 %, GDN fp32 at 64 MiB and up 5-7 % slower; bench/results/session25_gpu calls 1-2)."""
    v = os.environ.get(env_name, "")
    if v in ("0", "1"):
        return v == "1"
    return batch * row_elems * FMT_BITS[read_fmt] // 8 <= max_bytes


def prefetch_row_cursors(slot, *cursors) -> None:
    """:func:`prefetch_l2` of entry ``slot`` of each per-slot cursor tensor (write_pos,
    ring_origin, flush_count, arrive)."""
    for m in cursors:
        prefetch_l2(m.iterator + slot)


def prefetch_l2_span(ptr, nbytes: int) -> None:
    """:func:`prefetch_l2_bulk` of ``[ptr, ptr + nbytes)`` widened to 16-byte boundaries (no
    alignment asked of ``ptr``; the widened span stays inside the 16-byte granules it touches)."""
    a = ptr.toint()
    a0 = a & Int64(-16)
    n = (((a + Int64(nbytes + 15)) & Int64(-16)) - a0).to(Int32)
    _bulk_prefetch_l2(a0, n)


def load_l2_i32(ptr) -> Int32:
    """``ld.global.cg.b32``: a 32-bit load served by L2, no L1 line allocated. For a value read
    before ``griddepcontrol.wait`` as a hint only: the previous grid may still change it, and a
    stale L1 line must not answer the kernel's own load of it after the wait."""
    return Int32(llvm.inline_asm(T.i32(), [ptr.toint().ir_value()], "ld.global.cg.b32 $0, [$1];",
                                 "=r,l", has_side_effects=True, is_align_stack=False))


def hinted_slot(mIdx, row, has_idx: bool):
    """The cache slot of batch row ``row`` read before ``griddepcontrol.wait``, as a hint for
    L2 prefetches only (:func:`load_l2_i32`: the previous grid may still write it); the row
    itself without ``state_batch_indices``."""
    if const_expr(has_idx):
        return load_l2_i32(mIdx.iterator + cute.crd2idx(row, mIdx.layout))
    return row


def prefetch_l2(ptr) -> None:
    """``prefetch.global.L2``: bring the 128-byte line of the global ``ptr`` (a cute pointer)
    into L2 -- a load issued later hits L2 instead of DRAM; no register is held meanwhile."""
    llvm.inline_asm(None, [ptr.toint().ir_value()], "prefetch.global.L2 [$0];", "l",
                    has_side_effects=True, is_align_stack=False)


# ---- profiling builds (REPLAYSSM_M2_PROF / REPLAYSSM_GDN_PROF): thread 0 of a CTA stamps clocks
def sreg64(name: str) -> Int64:
    """A 64-bit special register (``%clock64`` / ``%globaltimer``), volatile."""
    return Int64(llvm.inline_asm(T.i64(), [], f"mov.u64 $0, %{name};", "=l",
                                 has_side_effects=True, is_align_stack=False))


def smid() -> Int32:
    """The SM this CTA runs on (``%smid``)."""
    return Int32(llvm.inline_asm(T.i32(), [], "mov.u32 $0, %smid;", "=r",
                                 has_side_effects=True, is_align_stack=False))


def prof_store(o32: cute.Tensor, flag, words) -> None:
    """A profiling record over int32 view ``o32``: [smid, flag, then each 64-bit word as lo, hi]
    (read back by ``tests/gpu_scripts/prof_*.py``)."""
    o32[0] = smid()
    o32[1] = flag
    for i in range(len(words)):
        o32[2 + 2 * i] = Int32(words[i] & Int64(0xFFFFFFFF))
        o32[3 + 2 * i] = Int32(words[i] >> Int64(32))


def row_arrive(mArr: cute.Tensor, slot: Int32) -> Int32:
    """Arrive (+1, relaxed, gpu scope) on the row's counter ``mArr[slot]``: its old value."""
    return cute.arch.atomic_add((mArr.iterator + slot).llvm_ptr, Int32(1), sem="relaxed",
                                scope="gpu")


def _cursor_values(pre, mWpos, mOrig, mFcnt, slot):
    """(write_pos, ring_origin, flush_count): from ``pre`` (:func:`load_cursors`) or loaded."""
    if pre is not None:
        return pre[0], pre[1], pre[2]
    return mWpos[slot], mOrig[slot], mFcnt[slot]


@cute.jit
def load_cursors(mWpos: cute.Tensor, mOrig: cute.Tensor, mFcnt: cute.Tensor, slot: Int32,
                 tidx: Int32) -> cute.Tensor:
    """Thread 0 issues the loads of the row's cursors (write_pos, ring_origin, flush_count) into
    a 3-word register tensor without consuming them: a caller that issues a large load next
    keeps these ahead of it; ``read_cursors_and_arrive(..., pre=...)`` finishes."""
    rc = cute.make_rmem_tensor((3,), Int32)
    if tidx == 0:
        rc[0] = mWpos[slot]
        rc[1] = mOrig[slot]
        rc[2] = mFcnt[slot]
    return rc


def _dep_arrive(mArr: cute.Tensor, slot: Int32, w: Int32, o: Int32, f: Int32,
                no_agg: bool = False) -> Int32:
    """The row's arrive without a fence: its increment (1 for cursors below 2^30) is computed
    from the three cursor values, so the atomic cannot be performed before they are read.

    ``no_agg``: the same arrive as ``atom.inc`` with a bound of at least 2^31 - 1 (computed from
    the cursors, the same dependency; the counter never gets near it, so it is old + 1). ptxas
    warp-aggregates an ``atom.add`` it cannot prove single-lane (vote, popc, then a SHFL of the
    result right after the atomic: the issuing warp waits out the round trip there); it cannot
    aggregate an ``inc``."""
    if no_agg:
        bound = (w | o | f) | Int32(0x7FFFFFFF)
        ptr = (mArr.iterator + slot).toint().ir_value()
        return Int32(llvm.inline_asm(T.i32(), [ptr, bound.ir_value()],
                                     "atom.relaxed.gpu.global.inc.u32 $0, [$1], $2;", "=r,l,r",
                                     has_side_effects=True, is_align_stack=False))
    return cute.arch.atomic_add((mArr.iterator + slot).llvm_ptr,
                                Int32(1) + ((w | o | f) >> Int32(30)), sem="relaxed",
                                scope="gpu")


def owns_row(rows: int, h, L: int):
    """Whether a split launch's half (``rows`` 1: the non-flush rows, 2: the flush rows; 0: one
    launch for every row -- the Python constant True, no branch) runs a row at write position
    ``h`` (Int32) of a buffer of ``L`` entries (a decode row flushes when ``h >= L``)."""
    if rows == 1:
        return h < Int32(L)
    if rows == 2:
        return h >= Int32(L)
    return True


@cute.jit
def read_cursors_and_arrive(sCur: cute.Tensor, mWpos: cute.Tensor, mOrig: cute.Tensor,
                            mFcnt: cute.Tensor, mArr: Optional[cute.Tensor], slot: Int32,
                            tidx: Int32, dep_arrive: cutlass.Constexpr = False,
                            arrive_if=None, pre=None, no_agg: cutlass.Constexpr = False) -> Int32:
    """Thread 0 reads the row's cursors (write_pos, ring_origin, flush_count) into ``sCur[0:3]``
    (broadcast after the caller's barrier) and arrives on the row's counter ``mArr[slot]`` right
    away (None: the row is one CTA, nobody to wait for), so the atomic's round trip overlaps the
    CTA's work instead of ending it; the CTA that arrives last moves the cursors at its end
    (after a ``fence.acq_rel``). Every CTA of the row has read the cursors before it
    arrives, so nobody sees the new values in this launch. Returns the counter's old value
    (thread 0; 0 elsewhere).

    ``dep_arrive``: no fence before the arrive; its increment is computed from the three cursor
    values (1 for any cursor below 2^30), so the atomic cannot be performed before they have been
    read -- for callers that issue large loads first (a fence would also wait for those).

    ``arrive_if(write_pos)``: arrive only when it is true (a split launch: the rows another
    launch owns are that launch's to arrive on and publish).

    ``pre``: the cursors already loaded by :func:`load_cursors` (with ``dep_arrive``).

    ``no_agg`` (with ``dep_arrive``): the arrive as an ``atom.inc`` ptxas cannot warp-aggregate
    (:func:`_dep_arrive`)."""
    old = Int32(0)
    if tidx == 0:
        if const_expr(dep_arrive or arrive_if is not None):
            w, o, f = _cursor_values(pre, mWpos, mOrig, mFcnt, slot)
            sCur[0] = w
            sCur[1] = o
            sCur[2] = f
            if const_expr(mArr is not None):
                if const_expr(dep_arrive and arrive_if is not None):
                    if arrive_if(w):
                        old = _dep_arrive(mArr, slot, w, o, f, no_agg)
                elif const_expr(dep_arrive):
                    old = _dep_arrive(mArr, slot, w, o, f, no_agg)
                else:
                    if arrive_if(w):
                        cute.arch.fence_acq_rel_gpu()
                        old = row_arrive(mArr, slot)
        else:
            # (loads and stores interleaved: the order the GPU-timed builds have)
            sCur[0] = mWpos[slot]
            sCur[1] = mOrig[slot]
            sCur[2] = mFcnt[slot]
            if const_expr(mArr is not None):
                cute.arch.fence_acq_rel_gpu()
                old = row_arrive(mArr, slot)
    return old


def fp32_regs(t: Any):
    """An fp32 register copy of register tensor ``t`` (same layout, converted element-wise)."""
    r = cute.make_rmem_tensor_like(t, cutlass.Float32)
    r.store(t.load().to(cutlass.Float32))
    return r


def optional_dtype_name(dtype: Any) -> Optional[str]:
    """:func:`dtype_name`, None for None (optional inputs in cache keys)."""
    return None if dtype is None else dtype_name(dtype)


def dtype_of(t: Any):
    """The dtype of a tensor, None for None (optional inputs in launch keys)."""
    return None if t is None else t.dtype


def from_dlpack_dynamic(t: Any, align_bytes: Optional[int] = None):
    """Classic-path tensor conversion: every shape/stride dynamic except a unit last stride.

    Kernels compiled for the classic path must re-derive static facts (static extents,
    stride divisibility) inside their ``@cute.jit`` host function (``cute.assume``),
    since this marks the whole layout dynamic.
    """
    from cutlass.cute.runtime import from_dlpack

    if t is None:
        return None
    ct = from_dlpack(t, assumed_align=align_bytes)
    if t.dim() > 0 and t.stride(-1) == 1 and t.shape[-1] > 1:
        return ct.mark_layout_dynamic(leading_dim=t.dim() - 1)
    return ct.mark_layout_dynamic()


def current_cu_stream():
    """The current torch CUDA stream as a ``cuda.bindings.driver.CUstream`` (classic path)."""
    import torch
    import cuda.bindings.driver as cuda

    return cuda.CUstream(torch.cuda.current_stream().cuda_stream)


# --------------------------------------------------------------------------------------
# PTX inspection (compile-only tests)
# --------------------------------------------------------------------------------------


class dump_ptx:
    """Context manager giving a fresh directory for PTX / CUBIN dumps of one compile.

    ``CUTE_DSL_KEEP`` is read once when the DSL initialises, so instead of the
    environment this passes ``--keep-ptx [--keep-cubin] --dump-dir DIR`` as compile
    options (see :func:`cute_compile`'s ``dump`` argument)::

        with dump_ptx() as d:
            compiled, secs = cute_compile(fn, *args, dump=d)
        text = d.read()          # concatenated PTX of everything compiled inside
    """

    def __init__(self, cubin: bool = False, dir: Optional[str] = None):
        self.cubin = cubin
        self._fixed_dir = dir
        self.dir: Optional[str] = None

    def options(self) -> str:
        assert self.dir is not None
        opts = f"--keep-ptx --dump-dir {self.dir}"
        if self.cubin:
            opts += " --keep-cubin"
        return opts

    def __enter__(self) -> "dump_ptx":
        if self._fixed_dir is not None:
            os.makedirs(self._fixed_dir, exist_ok=True)
            self.dir = self._fixed_dir
        else:
            self.dir = tempfile.mkdtemp(prefix="cute_ptx_")
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def files(self, ext: str = "ptx"):
        assert self.dir is not None
        return sorted(glob.glob(os.path.join(self.dir, "**", f"*.{ext}"), recursive=True))

    def read(self, ext: str = "ptx") -> str:
        out = []
        for f in self.files(ext):
            with open(f, "r", errors="replace") as fh:
                out.append(fh.read())
        return "\n".join(out)

    def cleanup(self) -> None:
        import shutil

        if self.dir and os.path.isdir(self.dir):
            shutil.rmtree(self.dir, ignore_errors=True)


def ptx_stats(ptx: str) -> Dict[str, int]:
    """Counts of the memory instructions that matter for memory-bound kernels."""
    pats = {
        "ld.global.v4": r"\bld\.global(?:\.[a-zA-Z0-9:_]+)*\.v4\.",
        "st.global.v4": r"\bst\.global(?:\.[a-zA-Z0-9:_]+)*\.v4\.",
        "ld.global.v2": r"\bld\.global(?:\.[a-zA-Z0-9:_]+)*\.v2\.",
        "st.global.v2": r"\bst\.global(?:\.[a-zA-Z0-9:_]+)*\.v2\.",
        "ld.global.scalar": r"\bld\.global(?:\.(?!v[248]\b)[a-zA-Z0-9:_]+)*\.[bfsu](?:8|16|32|64)\s",
        "st.global.scalar": r"\bst\.global(?:\.(?!v[248]\b)[a-zA-Z0-9:_]+)*\.[bfsu](?:8|16|32|64)\s",
        "ld.local": r"\bld\.local\b",
        "st.local": r"\bst\.local\b",
        "shfl": r"\bshfl\.sync\b",
    }
    return {k: len(re.findall(p, ptx)) for k, p in pats.items()}


def ptxas_info(ptx: str, arch: str = "sm_90a") -> Optional[str]:
    """Run ``ptxas -v`` on PTX text if a ptxas binary is on PATH; returns its report.

    Gives registers per thread and spill stores/loads (None when ptxas is absent).
    """
    import shutil
    import subprocess

    exe = shutil.which("ptxas")
    if exe is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as fh:
            fh.write(ptx)
        r = subprocess.run(
            [exe, f"-arch={arch}", "-v", src, "-o", os.path.join(d, "k.cubin")],
            capture_output=True,
            text=True,
        )
        return (r.stdout + r.stderr).strip()
