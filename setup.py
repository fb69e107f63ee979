from setuptools import find_packages, setup

setup(
    name="replayssm-lp",
    version="0.1.0",
    description="ReplaySSM decode kernels (CuTe DSL) for Mamba-2 and Gated DeltaNet with a split-precision state",
    packages=find_packages(include=["replayssm_lp", "replayssm_lp.*", "cute_kernels", "cute_kernels.*",
                                    "bench", "bench.*"]),
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.4",
        "numpy",
        "nvidia-cutlass-dsl[cu13]==4.8.1",
        "cuda-bindings>=13.0",
        "apache-tvm-ffi>=0.1.15",
    ],
    extras_require={
        # fla-core: only its torch reference (naive.py) is loaded, by tests/test_peer_references.py
        "test": ["pytest>=8", "pytest-timeout", "pytest-xdist>=3", "einops", "fla-core==0.6.0"],
        "bench": ["matplotlib", "tqdm"],
        "transformers": ["transformers>=5.21,<6"],
    },
    entry_points={"console_scripts": ["replayssm-bench=bench.__main__:main"]},
)
