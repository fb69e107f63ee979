"""The on-disk kernel cache (``REPLAYSSM_KERNEL_CACHE_DIR``, cute_kernels/common.py): entries are
written after a compile, found by a fresh process instead of compiling, named by everything that
changes the generated code, recompiled when corrupt, and compiled once by concurrent processes.

CPU-only: the kernels compile for sm_90a (conftest sets ``CUTE_DSL_ARCH``), and loading an exported
object file needs no driver (``cute.runtime.load_module`` only links the host code; the cubin is
loaded on the first launch), so a loaded function's argument checks are compared with the freshly
compiled one's. The GPU test (skipped here) checks that a kernel loaded from disk computes exactly
what the freshly compiled one does."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cute_kernels import common, replay_commit

from .conftest import requires_sm90

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def disk_cache(tmp_path, monkeypatch):
    """A fresh cache directory, and a fresh in-process cache of the replay-commit kernels (as in a
    new process); returns the directory."""
    monkeypatch.setenv(common.KERNEL_CACHE_DIR_ENV, str(tmp_path))
    fresh_process(monkeypatch)
    return tmp_path


def fresh_process(monkeypatch) -> common.KernelCache:
    cache = common.KernelCache("replay_commit")
    monkeypatch.setattr(replay_commit, "_CACHE", cache)
    return cache


def forbid_compiles(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("compiled although the kernel is on disk")
    monkeypatch.setattr(common, "cute_compile", fail)


def entry_files(directory):
    return sorted(p.suffix for p in Path(directory).iterdir())


def call_error(fn, *args):
    """The error TVM-FFI raises checking the arguments (CPU tensors: no launch is attempted)."""
    with pytest.raises(Exception) as e:
        fn(*args)
    return f"{type(e.value).__name__}: {e.value}"


def test_off_without_the_variable(monkeypatch):
    monkeypatch.delenv(common.KERNEL_CACHE_DIR_ENV, raising=False)
    assert common.kernel_cache_dir() is None
    assert common.DiskEntry.for_key("replay_commit", ("k",)) is None
    monkeypatch.setenv(common.KERNEL_CACHE_DIR_ENV, "")
    assert common.kernel_cache_dir() is None


def test_off_on_the_classic_path(tmp_path, monkeypatch):
    monkeypatch.setenv(common.KERNEL_CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(common, "HAS_TVM_FFI", False)
    assert common.DiskEntry.for_key("replay_commit", ("k",)) is None


def test_compile_writes_an_entry_a_new_process_loads(disk_cache, monkeypatch):
    fresh = replay_commit.compile_replay_commit(True)
    assert not fresh.from_disk and replay_commit._CACHE.disk_stores == 1
    assert entry_files(disk_cache) == [".json", ".lock", ".o"]
    info = json.loads(next(disk_cache.glob("*.json")).read_text())
    assert info["key"] == repr(fresh.key) and info["compile_seconds"] == fresh.compile_seconds

    cache = fresh_process(monkeypatch)
    forbid_compiles(monkeypatch)
    loaded = replay_commit.compile_replay_commit(True)
    assert loaded.from_disk and cache.disk_hits == 1 and cache.disk_stores == 0
    assert common.disk_cache_counts()[0] >= 1
    assert loaded.key == fresh.key and loaded.compile_seconds == fresh.compile_seconds
    # same calling convention: positional torch tensors, no stream; the same argument checks
    i32 = lambda n: torch.zeros(n, dtype=torch.int32)  # noqa: E731
    for args in [(i32(4), i32(4), i32(8), i32(8), -1), (i32(4),)]:
        assert call_error(loaded.ffi, *args) == call_error(fresh.ffi, *args)
    assert replay_commit.compile_replay_commit(True) is loaded  # then the in-process cache


def test_entries_are_per_variant(disk_cache):
    replay_commit.compile_replay_commit(True)
    replay_commit.compile_replay_commit(False)
    assert len(list(disk_cache.glob("*.o"))) == 2


def test_entry_name_follows_everything_that_changes_the_code(monkeypatch):
    monkeypatch.delenv("REPLAYSSM_M2_STAGED", raising=False)
    base = common.entry_digest("mamba2_replay", ("mamba2_replay", "sm_90", 16))
    assert common.entry_digest("mamba2_replay", ("mamba2_replay", "sm_90", 16)) == base
    assert common.entry_digest("mamba2_replay", ("mamba2_replay", "sm_90", 32)) != base
    assert common.entry_digest("mamba2_verify", ("mamba2_replay", "sm_90", 16)) != base
    monkeypatch.setenv("REPLAYSSM_M2_STAGED", "0")  # a codegen switch outside the key
    assert common.entry_digest("mamba2_replay", ("mamba2_replay", "sm_90", 16)) != base
    monkeypatch.delenv("REPLAYSSM_M2_STAGED")
    monkeypatch.setenv(common.KERNEL_CACHE_DIR_ENV, "/elsewhere")  # where it lives is not part
    assert common.entry_digest("mamba2_replay", ("mamba2_replay", "sm_90", 16)) == base
    monkeypatch.setattr(common, "source_fingerprint", lambda: "edited sources")
    assert common.entry_digest("mamba2_replay", ("mamba2_replay", "sm_90", 16)) != base


def test_source_fingerprint_sees_every_python_file(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("X = 1\n")
    (pkg / "sub" / "b.py").write_text("Y = 2\n")
    base = common.hash_sources([pkg])
    (pkg / "notes.txt").write_text("not code")
    assert common.hash_sources([pkg]) == base
    (pkg / "sub" / "b.py").write_text("Y = 3\n")
    assert common.hash_sources([pkg]) != base
    (pkg / "sub" / "b.py").write_text("Y = 2\n")
    (pkg / "sub" / "b.py").rename(pkg / "sub" / "c.py")
    assert common.hash_sources([pkg]) != base
    assert len(common.source_fingerprint()) == 64


@pytest.mark.parametrize("damage", ["object bytes", "truncated info", "object missing"])
def test_a_corrupt_entry_is_recompiled(disk_cache, monkeypatch, damage):
    replay_commit.compile_replay_commit(True)
    obj, info = next(disk_cache.glob("*.o")), next(disk_cache.glob("*.json"))
    if damage == "object bytes":
        data = bytearray(obj.read_bytes())
        data[len(data) // 2] ^= 0xFF
        obj.write_bytes(bytes(data))
    elif damage == "truncated info":
        info.write_text(info.read_text()[:20])
    else:
        obj.unlink()

    cache = fresh_process(monkeypatch)
    with pytest.warns(UserWarning, match="unreadable"):
        k = replay_commit.compile_replay_commit(True)
    assert not k.from_disk and cache.disk_hits == 0 and cache.disk_stores == 1

    cache = fresh_process(monkeypatch)  # the rewritten entry is good again
    forbid_compiles(monkeypatch)
    assert replay_commit.compile_replay_commit(True).from_disk and cache.disk_hits == 1


class _ExportFails:
    """A compiled kernel whose export fails (a full disk, say)."""

    def __init__(self, compiled):
        self.compiled = compiled

    def __tvm_ffi_object__(self):
        return self.compiled.__tvm_ffi_object__()

    def export_to_c(self, *args, **kwargs):
        raise OSError("disk full")


def test_a_failed_export_is_not_fatal(disk_cache, monkeypatch):
    real_compile = common.cute_compile

    def compile_without_export(*args, **kwargs):
        compiled, secs = real_compile(*args, **kwargs)
        return _ExportFails(compiled), secs
    monkeypatch.setattr(common, "cute_compile", compile_without_export)
    with pytest.warns(UserWarning, match="could not write"):
        k = replay_commit.compile_replay_commit(True)
    assert k.ffi is not None and not k.from_disk
    assert entry_files(disk_cache) == [".lock"]  # no temporaries left behind


_CONCURRENT = """
import json
from cute_kernels import replay_commit
replay_commit.compile_replay_commit(True)
print(json.dumps([replay_commit._CACHE.disk_hits, replay_commit._CACHE.disk_stores]))
"""


def _pythonpath() -> str:
    """The repository first, then the caller's PYTHONPATH (on the GPU machine the CuTe DSL bundle
    is only importable through it)."""
    return os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)


def test_concurrent_processes_compile_a_missing_entry_once(tmp_path):
    env = dict(os.environ, PYTHONPATH=_pythonpath(), CUTE_DSL_ARCH="sm_90a")
    env[common.KERNEL_CACHE_DIR_ENV] = str(tmp_path)
    procs = [subprocess.Popen([sys.executable, "-c", _CONCURRENT], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    counts = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        counts.append(json.loads(out.strip().splitlines()[-1]))
    hits, stores = map(sum, zip(*counts))
    assert (hits, stores) == (2, 1), counts


# ------------------------------------------------------------------------------------------------
# GPU: a kernel loaded from disk computes exactly what the freshly compiled one does
# ------------------------------------------------------------------------------------------------
_GPU_RUN = """
import json, sys
import torch
import replayssm_lp as R
from cute_kernels import common
from replayssm_lp.library import cache_tensors

