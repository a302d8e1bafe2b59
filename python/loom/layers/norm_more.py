"""Normalizations with their own statistics and the AUC metric layer: data_norm,
spectral_norm and auc (Fluid 1.8's signatures and math)."""

__all__ = []
