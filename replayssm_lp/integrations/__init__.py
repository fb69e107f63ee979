"""Integrations with model libraries.

* :mod:`replayssm_lp.integrations.transformers` — ``patch(model)`` / ``unpatch(model)`` for the
  Hugging Face transformers Mamba-2 (Mamba2, NemotronH) and Gated DeltaNet (Qwen3-Next, Qwen3.5,
  Qwen3.5-MoE) layers. Needs ``pip install "replayssm-lp[transformers]"``.

Submodules are imported on demand so that ``import replayssm_lp`` never needs transformers.
"""
__all__ = ["transformers"]