out_path, forbid = sys.argv[1], sys.argv[2] == "forbid-compiles"
if forbid:
    def fail(*a, **k):
        raise AssertionError("compiled although every kernel is on disk")
    common.cute_compile = fail
torch.manual_seed(0)
dev, act, L, pool, batch = "cuda", torch.bfloat16, 4, 12, 5
r = lambda *s: torch.randn(*s, device=dev)
sbi = torch.tensor([3, -1, 7, 0, 10], dtype=torch.int32, device=dev)
results = []
H, P, N, G = 8, 64, 128, 2
m2 = R.Mamba2ReplayCache(pool, H, P, N, G, precision="nvfp4/fp16sr", buffer_len=L, max_draft=2,
                         act_dtype=act, device=dev, seed=7)
m2.init_from_state(list(range(pool)), r(pool, H, P, N) * 0.5)
A, D, bias = -torch.rand(H, device=dev) - 0.1, r(H), r(H) * 0.3
for step in range(2 * L + 1):  # decode steps through a flush, then a verify + commit
    out = torch.zeros(batch, H, P, device=dev, dtype=act)
    R.mamba2_decode(m2, r(batch, H, P).to(act), r(batch, H), A, r(batch, G, N).to(act),
                    r(batch, G, N).to(act), D, None, bias, True, sbi, out=out, backend="cute")
    results.append(out)
