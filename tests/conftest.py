import os

import pytest
import torch

# CuTe kernels compile for Hopper on CPU-only machines.
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def cuda_sm90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


requires_sm90 = pytest.mark.skipif(not cuda_sm90(), reason="needs an sm_90+ CUDA GPU (none on this machine)")


@pytest.fixture
def seed():
    """Fresh random inputs every run; the seed is printed on failure."""
    s = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(s)
    return s
