"""Networks on paper: per-layer counts, receptive field, device catalog, PALEO time model."""