out = torch.zeros(batch, 2, H, P, device=dev, dtype=act)
R.mamba2_verify(m2, r(batch, 2, H, P).to(act), r(batch, 2, H), A, r(batch, 2, G, N).to(act),
                r(batch, 2, G, N).to(act), D, None, bias, True, sbi, out=out, backend="cute")
R.commit(m2, torch.tensor([2, 0, 1, 0, 2], dtype=torch.int32, device=dev), sbi, backend="cute")
results += [out] + list(cache_tensors(m2))
H, HV, K, V = 2, 4, 128, 128
gdn = R.GDNReplayCache(pool, H, HV, K, V, precision="nvfp4/fp16sr", buffer_len=L, act_dtype=act,
                       device=dev, seed=7)
gdn.init_from_state(list(range(pool)), r(pool, HV, V, K) * 0.3)
for step in range(L + 1):
    out = torch.zeros(batch, HV, V, device=dev, dtype=act)
    R.gdn_decode(gdn, r(batch, H, K).to(act), r(batch, H, K).to(act), r(batch, HV, V).to(act),
                 A_log=r(HV) * 0.5, a=r(batch, HV), dt_bias=r(HV) * 0.3, b=r(batch, HV),
                 state_batch_indices=sbi, out=out, backend="cute")
    results.append(out)
results += list(cache_tensors(gdn))
torch.save([t.cpu().view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t.cpu()
            for t in results], out_path)
import cute_kernels.mamba2_replay as m2r, cute_kernels.gdn_replay as gr
print(json.dumps({"hits": m2r._CACHE.disk_hits + gr._CACHE.disk_hits,
                  "stores": m2r._CACHE.disk_stores + gr._CACHE.disk_stores}))
"""


@requires_sm90
def test_loaded_kernels_compute_what_fresh_ones_do(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CUTE_DSL_ARCH"}  # the real device's arch
    env.update(PYTHONPATH=_pythonpath(), **{common.KERNEL_CACHE_DIR_ENV: str(tmp_path / "kernels")})
    runs = []
    for name, mode in (("fresh", "compile"), ("loaded", "forbid-compiles")):
        out = tmp_path / f"{name}.pt"
        p = subprocess.run([sys.executable, "-c", _GPU_RUN, str(out), mode], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append((json.loads(p.stdout.strip().splitlines()[-1]), torch.load(out)))
    (first, fresh), (second, loaded) = runs
    assert first["hits"] == 0 and first["stores"] >= 2, first
    assert second["stores"] == 0 and second["hits"] == first["stores"], second
    assert len(fresh) == len(loaded)
    for i, (a, b) in enumerate(zip(fresh, loaded)):
        assert torch.equal(a, b), f"result {i} differs"
